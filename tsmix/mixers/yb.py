"""YB-Mixer: integrable, exactly orthogonal token mixers (arXiv 2606.15085).

Two registered mixers, both bidirectional by construction (they cannot be causal):

- ``yb-brickwall``: per-channel 2×2 rotations between adjacent tokens on alternating bonds,
  the single-particle action of free-fermion gates (``tsmix.ops.brickwall``).
- ``yb-spectral``: a circulant orthogonal flow ``U(s) = exp(sK)`` per channel with one
  skew-symmetric generator ``K``, applied as rfft -> unit phase -> irfft
  (``tsmix.ops.spectral``); its phase is a smooth function of normalized frequency, so a
  model trained at one length runs at another.

Layout: ``forward(x) = out_proj(act(core(in_proj(x))))``. The projections and the
nonlinearity are optional and sit *outside* the orthogonal ``core``, which can be tested
on its own (``mixer.core(x)``). The spectral mixer also exposes ``flow(x, s)``: the core at
budget ``s``; ``U(a) U(b) = U(a + b)`` exactly, so increments in any order or grouping give
``U(1)`` (anytime inference). :func:`budget` runs a whole trained model at a chosen budget.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tsmix.errors import TsmixError
from tsmix.ops.brickwall import brickwall, brickwall_matrix, brickwall_reference
from tsmix.ops.spectral import (
    circulant_flow,
    circulant_flow_reference,
    circulant_generator,
    circulant_matrix,
    phase_profile,
)
from tsmix.registry import Mixer, register_mixer

ACTS = {"none": lambda t: t, "gelu": F.gelu, "tanh": torch.tanh, "silu": F.silu}


def _check_common(proj: bool, act: str) -> None:
    if act not in ACTS:
        raise ValueError(f"act must be one of {', '.join(ACTS)}, got {act!r}")
    if not isinstance(proj, bool):
        raise ValueError(f"proj must be a bool, got {proj!r}")


@dataclass(frozen=True)
class YBBrickwallOptions:
    depth: int = 1  # brick-wall layers (even bonds then odd bonds) per mixer; Θ(N) couple everything
    init_angle: float = math.pi / 4  # mean initial angle: near π/4 transmits, near 0 the circuit is ~identity
    init_jitter: float = 0.3  # std of the per-channel angle noise, so channels start different
    proj: bool = False  # learned D×D projections before and after the orthogonal core
    act: str = "none"  # nonlinearity after the core (outside it, so the core stays orthogonal)

    def __post_init__(self) -> None:
        if not isinstance(self.depth, int) or self.depth < 1:
            raise ValueError(f"depth must be an int >= 1, got {self.depth!r}")
        if self.init_jitter < 0:
            raise ValueError(f"init_jitter must be >= 0, got {self.init_jitter!r}")
        _check_common(self.proj, self.act)


@dataclass(frozen=True)
class YBSpectralOptions:
    n_basis: int = 8  # sine harmonics of the phase ω(f) = Σ_k w_k sin(2πkf): more = sharper profiles
    init_scale: float = 1.0  # std of w_1 at init; harmonic k gets init_scale / k (smooth profile)
    proj: bool = False  # learned D×D projections before and after the orthogonal core
    act: str = "none"  # nonlinearity after the core (outside it, so the core stays orthogonal)

    def __post_init__(self) -> None:
        if not isinstance(self.n_basis, int) or self.n_basis < 1:
            raise ValueError(f"n_basis must be an int >= 1, got {self.n_basis!r}")
        if self.init_scale < 0:
            raise ValueError(f"init_scale must be >= 0, got {self.init_scale!r}")
        _check_common(self.proj, self.act)


class _YBMixer(Mixer):
    """Shared shell: optional projections and nonlinearity around an orthogonal core."""

    name = "yb"

    def __init__(self, dim: int, heads: int, causal: bool, proj: bool, act: str) -> None:
        super().__init__()
        if causal:
            # build_mixer already refuses (not causal-capable); this guards direct construction.
            raise TsmixError(
                f"mixer {self.name!r} is bidirectional by construction (an orthogonal map over the "
                f"whole sequence) and cannot be causal; use causal=False or pick a causal mixer"
            )
        # heads is accepted for the common constructor signature; the maps are per channel.
        self.dim, self.heads = dim, heads
        self.in_proj = nn.Linear(dim, dim) if proj else None
        self.out_proj = nn.Linear(dim, dim) if proj else None
        self.act_name = act

    def _wrap(self, x: torch.Tensor, core) -> torch.Tensor:  # (B, N, D) -> (B, N, D)
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise TsmixError(f"mixer {self.name!r} expects (B, N, {self.dim}) input, got {tuple(x.shape)}")
        h = self.in_proj(x) if self.in_proj is not None else x
        h = ACTS[self.act_name](core(h))
        return self.out_proj(h) if self.out_proj is not None else h

    def core(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def core_reference(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, D) -> (B, N, D)
        return self._wrap(x, self.core)

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """Same layout with the dense-matrix core: the oracle for the fast path."""
        return self._wrap(x, self.core_reference)


def _space_brickwall(trial) -> dict:
    return {
        "depth": trial.suggest_int("yb-brickwall.depth", 1, 8, log=True),
        "init_angle": trial.suggest_float("yb-brickwall.init_angle", 0.3, 1.5),
        "proj": trial.suggest_categorical("yb-brickwall.proj", [False, True]),
        "act": trial.suggest_categorical("yb-brickwall.act", ["none", "gelu"]),
    }


@register_mixer(
    "yb-brickwall", options=YBBrickwallOptions, supports_causal=False, position_aware=True,
    position_indexed=True,
    space=_space_brickwall,
)
class YBBrickwall(_YBMixer):
    """YB-Mixer brick-wall: per-channel 2×2 rotations on alternating bonds (exactly orthogonal)."""

    name = "yb-brickwall"

    def __init__(self, dim: int, heads: int, causal: bool, options: YBBrickwallOptions) -> None:
        super().__init__(dim, heads, causal, options.proj, options.act)
        self.options = options
        theta = options.init_angle + options.init_jitter * torch.randn(options.depth, dim)
        self.theta = nn.Parameter(theta)  # (depth, D) angle per layer and channel

    def core(self, x: torch.Tensor) -> torch.Tensor:
        """The orthogonal brick-wall circuit alone: (B, N, D) -> (B, N, D)."""
        return brickwall(x, self.theta)

    def core_reference(self, x: torch.Tensor) -> torch.Tensor:
        return brickwall_reference(x, self.theta)

    def matrix(self, n: int) -> torch.Tensor:
        """Dense per-channel map of the core at length n: (D, n, n), orthogonal."""
        return brickwall_matrix(self.theta, n)

    def diagnostics(self) -> dict[str, float]:
        th = self.theta.detach().float()
        return {"angle_mean_abs": th.abs().mean().item(), "angle_std": th.std(unbiased=False).item()}


def _space_spectral(trial) -> dict:
    return {
        "n_basis": trial.suggest_int("yb-spectral.n_basis", 2, 32, log=True),
        "init_scale": trial.suggest_float("yb-spectral.init_scale", 0.1, 3.0, log=True),
        "proj": trial.suggest_categorical("yb-spectral.proj", [False, True]),
        "act": trial.suggest_categorical("yb-spectral.act", ["none", "gelu"]),
    }


@register_mixer(
    "yb-spectral", options=YBSpectralOptions, supports_causal=False, position_aware=True,
    position_indexed=True,
    space=_space_spectral,
)
class YBSpectral(_YBMixer):
    """YB-Mixer spectral: circulant orthogonal flow exp(sK) per channel via rfft/irfft, O(N log N)."""

    name = "yb-spectral"

    def __init__(self, dim: int, heads: int, causal: bool, options: YBSpectralOptions) -> None:
        super().__init__(dim, heads, causal, options.proj, options.act)
        self.options = options
        k = torch.arange(1, options.n_basis + 1, dtype=torch.float32)
        self.weight = nn.Parameter(options.init_scale * torch.randn(dim, options.n_basis) / k)  # (D, nb)
        # Budget s of the flow used by forward/core; 1.0 is the trained map. Not a parameter: an
        # inference knob (see ``budget``), deliberately left out of the state_dict.
        self.budget = 1.0

    def flow(self, x: torch.Tensor, s: float | torch.Tensor) -> torch.Tensor:
        """``U(s) x = exp(sK) x`` per channel: the orthogonal core at budget s. (B, N, D) -> (B, N, D)."""
        return circulant_flow(x, self.weight, s)

    def core(self, x: torch.Tensor) -> torch.Tensor:
        """The orthogonal core at the current budget (1.0 unless changed by :func:`budget`)."""
        return self.flow(x, self.budget)

    def core_reference(self, x: torch.Tensor) -> torch.Tensor:
        return circulant_flow_reference(x, self.weight, self.budget)

    def phase_profile(self, f: torch.Tensor) -> torch.Tensor:
        """ω(f) per channel at normalized frequencies f (F,): (F, D). Same at every length."""
        return phase_profile(self.weight, f)

    def generator(self, n: int) -> torch.Tensor:
        """Dense skew-symmetric circulant K at length n: (D, n, n)."""
        return circulant_generator(self.weight, n)

    def matrix(self, n: int, s: float | torch.Tensor = 1.0) -> torch.Tensor:
        """Dense per-channel ``exp(sK)`` at length n: (D, n, n), orthogonal."""
        return circulant_matrix(self.weight, n, s)

    def diagnostics(self) -> dict[str, float]:
        f = torch.linspace(0, 0.5, 65, dtype=torch.float64)
        omega = self.phase_profile(f).detach()
        return {"phase_max_abs": omega.abs().max().item(), "phase_rms": omega.square().mean().sqrt().item()}


@contextmanager
def budget(model: nn.Module, s: float) -> Iterator[nn.Module]:
    """Run every flow mixer inside ``model`` at budget ``s`` (anytime inference), then restore.

    ``with budget(model, 0.5): y = model(x)`` — works for any model holding YB spectral mixers
    (found by their ``flow`` method), e.g. a stack of :class:`tsmix.Block`.
    """
    mixers = [m for m in model.modules() if hasattr(m, "flow") and hasattr(m, "budget")]
    if not mixers:
        raise TsmixError("budget(): the model holds no flow mixer (e.g. yb-spectral); nothing to run at s")
    saved = [m.budget for m in mixers]
    try:
        for m in mixers:
            m.budget = float(s)
        yield model
    finally:
        for m, b in zip(mixers, saved):
            m.budget = b
