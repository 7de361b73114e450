"""Scores of probabilistic forecasts, vectorised over any leading shape (numpy or torch in).

Computed on the scaled data, like MSE/MAE. ``crps_*`` return elementwise tensors (reduce
with ``.mean()``); the other functions return a float. :class:`ScoreSums` accumulates
them over the batches of a split without a host sync per batch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from tsmix.forecasting.probabilistic.losses import pinball, pinball_loss
from tsmix.forecasting.probabilistic.spec import format_level, level_bounds

ArrayLike = Any  # torch.Tensor | numpy.ndarray | nested sequences


def _t(x: ArrayLike) -> torch.Tensor:
    t = torch.as_tensor(x)
    return t if t.is_floating_point() else t.double()


def crps_samples(samples: ArrayLike, y: ArrayLike) -> torch.Tensor:
    """CRPS of the empirical distribution of ``samples`` (S, ...) at y (...) -> (...).

    ``E|X - y| - E|X - X'| / 2`` with the pairwise term in O(S log S) from the sorted draws:
    ``sum_ij |x_i - x_j| = 2 sum_i (2i - S - 1) x_(i)`` (i = 1..S).
    """
    x, y = _t(samples), _t(y)
    s = x.shape[0]
    first = (x - y.unsqueeze(0)).abs().mean(dim=0)
    w = (2.0 * torch.arange(1, s + 1, dtype=x.dtype, device=x.device) - s - 1).reshape(-1, *[1] * y.dim())
    second = (w * x.sort(dim=0).values).sum(dim=0) / (s * s)
    return first - second


def crps_quantiles(pred: ArrayLike, y: ArrayLike, quantiles: Sequence[float]) -> torch.Tensor:
    """Quantile approximation of the CRPS, pred (..., Q, C) at y (..., C) -> (..., C).

    ``CRPS = 2 int_0^1 pinball_q dq``, approximated by 2 x the mean pinball over the grid;
    close to the exact value for a dense even grid (e.g. 0.01 .. 0.99), coarse for 3-5 levels.
    """
    pred = _t(pred)
    return 2.0 * pinball(pred, _t(y).to(pred.dtype), quantiles).mean(dim=-2)


def crps_normal(loc: ArrayLike, scale: ArrayLike, y: ArrayLike) -> torch.Tensor:
    """Closed-form CRPS of N(loc, scale^2) at y, elementwise:
    ``scale * (z (2 Phi(z) - 1) + 2 phi(z) - 1 / sqrt(pi))``, z = (y - loc) / scale."""
    loc, scale, y = _t(loc), _t(scale), _t(y)
    dtype = torch.promote_types(torch.promote_types(loc.dtype, scale.dtype), y.dtype)
    loc, scale = loc.to(dtype), scale.to(dtype)
    z = (y.to(dtype) - loc) / scale
    cdf = 0.5 * (1.0 + torch.erf(z / math.sqrt(2.0)))
    pdf = torch.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    return scale * (z * (2.0 * cdf - 1.0) + 2.0 * pdf - 1.0 / math.sqrt(math.pi))


def mean_pinball(pred: ArrayLike, y: ArrayLike, quantiles: Sequence[float]) -> float:
    """Mean pinball loss over every element and quantile, pred (..., Q, C), y (..., C)."""
    pred = _t(pred)
    return float(pinball_loss(pred, _t(y).to(pred.dtype), quantiles))


def coverage(y: ArrayLike, lo: ArrayLike, hi: ArrayLike) -> float:
    """Fraction of targets inside [lo, hi] (bounds included)."""
    y = _t(y)
    return float(((_t(lo) <= y) & (y <= _t(hi))).double().mean())


def interval_width(lo: ArrayLike, hi: ArrayLike) -> float:
    """Mean width hi - lo."""
    return float((_t(hi) - _t(lo)).double().mean())


class ScoreSums:
    """Running sums over the batches of a split; ``metrics()`` reads them once.

    Per level: coverage, mean width and the pinball of its two bounds; overall: CRPS (when
    given) and the mean pinball over the median and every bound.
    """

    def __init__(self, levels: Sequence[float]) -> None:
        self.levels = tuple(levels)
        self.count = 0  # elements seen (windows x horizon x channels)
        self.crps_count = 0
        self._sums: dict[str, torch.Tensor] = {}

    def _add(self, key: str, value: torch.Tensor) -> None:
        v = value.detach().double().sum()
        self._sums[key] = self._sums[key] + v if key in self._sums else v

    def update(self, y: torch.Tensor, point: torch.Tensor,
               bands: Mapping[float, tuple[torch.Tensor, torch.Tensor]],
               crps: torch.Tensor | None = None) -> None:
        """One batch: y, point (B, H, C); ``bands[level] = (lo, hi)``; elementwise ``crps``."""
        self.count += y.numel()
        self._add("pinball_0.5", pinball(point.unsqueeze(-2), y, (0.5,)))
        for level in self.levels:
            lo, hi = bands[level]
            qlo, qhi = level_bounds(level)
            self._add(f"covered_{level}", (lo <= y) & (y <= hi))
            self._add(f"width_{level}", hi - lo)
            self._add(f"pinball_{level}", pinball(torch.stack([lo, hi], dim=-2), y, (qlo, qhi)))
        if crps is not None:
            self.crps_count += crps.numel()
            self._add("crps", crps)

    def metrics(self) -> dict[str, Any]:
        if self.count == 0:
            return {}
        s = {k: float(v) for k, v in self._sums.items()}
        n = self.count
        out: dict[str, Any] = {
            "coverage": {format_level(lv): s[f"covered_{lv}"] / n for lv in self.levels},
            "width": {format_level(lv): s[f"width_{lv}"] / n for lv in self.levels},
        }
        pin = s["pinball_0.5"] + sum(s[f"pinball_{lv}"] for lv in self.levels)
        out["pinball"] = pin / (n * (1 + 2 * len(self.levels)))
        if self.crps_count:
            out["crps"] = s["crps"] / self.crps_count
        return out
