"""Output heads: turn a network's ``K`` raw values per (step, channel) into a forecast.

A head has no weights. It maps the raw ``(B, H, K, C)`` output of any base network (an
encoder asked for ``horizon * K`` steps) to its parameters in the data's scale:

* :class:`PointHead` (``mse``, ``mae``): ``K = 1``, output ``(B, H, C)`` exactly as today.
* :class:`QuantileHead` (``quantile``): ``K = Q`` quantiles, non-crossing by construction:
  the median plus cumulative softplus gaps below and above it.
* :class:`NormalHead`, :class:`StudentTHead` (``normal``, ``studentt``): distribution
  parameters ``(loc, scale[, df])`` trained by negative log-likelihood.

Distribution outputs keep the parameter / quantile axis at dim -2: ``(..., H, K, C)``.
Instance normalization is undone by :class:`WindowScale`: locations get ``* std + mean``,
scales (positive gaps, standard deviations) only ``* std``, so a scale never shifts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import distributions as D
from torch import nn

from tsmix.errors import TsmixError
from tsmix.forecasting.probabilistic.losses import POINT_LOSS_FNS, nll, pinball_loss
from tsmix.forecasting.probabilistic.metrics import crps_normal, crps_quantiles, crps_samples
from tsmix.forecasting.probabilistic.spec import POINT_LOSSES, HeadConfig, check_levels, level_bounds
from tsmix.forecasting.revin import RevIN

MIN_SCALE = 1e-3  # floor of a predicted std in normalized units: keeps the NLL bounded on flat windows
MIN_DF = 2.0  # Student-t degrees of freedom start above 2, so the variance is finite
CRPS_SAMPLES = 200  # samples per element for a sample-based CRPS (Student-t)


@dataclass(frozen=True)
class WindowScale:
    """The instance statistics of one batch, to map normalized head outputs back to the data."""

    revin: RevIN | None  # None: the network saw raw windows, nothing to undo
    stats: tuple[torch.Tensor, torch.Tensor] | None  # (mean, std), each (B, 1, C)

    def location(self, t: torch.Tensor) -> torch.Tensor:
        """(B, H, K, C) normalized locations -> data scale, via RevIN.denorm (affine included)."""
        if self.revin is None or self.stats is None:
            return t
        mean, std = self.stats
        return self.revin.denorm(t, (mean.unsqueeze(2), std.unsqueeze(2)))  # stats (B, 1, 1, C)

    def scale(self, t: torch.Tensor) -> torch.Tensor:
        """(B, H, K, C) non-negative normalized scales -> data scale (the location map's slope)."""
        if self.revin is None or self.stats is None:
            return t
        if self.revin.affine:  # |d location / d t|: a negative affine weight must not flip a scale
            t = t / (self.revin.weight + self.revin.eps * self.revin.eps).abs()
        return t * self.stats[1].unsqueeze(2)


class Head(nn.Module):
    """Common interface; ``out`` below is what :meth:`forward` returned (data scale)."""

    name: str = ""
    k: int = 1  # raw values per (step, channel) the base network must produce
    has_intervals: bool = False  # True: quantiles/intervals come from the head itself

    def forward(self, raw: torch.Tensor, scale: WindowScale) -> torch.Tensor:  # (B, H, K, C) -> out
        raise NotImplementedError

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Scalar training loss of ``out`` against targets y (..., H, C)."""
        raise NotImplementedError

    def point(self, out: torch.Tensor) -> torch.Tensor:
        """The point forecast (..., H, C): the median for probabilistic heads."""
        raise NotImplementedError

    def quantiles(self, out: torch.Tensor, qs: Sequence[float]) -> torch.Tensor:
        """Quantiles ``qs`` of the forecast, (..., H, Q, C)."""
        raise TsmixError(
            f"loss={self.name!r} gives point forecasts only, no quantiles; use conformal intervals "
            "(predict(level=...) after fit calibrates on validation) or train with loss='quantile'"
        )

    def interval(self, out: torch.Tensor, level: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Central ``level``% interval (lo, hi), each (..., H, C)."""
        q = self.quantiles(out, level_bounds(check_levels(level)[0]))
        return q[..., 0, :], q[..., 1, :]

    def crps(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Elementwise CRPS (..., H, C) of the forecast against y."""
        raise NotImplementedError


class PointHead(Head):
    """``mse`` / ``mae``: one value per step, denormalized as a location; today's output."""

    has_intervals = False

    def __init__(self, loss: str = "mse") -> None:
        super().__init__()
        if loss not in POINT_LOSSES:
            raise TsmixError(f"PointHead takes loss mse or mae, got {loss!r}")
        self.name, self.k = loss, 1
        self._loss = POINT_LOSS_FNS[loss]

    def forward(self, raw: torch.Tensor, scale: WindowScale) -> torch.Tensor:  # -> (B, H, C)
        return scale.location(raw).squeeze(-2)

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self._loss(out, y)

    def point(self, out: torch.Tensor) -> torch.Tensor:
        return out

    def crps(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (out - y).abs()  # the CRPS of a point mass is the absolute error


class QuantileHead(Head):
    """``quantile``: Q sorted quantiles as the median +/- cumulative softplus gaps."""

    name = "quantile"
    has_intervals = True

    def __init__(self, quantiles: Sequence[float]) -> None:
        super().__init__()
        self.levels = tuple(float(q) for q in quantiles)
        if 0.5 not in self.levels or list(self.levels) != sorted(set(self.levels)):
            raise TsmixError(f"QuantileHead needs sorted unique quantiles including 0.5, got {self.levels}")
        self.k, self.mid = len(self.levels), self.levels.index(0.5)
        # non-persistent: follows .to(device) without entering the state dict
        self.register_buffer("q", torch.tensor(self.levels), persistent=False)

    def forward(self, raw: torch.Tensor, scale: WindowScale) -> torch.Tensor:  # -> (B, H, Q, C)
        m = self.mid
        median = scale.location(raw[..., m : m + 1, :])  # (B, H, 1, C)
        gaps = scale.scale(F.softplus(raw))  # (B, H, Q, C), >= 0; gaps[m] unused
        below = median - gaps[..., :m, :].flip(-2).cumsum(-2).flip(-2)  # q_i = median - sum_{i<=j<m} gap_j
        above = median + gaps[..., m + 1 :, :].cumsum(-2)  # q_i = median + sum_{m<j<=i} gap_j
        return torch.cat([below, median, above], dim=-2)

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return pinball_loss(out, y, self.q.to(out.dtype))

    def point(self, out: torch.Tensor) -> torch.Tensor:
        return out[..., self.mid, :]

    def index_of(self, qs: Sequence[float]) -> list[int]:
        idx = []
        for q in qs:
            hit = [i for i, t in enumerate(self.levels) if abs(t - q) < 1e-9]
            if not hit:
                raise TsmixError(
                    f"quantile {q:g} was not trained (trained: {list(self.levels)}); refit with it in "
                    "quantiles=[...] or its level in level=[...]"
                )
            idx.append(hit[0])
        return idx

    def quantiles(self, out: torch.Tensor, qs: Sequence[float]) -> torch.Tensor:
        return out[..., self.index_of(qs), :]

    def crps(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return crps_quantiles(out, y, self.levels)  # 2 x mean pinball over the trained grid


class DistributionHead(Head):
    """Parametric forecast distribution trained by NLL; ``out[..., 0, :]`` is its location."""

    has_intervals = True

    def dist(self, out: torch.Tensor) -> D.Distribution:
        raise NotImplementedError

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nll(self.dist(out), y)

    def point(self, out: torch.Tensor) -> torch.Tensor:
        return out[..., 0, :]  # loc: the median (and the mean) of both symmetric families

    def sample(self, out: torch.Tensor, n: int, seed: int = 0) -> torch.Tensor:
        """``n`` draws (n, ..., H, C), reproducible for a seed and leaving the global RNG untouched."""
        devices = [out.device] if out.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            return self.dist(out).sample((n,))


class NormalHead(DistributionHead):
    """``normal``: (loc, scale) per step and channel."""

    name, k = "normal", 2

    def forward(self, raw: torch.Tensor, scale: WindowScale) -> torch.Tensor:  # -> (B, H, 2, C)
        loc = scale.location(raw[..., :1, :])
        sd = scale.scale(F.softplus(raw[..., 1:2, :]) + MIN_SCALE)
        return torch.cat([loc, sd], dim=-2)

    def dist(self, out: torch.Tensor) -> D.Normal:
        return D.Normal(out[..., 0, :], out[..., 1, :])

    def quantiles(self, out: torch.Tensor, qs: Sequence[float]) -> torch.Tensor:
        d = self.dist(out)
        return torch.stack([d.icdf(torch.full_like(d.loc, q)) for q in qs], dim=-2)

    def crps(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return crps_normal(out[..., 0, :], out[..., 1, :], y)


class StudentTHead(DistributionHead):
    """``studentt``: (loc, scale, df) per step and channel, df > 2.

    torch has no Student-t inverse CDF: quantiles use ``scipy.special.stdtrit`` (the function
    behind ``scipy.stats.t.ppf``; scipy comes with scikit-learn, a tsmix dependency), on the
    host in float64 and without gradient. The CRPS is sample-based.
    """

    name, k = "studentt", 3

    def forward(self, raw: torch.Tensor, scale: WindowScale) -> torch.Tensor:  # -> (B, H, 3, C)
        loc = scale.location(raw[..., :1, :])
        sd = scale.scale(F.softplus(raw[..., 1:2, :]) + MIN_SCALE)
        df = MIN_DF + F.softplus(raw[..., 2:3, :])  # shape parameter: scale-free, not denormalized
        return torch.cat([loc, sd, df], dim=-2)

    def dist(self, out: torch.Tensor) -> D.StudentT:
        return D.StudentT(out[..., 2, :], out[..., 0, :], out[..., 1, :])

    def quantiles(self, out: torch.Tensor, qs: Sequence[float]) -> torch.Tensor:
        from scipy.special import stdtrit

        p = out.detach().double().cpu().numpy()
        loc, sd, df = p[..., 0, :], p[..., 1, :], p[..., 2, :]
        z = np.stack([stdtrit(df, q) for q in qs], axis=-2)  # (..., H, Q, C)
        res = loc[..., None, :] + sd[..., None, :] * z
        return torch.from_numpy(res).to(device=out.device, dtype=out.dtype)

    def crps(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return crps_samples(self.sample(out, CRPS_SAMPLES), y)


def make_head(config: HeadConfig) -> Head:
    """The head for a validated :class:`HeadConfig`."""
    if config.loss in POINT_LOSSES:
        return PointHead(config.loss)
    if config.loss == "quantile":
        return QuantileHead(config.trained_quantiles or ())
    return NormalHead() if config.loss == "normal" else StudentTHead()
