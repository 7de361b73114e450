"""Split-conformal intervals for any point forecaster, per horizon step and channel.

Scores are the absolute validation residuals ``|y - y_hat|`` of each (step h, channel c).
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
    radii: np.ndarray  # (G, H, C) float64, inf where the level needs more than n windows
    method: str = "split-conformal"  # label carried into outputs and metrics

    def radius(self, level: float) -> np.ndarray:
        """(H, C) radius of ``level``: the grid level itself or the next one above it."""
        level = check_levels(level)[0]
        i = int(np.searchsorted(np.asarray(self.levels), level - _TOL))
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

    def quantiles(self, point: Any, qs: Sequence[float]) -> Any:
        """Quantiles (..., H, Q, C) of the conformal forecast: ``q < 0.5`` the lower bound of the
        central ``100 (1 - 2q)``% interval, ``q > 0.5`` the upper bound of ``100 (2q - 1)``%, 0.5 the
        point itself. ``point`` (..., H, C) numpy or torch; the result has its type."""
        out = []
        for q in check_quantiles(qs):
            if abs(q - 0.5) < _TOL:
                out.append(point)
            else:
                lo, hi = self.interval(point, round(abs(200.0 * q - 100.0), 9))
                out.append(lo if q < 0.5 else hi)
        return torch.stack(out, dim=-2) if isinstance(point, torch.Tensor) else np.stack(out, axis=-2)

    def interval(self, point: Any, level: float) -> tuple[Any, Any]:
        """``point`` (..., H, C), numpy or torch -> (lo, hi) of the same type and shape."""
        r = self.radius(level)
        if isinstance(point, torch.Tensor):
            rt = torch.as_tensor(r, dtype=point.dtype, device=point.device)
            return point - rt, point + rt
        p = np.asarray(point)
        return p - r, p + r

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types (an infinite radius becomes null)."""
        radii = [[[None if math.isinf(v) else v for v in row] for row in g] for g in self.radii.tolist()]
        return {"method": self.method, "score": "abs_residual", "n": self.n,
                "levels": list(self.levels), "radii": radii}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Calibration:
        try:
            radii = np.array([[[math.inf if v is None else v for v in row] for row in g] for g in d["radii"]],
                             dtype=np.float64)
            levels = tuple(float(v) for v in d["levels"])
            cal = cls(int(d["n"]), levels, radii, str(d.get("method", "split-conformal")))
        except (KeyError, TypeError, ValueError) as exc:
            raise TsmixError(f"not a conformal calibration record ({exc}); refit to recalibrate") from exc
        if cal.radii.ndim != 3 or cal.radii.shape[0] != len(cal.levels):
            raise TsmixError(
                f"calibration radii have shape {cal.radii.shape}, expected ({len(cal.levels)}, H, C)"
            )
        return cal


def fit_conformal(residuals: Any, levels: Sequence[float] = DEFAULT_GRID) -> Calibration:
    """Split-conformal calibration from residuals ``y - y_hat`` of shape (N, H, C)."""
    r = np.asarray(residuals.detach().cpu() if isinstance(residuals, torch.Tensor) else residuals,
                   dtype=np.float64)
    if r.ndim != 3 or r.shape[0] == 0:
        raise TsmixError(f"residuals must be (windows, horizon, channels) with windows > 0, got {r.shape}")
    if not np.isfinite(r).all():
        raise TsmixError("residuals contain NaN/inf; the model's validation forecasts are not finite")
    grid = check_levels(levels)
    n = r.shape[0]
    scores = np.sort(np.abs(r), axis=0)  # (N, H, C) order statistics per (step, channel)
    ks = [math.ceil((n + 1) * lv / 100.0 - _TOL) for lv in grid]  # 1-based ranks
    radii = np.stack([scores[k - 1] if k <= n else np.full(r.shape[1:], math.inf) for k in ks])
    return Calibration(n, grid, radii)


def thinned(n: int, per_window: int, max_values: int = MAX_RESIDUALS) -> torch.Tensor:
    """Evenly spaced window indices keeping at most ``max_values`` residual values (all if they fit)."""
    keep = max(1, min(n, max_values // max(per_window, 1)))
    return torch.linspace(0, n - 1, keep).round().long().unique()


@torch.no_grad()
def collect_residuals(point_fn: Callable[[torch.Tensor], torch.Tensor], windows: Any, batch_size: int,
                      max_values: int = MAX_RESIDUALS) -> np.ndarray:
    """Residuals (N, H, C_out) float32 of ``point_fn(x (B, L, C_in)) -> (B, H, C_out)`` over a WindowSet.

    ``windows`` needs ``len``, ``horizon``, ``y_channels`` and ``gather(idx)`` (a
    tsmix.datasets WindowSet); the model must already be in eval mode.
    """
    idx = thinned(len(windows), windows.horizon * windows.y_channels, max_values)
    out = []
    for s in range(0, len(idx), batch_size):
        x, y = windows.gather(idx[s : s + batch_size])
        out.append((y - point_fn(x)).float().cpu())
    return torch.cat(out).numpy()
