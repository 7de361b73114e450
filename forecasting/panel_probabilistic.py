"""Intervals, quantiles and probabilistic scores of panel models, via ``tsmix.forecasting.probabilistic``.

A quantile / distribution model's intervals come from its head. A point model (``loss="mse"`` /
``"mae"``) is calibrated by split conformal on its validation residuals, **per horizon step and per
series**: :class:`PanelCalibration` keeps every validation window's absolute scaled residuals
``|y - y_hat|`` (N, H) with the series of each window, and turns them into a
:class:`~tsmix.forecasting.probabilistic.Calibration` for the series and levels asked, by
:func:`~tsmix.forecasting.probabilistic.fit_conformal` with the series as its channels.

A series with too few validation windows for a level (``fit_conformal`` needs
``n >= level / (100 - level)``: 4 for 80%, 19 for 95%) and a series unseen in training take the
radius **pooled over every series' windows** instead; the interval method then reads
``"split-conformal (pooled)"`` (every series pooled) or ``"split-conformal (per series; pooled for k of
S series)"``, and ``"split-conformal (per series)"`` when no series was pooled. With the default
``val_size`` (one horizon) each series has a single validation window, so the radii are pooled;
``val_size = horizon + 19 - 1`` or more gives each series enough windows for 95%.

Every radius, bound and score is in each series' scaled units (as MSE); forecasts are mapped back to
original units per series as locations (``* scale + mean``), which keeps bounds ordered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from tsmix.errors import TsmixError
from tsmix.forecasting.probabilistic import (
    CRPS_GRID,
    Calibration,
    Head,
    SplitScores,
    check_levels,
    check_quantiles,
    fit_conformal,
    forecast_bands,
    forecast_quantiles,
    long_frame,
    split_scores,
)
from tsmix.forecasting.probabilistic.conformal import min_windows
from tsmix.forecasting.probabilistic.spec import DEFAULT_LEVELS

METHOD = "split-conformal"
MAX_WINDOWS_PER_SERIES = 1000  # residual windows kept per series (evenly spaced): bounds the run dir's file


@dataclass(frozen=True, eq=False)
class PanelCalibration:
    """Validation residual scores of a point panel model, per window, with each window's series."""

    ids: tuple[str, ...]  # (S,) training series, the index space of ``series``
    series: np.ndarray  # (N,) int64 series of each calibration window
    scores: np.ndarray  # (N, H) float32 |y - y_hat| in the series' scaled units

    def __post_init__(self) -> None:
        s, r = np.asarray(self.series), np.asarray(self.scores)
        if r.ndim != 2 or s.shape != (r.shape[0],) or r.shape[0] == 0:
            raise TsmixError(f"conformal scores must be (windows, horizon) with one series per window, got "
                             f"{r.shape} and {s.shape}; refit to recalibrate")
        if s.min() < 0 or s.max() >= len(self.ids):
            raise TsmixError("conformal scores name series outside the model's series; refit to recalibrate")

    @property
    def windows(self) -> np.ndarray:
        """(S,) calibration windows per training series."""
        return np.bincount(self.series, minlength=len(self.ids))

    def index_of(self, ids: Sequence[str]) -> np.ndarray:
        """(S',) positions of ``ids`` among the training series, -1 for a series unseen in training."""
        pos = {s: i for i, s in enumerate(self.ids)}
        return np.array([pos.get(s, -1) for s in ids], dtype=np.int64)

    def calibration(self, ids: Sequence[str], levels: Sequence[float], *, strict: bool = True) -> Calibration:
        """A :class:`Calibration` with radii (G, H, S') for ``ids`` (its channels) at ``levels``.

        Per-series radii where a series has enough windows for a level, else the pooled radius.
        ``strict``: a level that even the pooled windows cannot reach is a one-line error (naming
        ``val_size``); otherwise its radius stays infinite (``Calibration.covers`` is then False).
        """
        grid = check_levels(levels)
        pooled = fit_conformal(self.scores[:, :, None], grid)  # (G, H, 1)
        if strict:
            short = [lv for g, lv in enumerate(grid) if not np.isfinite(pooled.radii[g]).all()]
            if short:
                raise TsmixError(
                    f"level {short[0]:g} needs at least {min_windows(short[0])} validation windows, but this "
                    f"model was calibrated on {len(self.series)} (pooled over {len(self.ids)} series); ask a "
                    f"lower level or refit with a larger val_size (each step adds a window per series)")
        idx = self.index_of(ids)
        radii = np.repeat(pooled.radii, len(idx), axis=2)  # (G, H, S') pooled everywhere first
        own = np.zeros((len(grid), len(idx)), dtype=bool)  # (G, S') the series' own radius is used
        counts = self.windows
        order = np.argsort(self.series, kind="stable")  # windows grouped by series, in order
        first = np.concatenate([[0], np.cumsum(counts)])
        known = np.unique(idx[idx >= 0])
        slot = np.full(len(self.ids), -1)  # a training series' position inside its group
        for n in np.unique(counts[known]):  # series with equal window counts: one call, series as channels
            group = known[counts[known] == n]
            stacked = np.stack([self.scores[order[first[s] : first[s + 1]]] for s in group], axis=2)
            r = fit_conformal(stacked, grid).radii  # (G, H, g) from (n, H, g); inf where n is too few
            slot[:] = -1
            slot[group] = np.arange(len(group))
            cols = np.flatnonzero((idx >= 0) & (slot[idx] >= 0))  # the asked series in this group
            j = slot[idx[cols]]
            ok = np.isfinite(r).all(axis=1)[:, j]  # (G, cols): enough windows for that level
            radii[:, :, cols] = np.where(ok[:, None, :], r[:, :, j], radii[:, :, cols])
            own[:, cols] = ok
        wanted = own[[g for g, lv in enumerate(grid) if np.isfinite(pooled.radii[g]).all()]]
        pooled_series = int((~wanted).any(axis=0).sum()) if wanted.size else len(idx)
        if pooled_series == 0:
            method = f"{METHOD} (per series)"
        elif pooled_series == len(idx):
            method = f"{METHOD} (pooled)"
        else:
            method = f"{METHOD} (per series; pooled for {pooled_series} of {len(idx)} series)"
        return Calibration(len(self.series), grid, radii, method)

    def rescaled(self, ids: Sequence[str], scale_from: np.ndarray, scale_to: np.ndarray) -> PanelCalibration:
        """The same residuals in other per-series scaled units: ``scale_from`` (S,) this calibration's
        series' scales, ``scale_to`` those of ``ids`` (a production refit scales on every row)."""
        pos = {s: i for i, s in enumerate(ids)}
        try:
            j = np.array([pos[s] for s in self.ids], dtype=np.int64)
        except KeyError as exc:
            raise TsmixError(f"series {exc} of the calibration is not among the new series") from None
        factor = np.asarray(scale_from, np.float64) / np.asarray(scale_to, np.float64)[j]  # (S,)
        scores = (self.scores * factor[self.series, None]).astype(np.float32)
        return PanelCalibration(tuple(ids), j[self.series], scores)

    def summary(self) -> dict[str, Any]:
        """JSON-ready facts for metrics and run directories."""
        n = self.windows
        return {"method": METHOD, "score": "abs_residual", "windows": int(len(self.series)),
                "series": len(self.ids), "windows_per_series_min": int(n.min()),
                "windows_per_series_max": int(n.max())}

    def to_tensors(self) -> dict[str, torch.Tensor]:
        """What a run directory stores (safetensors): the scores and each window's series."""
        return {"scores": torch.from_numpy(np.ascontiguousarray(self.scores, dtype=np.float32)),
                "series": torch.from_numpy(np.ascontiguousarray(self.series, dtype=np.int64))}

    @classmethod
    def from_tensors(cls, ids: Sequence[str], tensors: dict[str, torch.Tensor]) -> PanelCalibration:
        try:
            return cls(tuple(ids), tensors["series"].numpy().astype(np.int64), tensors["scores"].numpy())
        except KeyError as exc:
            raise TsmixError(f"conformal file lacks {exc}; refit to recalibrate") from None


def calibrate_panel(head: Head, ids: Sequence[str], series: np.ndarray, out: torch.Tensor,
                    truth: np.ndarray) -> PanelCalibration | None:
    """Calibration of a point model from its validation windows' head outputs (n, H, 1) and truths (n, H);
    None for a head with its own intervals."""
    if head.has_intervals:
        return None
    scores = np.abs(truth - head.point(out)[..., 0].numpy()).astype(np.float32)  # (n, H)
    series = np.asarray(series, dtype=np.int64)
    order = np.argsort(series, kind="stable")  # each series' windows, in order
    bounds = np.flatnonzero(np.diff(series[order])) + 1
    keep = np.sort(np.concatenate([_even(rows, MAX_WINDOWS_PER_SERIES) for rows in np.split(order, bounds)]))
    return PanelCalibration(tuple(ids), series[keep], scores[keep])


def _even(rows: np.ndarray, k: int) -> np.ndarray:
    """At most ``k`` evenly spaced entries of ``rows`` (all when they fit)."""
    return rows if len(rows) <= k else rows[np.linspace(0, len(rows) - 1, k).round().astype(np.int64)]


def check_interval_source(head: Head, calibration: PanelCalibration | None, level: Any,
                          quantiles: Any = None) -> None:
    """``level`` / ``quantiles`` of a model with neither intervals nor calibration: a one-line error
    naming the fix (the values themselves are checked first)."""
    asked = [f"level={list(check_levels(level))}" if level is not None else "",
             f"quantiles={list(check_quantiles(quantiles))}" if quantiles is not None else ""]
    if any(asked) and not head.has_intervals and calibration is None:
        raise TsmixError(
            f"{' and '.join(a for a in asked if a)} need intervals, but this panel model was trained with "
            f"loss={head.name!r} and has no conformal calibration (no validation windows, or saved by an "
            "older tsmix); refit with "
            "val_size >= horizon, or with loss='quantile', 'normal' or 'studentt'")


def as_channels(out: torch.Tensor) -> torch.Tensor:
    """Head output of S windows (S, H[, K], 1) -> the probabilistic modules' layout with the series as
    channels: (H[, K], S)."""
    return out[..., 0].movedim(0, -1)


def implied_level(q: float) -> float:
    """The central interval whose bound quantile ``q`` is: 0.1 and 0.9 -> 80 (a conformal quantile)."""
    return round(abs(200.0 * q - 100.0), 9)


def probabilistic_columns(head: Head, out: torch.Tensor, ids: Sequence[str],
                          calibration: PanelCalibration | None, mean: np.ndarray, scale: np.ndarray,
                          levels: Sequence[float] | None, quantiles: Sequence[float] | None
                          ) -> tuple[pd.DataFrame, str | None]:
    """(frame, method): long ``unique_id, ds, y_hat[, y_hat-lo-80, ...][, y_hat-q0.1, ...]`` in original
    units from the head output ``out`` (S, H[, K], 1) of series ``ids``, with ``ds`` the step 0..H-1
    (the caller sets stamps and column names); ``mean``, ``scale`` (S,): each series' scaler."""
    check_interval_source(head, calibration, levels, quantiles)
    o = as_channels(out)  # (H[, K], S)
    cal = None
    if not head.has_intervals and calibration is not None:
        need = set(check_levels(levels)) if levels is not None else set()
        if quantiles is not None:  # a conformal quantile is a bound of the central interval it implies
            need |= {implied_level(q) for q in check_quantiles(quantiles) if abs(q - 0.5) > 1e-9}
        if need or quantiles is not None:  # quantiles=[0.5] alone: any level, only the point is read
            cal = calibration.calibration(ids, sorted(need) or [50.0])
    method, bands, qvals = None, {}, {}

    def unscale(v: Any) -> np.ndarray:  # locations (H, S) in scaled units -> original units
        a = v.detach().double().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v, np.float64)
        return a * scale[None, :] + mean[None, :]

    if levels is not None:
        method, raw = forecast_bands(head, o, levels, cal)
        bands = {lv: (unscale(lo), unscale(hi)) for lv, (lo, hi) in raw.items()}
    if quantiles is not None:
        qvals = {q: unscale(v) for q, v in forecast_quantiles(head, o, quantiles, cal).items()}
    H = out.shape[1]
    frame = long_frame(unscale(head.point(o)), np.arange(H), ids, bands, qvals, method=method)
    return frame, method


class PanelScores:
    """CRPS, pinball, coverage and width over a split's batches: :class:`SplitScores` with a point model's
    per-series conformal radii gathered for each batch's windows (the batch's windows as channels)."""

    def __init__(self, head: Head, calibration: PanelCalibration | None, ids: Sequence[str],
                 levels: Sequence[float] | None) -> None:
        self.head, self.cal = head, None
        if calibration is not None and not head.has_intervals:
            wanted = check_levels(levels) if levels is not None else DEFAULT_LEVELS
            grid = sorted({*wanted, *(implied_level(q) for q in CRPS_GRID if q != 0.5)})
            self.cal = calibration.calibration(ids, grid, strict=False)  # (G, H, S); uncovered levels: inf
        self.scores: SplitScores | None = split_scores(head, self.cal, levels)

    def update(self, out: torch.Tensor, y: torch.Tensor, series: torch.Tensor) -> None:
        """One batch: head output (B, H[, K], 1), targets (B, H, 1), each window's series (B,)."""
        if self.scores is None:
            return
        if self.cal is None:  # the head's own intervals: the batch layout as it is
            self.scores.update(out, y)
            return
        c = self.cal
        s = series.cpu().numpy()
        # SplitScores reads its calibration per update: swap in this batch's radii (G, H, B)
        self.scores.calibration = Calibration(c.n, c.levels, c.radii[:, :, s], c.method)
        self.scores.update(as_channels(out).unsqueeze(0), as_channels(y).unsqueeze(0))  # (1, H, B)

    def metrics(self) -> dict[str, Any] | None:
        return None if self.scores is None else self.scores.metrics()
