"""Calendar covariates (Informer's "timeF"): position in the hour/day/week/year scaled to [-0.5, 0.5]."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tsmix.datasets.errors import DataError

_MIN, _HOUR, _DAY = 60 * 10**9, 3600 * 10**9, 86_400 * 10**9


# Each feature as a function of the index, so only the chosen ones are computed.
_FEATURES = {
    "minute_of_hour": lambda i: i.minute / 59.0 - 0.5,
    "hour_of_day": lambda i: i.hour / 23.0 - 0.5,
    "day_of_week": lambda i: i.day_of_week / 6.0 - 0.5,
    "day_of_month": lambda i: (i.day - 1) / 30.0 - 0.5,
    "day_of_year": lambda i: (i.day_of_year - 1) / 365.0 - 0.5,
    "week_of_year": lambda i: (i.isocalendar().week.to_numpy() - 1) / 52.0 - 0.5,
    "month_of_year": lambda i: (i.month - 1) / 11.0 - 0.5,
}


def feature_names(timestamps: np.ndarray | pd.DatetimeIndex) -> tuple[str, ...]:
    """Which features resolve the sampling step: finer data gets the finer positions."""
    step = int(np.median(np.diff(pd.DatetimeIndex(timestamps).as_unit("ns").asi8)))  # absolute ns
    if step < _HOUR:
        return ("minute_of_hour", "hour_of_day", "day_of_week", "day_of_month", "day_of_year")
    if step < _DAY:
        return ("hour_of_day", "day_of_week", "day_of_month", "day_of_year")
    if step < 7 * _DAY:
        return ("day_of_week", "day_of_month", "day_of_year")
    if step < 28 * _DAY:
        return ("day_of_month", "week_of_year")
    return ("month_of_year",)


def time_features(timestamps: np.ndarray | pd.DatetimeIndex) -> tuple[np.ndarray, tuple[str, ...]]:
    """(T, K) float32 calendar features and their names, for stamps at least 2 apart.

    A zoned DatetimeIndex (``Series.index``) gives the positions in its local time.
    """
    names = feature_names(timestamps)
    return named_features(timestamps, names), names


def named_features(timestamps: np.ndarray | pd.DatetimeIndex, names: tuple[str, ...]) -> np.ndarray:
    """(T, K) float32 calendar features ``names`` (as :func:`feature_names` chose them at fit time) of
    any stamps, one row or more: a window to forecast from gets the features its model was trained on."""
    unknown = [n for n in names if n not in _FEATURES]
    if unknown:
        raise DataError(f"unknown calendar features {unknown} (a damaged run directory?); known: "
                        f"{', '.join(_FEATURES)}")
    idx = pd.DatetimeIndex(timestamps)
    return np.stack([np.asarray(_FEATURES[n](idx), dtype=np.float32) for n in names], axis=1)
