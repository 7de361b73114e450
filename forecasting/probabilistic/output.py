"""Forecast frames with intervals and quantiles, in the neuralforecast column convention.

* long: ``unique_id, ds, y_hat, y_hat-lo-80, y_hat-hi-80, ..., y_hat-q0.1, ...``
* wide: ``<date>, <col>, <col>-lo-80, <col>-hi-80, ..., <col>-q0.1, ...`` per column

:func:`forecast_bands` picks where intervals come from: the head itself (quantile /
distribution losses) or a conformal :class:`Calibration` of a point model. The source is
recorded in ``frame.attrs["interval_method"]`` (e.g. ``"split-conformal"``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from tsmix.errors import TsmixError
from tsmix.forecasting.probabilistic.conformal import Calibration
from tsmix.forecasting.probabilistic.heads import Head
from tsmix.forecasting.probabilistic.spec import check_levels, check_quantiles, format_level, format_quantile

Bands = Mapping[float, tuple[Any, Any]]  # level -> (lo, hi), each (..., H, C)


def forecast_bands(head: Head, out: torch.Tensor, levels: Sequence[float],
                   calibration: Calibration | None = None,
                   scale: Any = None) -> tuple[str, dict[float, tuple[Any, Any]]]:
    """(method, {level: (lo, hi)}) for the head output ``out``; the head's own intervals first.

    ``scale`` (..., C): the forecast windows' input scale, which a scaled conformal calibration needs
    (:func:`~tsmix.forecasting.probabilistic.conformal.window_scale`)."""
    levels = check_levels(levels)
    if head.has_intervals:
        adjusted = conformal_head_bands(head, out, calibration, scale)
        bands = {lv: _level_band(adjusted, lv) or head.interval(out, lv) for lv in levels}
        return interval_method(head, calibration, levels), bands
    if calibration is None:
        raise TsmixError(
            f"level={list(levels)} needs intervals, but this model was trained with loss={head.name!r} "
            "and has no conformal calibration; refit it (fit calibrates on validation) or use "
            "loss='quantile', 'normal' or 'studentt'"
        )
    point = head.point(out)
    return calibration.method, {lv: calibration.interval(point, lv, scale) for lv in levels}


def forecast_quantiles(head: Head, out: torch.Tensor, quantiles: Sequence[float],
                       calibration: Calibration | None = None, scale: Any = None) -> dict[float, Any]:
    """{q: (..., H, C)} quantiles of the head output: the head's own, else a point model's conformal
    ones (the bounds of central intervals); a point head without calibration: one-line TsmixError."""
    qs = check_quantiles(quantiles)
    if head.has_intervals or calibration is None:
        values = head.quantiles(out, qs)  # (..., H, Q, C)
    else:
        values = calibration.quantiles(head.point(out), qs, scale)
    result = {q: values[..., i, :] for i, q in enumerate(qs)}
    adjusted = conformal_head_bands(head, out, calibration, scale) if head.has_intervals else {}
    for q in qs:  # q < 0.5 is the lower bound of the central 100(1 - 2q)% interval: it moves with it
        band = _level_band(adjusted, round(abs(200.0 * q - 100.0), 9)) if abs(q - 0.5) > 1e-9 else None
        if band is not None:
            result[q] = band[0] if q < 0.5 else band[1]
    return result


def conformal_head_bands(head: Head, out: torch.Tensor, calibration: Calibration | None,
                         scale: Any) -> dict[float, tuple[Any, Any]]:
    """{level: (lo, hi)} of every level a CQR calibration adjusts ({} without one): the head's own
    bounds moved by the calibration, kept around the point forecast, and nested (a wider level's
    band contains the narrower ones) so the quantile columns never cross."""
    if calibration is None or not calibration.adjusts_head:
        return {}
    point = head.point(out)
    cat = torch if isinstance(point, torch.Tensor) else np
    bands: dict[float, tuple[Any, Any]] = {}
    inner_lo = inner_hi = point
    for lv in sorted(calibration.levels):
        lo, hi = calibration.adjust(*head.interval(out, lv), lv, scale)
        inner_lo, inner_hi = cat.minimum(lo, inner_lo), cat.maximum(hi, inner_hi)
        bands[lv] = (inner_lo, inner_hi)
    return bands


def _level_band(bands: Mapping[float, tuple[Any, Any]], level: float) -> tuple[Any, Any] | None:
    return next((b for lv, b in bands.items() if abs(lv - level) < 1e-9), None)


def interval_method(head: Head, calibration: Calibration | None, levels: Sequence[float]) -> str | None:
    """Where the ``levels``' intervals come from: the head (``quantile``), its conformalized bounds
    (``quantile+conformal (scaled)``, when every level was calibrated), both (named per level), or a
    point model's calibration; None without intervals."""
    if not head.has_intervals:
        return calibration.method if calibration is not None else None
    if calibration is None or not calibration.adjusts_head:
        return head.name
    done = [lv for lv in levels if calibration.has_level(lv)]
    if len(done) == len(levels):
        return calibration.method
    if not done:
        return head.name
    return f"{head.name} (conformalized at {', '.join(format_level(lv) for lv in done)})"


def interval_columns(name: str, level: float) -> tuple[str, str]:
    """``("y_hat-lo-80", "y_hat-hi-80")``."""
    return f"{name}-lo-{format_level(level)}", f"{name}-hi-{format_level(level)}"


def quantile_column(name: str, q: float) -> str:
    """``"y_hat-q0.1"``."""
    return f"{name}-q{format_quantile(q)}"


def _np(x: Any) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def _columns_for(name: str, point: np.ndarray, bands: Bands,
                 quantiles: Mapping[float, Any]) -> dict[str, np.ndarray]:
    """{column: (H,) or (H, C) values} for one name in output order: point, bands by level, quantiles."""
    cols = {name: point}
    for lv in sorted(bands):
        lo_name, hi_name = interval_columns(name, lv)
        cols[lo_name], cols[hi_name] = _np(bands[lv][0]), _np(bands[lv][1])
    for q in sorted(quantiles):
        cols[quantile_column(name, q)] = _np(quantiles[q])
    return cols


def _check_shape(point: np.ndarray, ds: Any, labels: Sequence[str], what: str) -> None:
    if point.ndim != 2 or point.shape != (len(ds), len(labels)):
        raise TsmixError(f"point forecast must be (H={len(ds)}, {what}={len(labels)}), got {point.shape}")


def long_frame(point: Any, ds: Any, unique_ids: Sequence[str], bands: Bands | None = None,
               quantiles: Mapping[float, Any] | None = None, *, method: str | None = None,
               name: str = "y_hat") -> pd.DataFrame:
    """Long frame, one row per (series, step), series in ``unique_ids`` order.

    ``point`` and every band / quantile array are (H, C) with C = len(unique_ids).
    """
    point = _np(point)
    _check_shape(point, ds, unique_ids, "series")
    h, c = point.shape
    frame = {"unique_id": np.repeat(np.asarray(unique_ids, dtype=object), h),
             "ds": np.tile(np.asarray(ds), c)}
    for col, values in _columns_for(name, point, bands or {}, quantiles or {}).items():
        frame[col] = values.T.reshape(-1)  # (C, H) flattened: series-major like unique_id
    out = pd.DataFrame(frame)
    if bands and method:
        out.attrs["interval_method"] = method
    return out


def wide_frame(point: Any, ds: Any, columns: Sequence[str], bands: Bands | None = None,
               quantiles: Mapping[float, Any] | None = None, *, method: str | None = None,
               date_col: str = "date") -> pd.DataFrame:
    """Wide frame: the date column, then per series ``<col>``, its bands and quantiles."""
    point = _np(point)
    _check_shape(point, ds, columns, "columns")
    frame: dict[str, Any] = {date_col: ds}
    for j, col in enumerate(columns):
        per_band = {lv: (_np(lo)[:, j], _np(hi)[:, j]) for lv, (lo, hi) in (bands or {}).items()}
        per_q = {q: _np(v)[:, j] for q, v in (quantiles or {}).items()}
        frame.update(_columns_for(col, point[:, j], per_band, per_q))
    out = pd.DataFrame(frame)
    if bands and method:
        out.attrs["interval_method"] = method
    return out
