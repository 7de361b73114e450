"""Backtests: rolling forecast origins over the end of each series, scored per cutoff and overall.

``cross_validation(est, df, n_windows=, step=, refit=)`` places ``n_windows`` forecast windows of
``horizon`` steps at each series' end, ``step`` rows apart (the last one ends at the series' last
row). The estimator (a ``PanelForecaster`` for long frames, the wide ``Forecaster`` for one time
grid, or a factory returning either) is fitted on the rows before the first window's cutoff
(``refit=False``), before every cutoff (``True``) or every ``k`` windows (``refit=k``) — always a
fresh copy with the same parameters and seed, so the estimator passed in is left as it was. Every
forecast goes through the estimator's public ``predict`` with the history up to its cutoff (and, for
future covariates, their actual values over the window). ``level=[80, 95]`` / ``quantiles=[...]`` add
the model's interval / quantile columns (``y_hat-lo-80``, ``y_hat-hi-80``, ``y_hat-q0.1``: its head's,
or a point model's conformal ones) and, per level, the empirical coverage and mean width (original
units) to the metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.metrics import mean_absolute_error, mean_squared_error

from tsmix.errors import TsmixError
from tsmix.forecasting.backtest_data import Target, target_for
from tsmix.forecasting.probabilistic.output import interval_columns
from tsmix.forecasting.probabilistic.spec import format_level

Estimator = Any  # PanelForecaster | Forecaster (fit / predict / get_params)
Factory = Callable[[], Estimator]


@dataclass(frozen=True)
class Backtest:
    """The forecasts of every window and their scores (original units)."""

    frame: pd.DataFrame  # long: id, ds, cutoff, y, y_hat (+ y_hat-lo-80, ... when level was asked)
    metrics: dict[str, float]  # overall mse, mae, mase, smape (+ coverage-80, width-80, ...) over every row
    per_cutoff: pd.DataFrame  # one row per cutoff: cutoff, mse, mae, mase, smape (+ coverage, width), rows
    season_length: int  # m of MASE's in-sample seasonal naive error
    id_col: str = "unique_id"
    time_col: str = "ds"
    level: tuple[float, ...] = ()  # interval levels in the frame

    def plot(self, path: str | Path, series: list[str] | None = None, max_series: int = 3) -> Path:
        """PNG of forecasts against actuals, one panel per series, one line per cutoff (Agg)."""
        from tsmix.forecasting.backtest_plot import plot_backtest

        return plot_backtest(self, path, series, max_series)


def smape(y: np.ndarray, y_hat: np.ndarray) -> float:
    """Symmetric MAPE in percent, 0..200 (M4's definition); a row with y = y_hat = 0 counts 0."""
    den = np.abs(y) + np.abs(y_hat)
    ratio = np.divide(2 * np.abs(y - y_hat), den, out=np.zeros_like(den, dtype=np.float64), where=den > 0)
    return float(100 * ratio.mean())


def season_length(freq: str) -> int:
    """The seasonal period MASE uses: a day for sub-daily data (24 hourly, 96 every 15 min), a week for
    daily (7; 5 for business days), 52 weekly, 12 monthly, 4 quarterly, 1 otherwise."""
    off = pd.tseries.frequencies.to_offset(freq)
    name = off.rule_code.split("-")[0]
    calendar = {"B": 5, "W": 52, "MS": 12, "ME": 12, "M": 12, "BMS": 12, "BME": 12, "QS": 4, "QE": 4, "Q": 4}
    if name in calendar:
        return calendar[name]
    try:
        step = pd.Timedelta(off)
    except ValueError:
        return 1
    day = pd.Timedelta(days=1)
    if step == day:
        return 7
    return int(day / step) if step < day and day % step == pd.Timedelta(0) else 1


def _naive_scale(y: np.ndarray, m: int) -> float:
    """In-sample mean absolute error of the seasonal naive forecast y[t] = y[t - m]."""
    if len(y) <= m:
        return float("nan")
    return float(np.abs(y[m:] - y[:-m]).mean())


def _scores(part: pd.DataFrame, scale: pd.Series, id_col: str, levels: tuple[float, ...] = ()
            ) -> dict[str, float]:
    y, yh = part["y"].to_numpy(np.float64), part["y_hat"].to_numpy(np.float64)
    mae_s = (part["y"] - part["y_hat"]).abs().groupby(part[id_col], sort=False).mean()
    ratio = mae_s / scale.reindex(mae_s.index)
    ratio = ratio[np.isfinite(ratio)]  # a constant training part (scale 0) has no MASE
    out = {"mse": float(mean_squared_error(y, yh)), "mae": float(mean_absolute_error(y, yh)),
           "mase": float(ratio.mean()) if len(ratio) else float("nan"), "smape": smape(y, yh)}
    for lv in levels:  # original units: the backtest frame's own values
        lo, hi = (part[c].to_numpy(np.float64) for c in interval_columns("y_hat", lv))
        out[f"coverage-{format_level(lv)}"] = float(((lo <= y) & (y <= hi)).mean())
        out[f"width-{format_level(lv)}"] = float((hi - lo).mean())
    return {**out, "rows": len(part)}


def _refit_every(refit: bool | int, n_windows: int) -> int:
    if isinstance(refit, bool):
        return 1 if refit else n_windows
    if not isinstance(refit, (int, np.integer)) or refit < 1:
        raise TsmixError(f"refit must be False, True or a positive int (refit every k windows), "
                         f"got {refit!r}")
    return int(refit)


def _check_windows(target: Target, n_windows: int, step: int, need: int) -> None:
    for name, v in (("n_windows", n_windows), ("step", step)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise TsmixError(f"{name} must be a positive int, got {v!r}")
    first = target.lengths - target.horizon - (n_windows - 1) * step  # rows before the first cutoff
    short = int(np.argmin(first))
    if first[short] < need:
        raise TsmixError(
            f"n_windows={n_windows} with step={step} leaves series {target.ids[short]!r} "
            f"({target.lengths[short]} rows) only {first[short]} rows before the first cutoff, but a fit "
            f"needs {need}: lower n_windows or step")


def cross_validation(estimator: Estimator | Factory, df: Any, *, n_windows: int = 1, step: int | None = None,
                     refit: bool | int = False, static_df: Any = None, season: int | None = None,
                     level: Sequence[float] | None = None, quantiles: Sequence[float] | None = None
                     ) -> Backtest:
    """Rolling-origin backtest of ``estimator`` (or a factory of fresh ones) on ``df``.

    ``step``: rows between cutoffs (default: the horizon, windows side by side). ``season``: MASE's
    seasonal period (default from the frequency, :func:`season_length`). MASE divides each series' MAE
    by the seasonal naive in-sample MAE of its rows before the first cutoff (its first training part).
    ``level`` / ``quantiles``: interval / quantile columns in the frame (a model with neither intervals
    nor conformal calibration: a one-line error from its ``predict``, at the first forecast).
    """
    target = target_for(estimator, df, static_df)
    target.ask(level, quantiles)
    step = target.horizon if step is None else step
    _check_windows(target, n_windows, step, target.min_rows)
    every = _refit_every(refit, n_windows)
    # (S,) rows before each window's first forecast step, earliest window first
    cuts = [target.lengths - target.horizon - (n_windows - 1 - k) * step for k in range(n_windows)]
    frames, fitted = [], None
    for k, cut in enumerate(cuts):
        if k % every == 0:
            fitted = target.fit(cut)
        frames.append(target.forecast(fitted, cut))
    frame = pd.concat(frames, ignore_index=True)
    m = season_length(target.freq) if season is None else int(season)
    scale = pd.Series({sid: _naive_scale(target.values(i, int(cuts[0][i])), m)
                       for i, sid in enumerate(target.ids)}, dtype=np.float64)
    levels = target.level or ()
    per_cutoff = pd.DataFrame([{"cutoff": c, **_scores(g, scale, target.id_col, levels)}
                               for c, g in frame.groupby("cutoff", sort=True)])
    return Backtest(frame=frame, metrics=_scores(frame, scale, target.id_col, levels), per_cutoff=per_cutoff,
                    season_length=m, id_col=target.id_col, time_col=target.time_col, level=levels)
