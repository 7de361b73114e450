"""Split-conformal intervals for any point forecaster, per horizon step and channel.

Scores are the validation residuals of each (step h, channel c), either absolute
(``|y - y_hat|``, score ``abs_residual``) or divided by the spread of the window's own input
(``|y - y_hat| / s(x)``, score ``scaled_residual``; ``s`` is the per-channel standard deviation
of the lookback window, as instance normalization computes it). The scaled score is the
locally-weighted conformal method (Lei et al. 2018): the interval of a calm window is narrow, of
a volatile one wide, and a calibration period more volatile than the test period (ETTh1's
validation months) no longer inflates every test interval. Both keep the finite-sample
guarantee, the score being a fixed function of the window and its target.
The ``level``% radius is the ``k``-th smallest score with the finite-sample correction
``k = ceil((n + 1) * level / 100)``, which guarantees coverage >= level for a new window
exchangeable with the n calibration windows (overlapping validation windows are only nearly
so). A level needing ``k > n`` has an infinite radius and is refused.

Radii are stored for a grid of levels (every 0.5 by default), so a :class:`Calibration` is
small, JSON-serializable and serves any level: one off the grid takes the next grid level
above it, which keeps the guarantee.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tsmix.errors import TsmixError
from tsmix.forecasting.probabilistic.spec import check_levels, check_quantiles

DEFAULT_GRID = tuple(x / 2 for x in range(1, 200))  # 0.5, 1.0, ..., 99.5 percent
# abs_residual / scaled_residual: radii around a point forecast; scaled_interval: CQR adjustments of a
# head's own bounds (Romano et al. 2019), in units of the window scale, one per calibrated level
SCORES = ("abs_residual", "scaled_residual", "scaled_interval")
SCALE_EPS = 1e-5  # added to the window variance, as RevIN does: a flat window's scale stays positive
MAX_RESIDUALS = 20_000_000  # values kept by collect_residuals (80 MB float32): windows are thinned above
_TOL = 1e-9


def min_windows(level: float) -> int:
    """Fewest calibration windows with a finite ``level``% radius: n >= level / (100 - level)."""
    return math.ceil(level / (100.0 - level) - _TOL)


@dataclass(frozen=True)
class Calibration:
    """Conformal radii (G, H, C) for the grid ``levels``; ``interval`` applies them to a forecast."""

    n: int  # calibration windows
    levels: tuple[float, ...]  # grid of levels in percent, sorted
    radii: np.ndarray  # (G, H, C) float64 in score units, inf where the level needs more than n windows
    method: str = "split-conformal"  # label carried into outputs and metrics
    score: str = "abs_residual"  # scaled_residual: radii are multiples of the window scale s(x)

    @property
    def scaled(self) -> bool:
        """True when an interval needs the forecast window's scale (``window_scale``)."""
        return self.score in ("scaled_residual", "scaled_interval")

    @property
    def adjusts_head(self) -> bool:
        """True for conformalized head intervals (:meth:`adjust`), False for radii around a point."""
        return self.score == "scaled_interval"

    def has_level(self, level: float) -> bool:
        """An exactly calibrated level (what a head adjustment needs: its bounds differ per level)."""
        return any(abs(lv - level) < _TOL for lv in self.levels)

    def radius(self, level: float) -> np.ndarray:
        """(H, C) radius of ``level``: the grid level itself or the next one above it (a head
        adjustment: exactly that level)."""
        level = check_levels(level)[0]
        i = int(np.searchsorted(np.asarray(self.levels), level - _TOL))
        if self.adjusts_head and not self.has_level(level):
            raise TsmixError(f"level {level:g} was not conformalized (calibrated levels: "
                             f"{', '.join(f'{lv:g}' for lv in self.levels)})")
        if i == len(self.levels):
            raise TsmixError(
                f"level {level:g} is above the highest calibrated level {self.levels[-1]:g}; "
                "ask a lower level or calibrate with a finer grid"
            )
        r = self.radii[i]
        if not np.isfinite(r).all():
            raise TsmixError(
                f"level {level:g} needs at least {min_windows(self.levels[i])} calibration windows, "
                f"got {self.n}; ask a lower level or use a longer validation split"
            )
        return r

    def covers(self, level: float) -> bool:
        """True when ``level`` has a finite radius (within the grid, enough calibration windows)."""
        try:
            self.radius(level)
        except TsmixError:
            return False
        return True

    def quantiles(self, point: Any, qs: Sequence[float], scale: Any = None) -> Any:
        """Quantiles (..., H, Q, C) of the conformal forecast: ``q < 0.5`` the lower bound of the
        central ``100 (1 - 2q)``% interval, ``q > 0.5`` the upper bound of ``100 (2q - 1)``%, 0.5 the
        point itself. ``point`` (..., H, C) numpy or torch; the result has its type. ``scale``: as
        in :meth:`interval`."""
        out = []
        for q in check_quantiles(qs):
            if abs(q - 0.5) < _TOL:
                out.append(point)
            else:
                lo, hi = self.interval(point, round(abs(200.0 * q - 100.0), 9), scale)
                out.append(lo if q < 0.5 else hi)
        return torch.stack(out, dim=-2) if isinstance(point, torch.Tensor) else np.stack(out, axis=-2)

    def interval(self, point: Any, level: float, scale: Any = None) -> tuple[Any, Any]:
        """``point`` (..., H, C), numpy or torch -> (lo, hi) of the same type and shape.

        ``scale`` (..., C): the forecast windows' input scale (:func:`window_scale`), required by a
        ``scaled_residual`` calibration and ignored by an absolute one.
        """
        r = self.radius(level)  # (H, C)
        if self.scaled and scale is None:
            raise TsmixError("this conformal calibration scales its radii by each window's spread: pass "
                             "scale=window_scale(x) of the forecast windows")
        if isinstance(point, torch.Tensor):
            rt = torch.as_tensor(r, dtype=point.dtype, device=point.device)
            if self.scaled:
                rt = rt * torch.as_tensor(scale, dtype=point.dtype, device=point.device).unsqueeze(-2)
            return point - rt, point + rt
        p = np.asarray(point)
        if self.scaled:
            r = r * np.asarray(scale, dtype=np.float64)[..., None, :]
        return p - r, p + r

    def adjust(self, lo: Any, hi: Any, level: float, scale: Any) -> tuple[Any, Any]:
        """A head's own ``level``% bounds (..., H, C) widened (or narrowed) by the CQR adjustment
        ``radius * scale``; narrowing never lets the bounds cross (they meet at their midpoint;
        ``forecast_bands`` also keeps them around the point forecast)."""
        if not self.adjusts_head:
            raise TsmixError("adjust() applies a conformalized-interval calibration to a head's bounds; "
                             "this calibration gives radii around a point forecast (interval())")
        r = self.radius(level)
        if isinstance(lo, torch.Tensor):
            d = torch.as_tensor(r, dtype=lo.dtype, device=lo.device) * \
                torch.as_tensor(scale, dtype=lo.dtype, device=lo.device).unsqueeze(-2)
            new_lo, new_hi, mid = lo - d, hi + d, (lo + hi) / 2
            return torch.minimum(new_lo, mid), torch.maximum(new_hi, mid)
        d = r * np.asarray(scale, dtype=np.float64)[..., None, :]
        lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
        mid = (lo + hi) / 2
        return np.minimum(lo - d, mid), np.maximum(hi + d, mid)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types (an infinite radius becomes null)."""
        radii = [[[None if math.isinf(v) else v for v in row] for row in g] for g in self.radii.tolist()]
        return {"method": self.method, "score": self.score, "n": self.n,
                "levels": list(self.levels), "radii": radii}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Calibration:
        try:
            radii = np.array([[[math.inf if v is None else v for v in row] for row in g] for g in d["radii"]],
                             dtype=np.float64)
            levels = tuple(float(v) for v in d["levels"])
            cal = cls(int(d["n"]), levels, radii, str(d.get("method", "split-conformal")),
                      str(d.get("score", "abs_residual")))  # records before scaled scores: absolute
        except (KeyError, TypeError, ValueError) as exc:
            raise TsmixError(f"not a conformal calibration record ({exc}); refit to recalibrate") from exc
        if cal.score not in SCORES:
            raise TsmixError(f"unknown conformal score {cal.score!r} (known: {', '.join(SCORES)}); a newer "
                             "tsmix wrote this run, or refit to recalibrate")
        if cal.radii.ndim != 3 or cal.radii.shape[0] != len(cal.levels):
            raise TsmixError(
                f"calibration radii have shape {cal.radii.shape}, expected ({len(cal.levels)}, H, C)"
            )
        return cal


def _numpy(a: Any) -> np.ndarray:
    return np.asarray(a.detach().cpu() if isinstance(a, torch.Tensor) else a, dtype=np.float64)


def fit_conformal(residuals: Any, levels: Sequence[float] = DEFAULT_GRID, scales: Any = None) -> Calibration:
    """Split-conformal calibration from residuals ``y - y_hat`` of shape (N, H, C).

    ``scales`` (N, C): each calibration window's input scale (:func:`window_scale`); given, the
    scores are ``|r| / scale`` (``scaled_residual``), else ``|r|``.
    """
    r = _numpy(residuals)
    if r.ndim != 3 or r.shape[0] == 0:
        raise TsmixError(f"residuals must be (windows, horizon, channels) with windows > 0, got {r.shape}")
    if not np.isfinite(r).all():
        raise TsmixError("residuals contain NaN/inf; the model's validation forecasts are not finite")
    grid = check_levels(levels)
    n = r.shape[0]
    score, method, a = "abs_residual", "split-conformal", np.abs(r)
    if scales is not None:
        s = _numpy(scales)
        if s.shape != (n, r.shape[2]) or not (np.isfinite(s).all() and (s > 0).all()):
            raise TsmixError(f"scales must be finite, positive and (windows, channels) = {(n, r.shape[2])}, "
                             f"got shape {s.shape}")
        score, method, a = "scaled_residual", "split-conformal (scaled)", a / s[:, None, :]
    scores = np.sort(a, axis=0)  # (N, H, C) order statistics per (step, channel)
    ks = [math.ceil((n + 1) * lv / 100.0 - _TOL) for lv in grid]  # 1-based ranks
    radii = np.stack([scores[k - 1] if k <= n else np.full(r.shape[1:], math.inf) for k in ks])
    return Calibration(n, grid, radii, method, score)


def fit_interval_conformal(errors: dict[float, Any], scales: Any, method: str) -> Calibration:
    """Conformalized head intervals (CQR): ``errors[level]`` (N, H, C) are the signed distances
    ``max(lo - y, y - hi)`` of validation targets outside (> 0) or inside (< 0) the head's own
    ``level``% bounds, ``scales`` (N, C) the windows' input scales. Per level, the radius is the
    finite-sample rank of ``error / scale``: adding ``radius * s(x)`` to both bounds gives coverage
    >= level for an exchangeable window, whatever the head learned (a head under-covering on new
    data is widened, an over-cautious one narrowed)."""
    if not errors:
        raise TsmixError("no interval levels to conformalize")
    s = _numpy(scales)
    levels = tuple(sorted(float(lv) for lv in errors))
    per_level = []
    for lv in levels:
        e = _numpy(errors[lv])
        if e.ndim != 3 or e.shape[0] == 0 or s.shape != (e.shape[0], e.shape[2]):
            raise TsmixError(f"interval errors must be (windows, horizon, channels) with scales (windows, "
                             f"channels), got {e.shape} and {s.shape}")
        if not (np.isfinite(e).all() and np.isfinite(s).all() and (s > 0).all()):
            raise TsmixError("interval errors or scales are not finite and positive; the model's validation "
                             "intervals are not finite")
        n = e.shape[0]
        k = math.ceil((n + 1) * lv / 100.0 - _TOL)
        sorted_scores = np.sort(e / s[:, None, :], axis=0)
        per_level.append(sorted_scores[k - 1] if k <= n else np.full(e.shape[1:], math.inf))
    n = _numpy(errors[levels[0]]).shape[0]
    return Calibration(n, levels, np.stack(per_level), method, "scaled_interval")


def window_scale(x: torch.Tensor, out_index: int | None = None, channels: int | None = None) -> torch.Tensor:
    """(B, L, C_in) input windows (scaled units) -> (B, C_out) per-channel spread over the lookback,
    ``sqrt(var + eps)`` as instance normalization computes it; ``out_index`` keeps the one channel an
    MS model forecasts (as ``select_output`` does), else ``channels`` keeps the first ones (the
    series; calendar variates follow them in the input of a ``calendar=True`` model)."""
    s = torch.sqrt(x.float().var(dim=1, unbiased=False) + SCALE_EPS)
    if out_index is not None:
        return s[:, out_index : out_index + 1]
    return s if channels is None else s[:, :channels]


def thinned(n: int, per_window: int, max_values: int = MAX_RESIDUALS) -> torch.Tensor:
    """Evenly spaced window indices keeping at most ``max_values`` residual values (all if they fit)."""
    keep = max(1, min(n, max_values // max(per_window, 1)))
    return torch.linspace(0, n - 1, keep).round().long().unique()


@torch.no_grad()
def collect_residuals(point_fn: Callable[[torch.Tensor], torch.Tensor], windows: Any, batch_size: int,
                      max_values: int = MAX_RESIDUALS, *, out_index: int | None = None,
                      with_scales: bool = False) -> Any:
    """Residuals (N, H, C_out) float32 of ``point_fn(x (B, L, C_in)) -> (B, H, C_out)`` over a WindowSet;
    with ``with_scales`` the pair (residuals, window scales (N, C_out)) for :func:`fit_conformal`.

    ``windows`` needs ``len``, ``horizon``, ``y_channels`` and ``gather(idx)`` (a
    tsmix.datasets WindowSet); the model must already be in eval mode.
    """
    idx = thinned(len(windows), windows.horizon * windows.y_channels, max_values)
    out, scales = [], []
    for s in range(0, len(idx), batch_size):
        x, y = windows.gather(idx[s : s + batch_size])
        out.append((y - point_fn(x)).float().cpu())
        if with_scales:
            scales.append(window_scale(x, out_index, y.shape[-1]).cpu())
    residuals = torch.cat(out).numpy()
    return (residuals, torch.cat(scales).numpy()) if with_scales else residuals


@torch.no_grad()
def collect_interval_errors(bands_fn: Callable[[torch.Tensor], dict[float, tuple[Any, Any]]],
                            windows: Any, batch_size: int, levels: Sequence[float],
                            max_values: int = MAX_RESIDUALS, *, out_index: int | None = None
                            ) -> tuple[dict[float, np.ndarray], np.ndarray]:
    """({level: signed errors (N, H, C_out)}, window scales (N, C_out)) of a head's own intervals
    ``bands_fn(x (B, L, C_in)) -> {level: (lo, hi) (B, H, C_out)}`` over a WindowSet, for
    :func:`fit_interval_conformal`; the model must already be in eval mode."""
    idx = thinned(len(windows), windows.horizon * windows.y_channels * max(len(levels), 1), max_values)
    errors: dict[float, list[torch.Tensor]] = {float(lv): [] for lv in levels}
    scales = []
    for s in range(0, len(idx), batch_size):
        x, y = windows.gather(idx[s : s + batch_size])
        bands = bands_fn(x)
        for lv in errors:
            lo, hi = bands[lv]
            errors[lv].append(torch.maximum(lo - y, y - hi).float().cpu())
        scales.append(window_scale(x, out_index, y.shape[-1]).cpu())
    return {lv: torch.cat(v).numpy() for lv, v in errors.items()}, torch.cat(scales).numpy()
