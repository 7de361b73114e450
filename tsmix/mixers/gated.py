"""Gated softmax attention: multiplicative gates that make attention's output map curved.

Ungated attention returns a convex combination of the values, an affine function of them, so
its output manifold is flat; a multiplicative gate ``Y * g`` bends it (arXiv 2604.14702).
Two registered families share one attention core:

- ``gated``: the gate acts on the attention output ``Y`` itself (after SDPA, before the output
  projection), with ``variant`` one of
  ``none`` (Y), ``silu`` (Y * sigmoid(Y)), ``mult`` (Y * [1 + alpha (sigmoid(W Y) - 1)]),
  ``sigmoid`` (Y * sigmoid(W Y)) and ``nonsparse`` (Y * (0.5 + 0.5 sigmoid(W Y))).
  ``mult`` interpolates: alpha = 0 is ``none``, alpha = 1 is ``sigmoid``; ``nonsparse`` as written
  (the issue's and the paper table's formula, gate in (0.5, 1)) is the same function as alpha = 0.5.
- ``gated-g1``: the gate comes from the block input ``x`` (G1 position of gated attention for
  LLMs, NeurIPS 2025): ``Y * sigmoid(x W_g)``, one gate per head or per channel.

Each has an SDPA fast path and an explicit-softmax ``reference`` for the float64 tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from tsmix.errors import TsmixError
from tsmix.mixers.softmax import attention_t, check_heads, merge_heads, split_heads
from tsmix.ops.attention import attend as fast_attend
from tsmix.ops.attention import attention_reference, small_attention
from tsmix.registry import Mixer, register_mixer

VARIANTS = ("none", "silu", "mult", "sigmoid", "nonsparse")
GRANULARITIES = ("headwise", "elementwise")
SPARSE_BELOW = 0.1  # a gate value under this counts as "closed" in diagnostics()


@dataclass(frozen=True)
class GatedOptions:
    variant: str = "sigmoid"  # none | silu | mult | sigmoid | nonsparse (see module doc)
    alpha: float = 1.0  # gate strength of variant "mult": 0 = ungated, 1 = classic sigmoid gate
    bias: bool = True  # bias in the q/k/v/out projections (the gate projection always has one)
    dropout: float = 0.0  # attention-probability dropout, training only

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise TsmixError(f"unknown gated variant {self.variant!r}; choose one of {', '.join(VARIANTS)}")
        if not 0.0 <= self.alpha <= 1.0:
            raise TsmixError(f"gated alpha must lie in [0, 1], got {self.alpha}; 0 is ungated, 1 full gate")
        if self.alpha != 1.0 and self.variant != "mult":
            raise TsmixError(
                f"gated alpha={self.alpha} only applies to variant='mult' (got variant={self.variant!r}); "
                f"use variant='mult' or drop alpha"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise TsmixError(f"gated dropout must lie in [0, 1), got {self.dropout}")


@dataclass(frozen=True)
class GatedG1Options:
    granularity: str = "elementwise"  # headwise: one gate per (token, head); elementwise: per channel
    # None: PyTorch's default init (gate ~ 0.5 +- noise, as in the LLM paper). p in (0, 1): zero
    # gate weights and bias logit(p), so training starts exactly from p * attention; p near 1
    # starts as plain attention and lets the gate close where it helps.
    gate_init: float | None = None
    bias: bool = True  # bias in the q/k/v/out projections (the gate projection always has one)
    dropout: float = 0.0  # attention-probability dropout, training only

    def __post_init__(self) -> None:
        if self.granularity not in GRANULARITIES:
            raise TsmixError(
                f"unknown gated-g1 granularity {self.granularity!r}; choose one of {', '.join(GRANULARITIES)}"
            )
        if self.gate_init is not None and not 0.0 < self.gate_init < 1.0:
            raise TsmixError(
                f"gated-g1 gate_init must lie strictly in (0, 1) (a sigmoid value), got {self.gate_init}; "
                f"e.g. 0.98 to start near an open gate, or None for the default init"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise TsmixError(f"gated-g1 dropout must lie in [0, 1), got {self.dropout}")


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, dropout_p: float = 0.0,
    reference: bool = False,
) -> torch.Tensor:
    """Softmax attention (B, H, N, Dh) -> (B, H, N, Dh): SDPA, or the explicit formula (no dropout)."""
    if not reference:
        return fast_attend(q, k, v, causal, dropout_p)
    return attention_reference(q, k, v, causal)


def _plain_sigmoid(z: torch.Tensor) -> torch.Tensor:
    # Written out for the reference path; the fast path uses torch.sigmoid.
    return 1.0 / (1.0 + torch.exp(-z))


class _GateStats:
    """Summary of the last forward's gate, kept out of the state_dict (diagnostics only)."""

    def __init__(self) -> None:
        self.last: torch.Tensor | None = None  # (2,) = (mean gate, fraction below SPARSE_BELOW)

    @torch.no_grad()
    def record(self, g: torch.Tensor) -> None:
        g = g.detach().float()
        self.last = torch.stack([g.mean(), (g < SPARSE_BELOW).float().mean()])

    def as_dict(self) -> dict[str, float]:
        if self.last is None:
            return {}
        mean, closed = self.last.tolist()
        return {"gate_mean": mean, "gate_closed_frac": closed}


class _AttentionCore(Mixer):
    """q/k/v and output projections shared by both gated families."""

    def __init__(self, dim: int, heads: int, causal: bool, bias: bool, dropout: float, name: str) -> None:
        super().__init__()
        check_heads(dim, heads, name)
        self.dim, self.heads, self.causal, self.dropout = dim, heads, causal, dropout
        self.qkv = nn.Linear(dim, 3 * dim, bias=bias)
        self.out = nn.Linear(dim, dim, bias=bias)
        self.stats = _GateStats()

    def _attention(self, x: torch.Tensor, reference: bool) -> torch.Tensor:  # (B, N, D) -> (B, H, N, Dh)
        q, k, v = self.qkv(x).chunk(3, dim=-1)  # each (B, N, D)
        q, k, v = (split_heads(t, self.heads) for t in (q, k, v))
        p = self.dropout if (self.training and not reference) else 0.0
        return attend(q, k, v, self.causal, p, reference)

    def _small(self, x: torch.Tensor) -> bool:
        """Whether the fast forward takes the channel-major small-head form (:func:`attention_t`)."""
        p = self.dropout if self.training else 0.0
        return small_attention(x.device, self.dim // self.heads, x.shape[1], p)

    def diagnostics(self) -> dict[str, float]:
        """Mean gate value and fraction of nearly closed gates (< 0.1) of the last forward."""
        return self.stats.as_dict()


def _gated_space(trial) -> dict:
    variant = trial.suggest_categorical("gated.variant", list(VARIANTS))
    opts: dict = {"variant": variant}
    if variant == "mult":
        opts["alpha"] = trial.suggest_float("gated.alpha", 0.0, 1.0)
    return opts


@register_mixer("gated", options=GatedOptions, space=_gated_space)
class GatedAttention(_AttentionCore):
    """Softmax attention with a self-gate on its output Y: none | silu | mult(alpha) | sigmoid | nonsparse."""

    def __init__(self, dim: int, heads: int, causal: bool, options: GatedOptions) -> None:
        super().__init__(dim, heads, causal, options.bias, options.dropout, "gated")
        self.options = options
        # Gate logits W Y over the merged heads; the ungated and SiLU forms have no parameters.
        self.gate = nn.Linear(dim, dim) if options.variant in ("mult", "sigmoid", "nonsparse") else None

    def _gate(self, y: torch.Tensor, reference: bool) -> torch.Tensor:  # (B, N, D) -> (B, N, D)
        variant, alpha = self.options.variant, self.options.alpha
        if variant == "none":
            return y
        sig = _plain_sigmoid if reference else torch.sigmoid
        if variant == "silu":
            g = sig(y)
        else:
            s = sig(self.gate(y))
            if variant == "sigmoid":
                g = s
            elif variant == "nonsparse":
                g = 0.5 + 0.5 * s
            else:  # mult: 1 + alpha (s - 1), the gate's pull away from identity scaled by alpha
                g = 1.0 + alpha * (s - 1.0)
        if not reference:
            self.stats.record(g)
        return y * g

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, D) -> (B, N, D)
        if self._small(x):
            y = attention_t(x, self.qkv, self.heads, self.causal).view(x.shape)  # (B, N, D)
        else:
            y = merge_heads(self._attention(x, reference=False))  # (B, N, D)
        return self.out(self._gate(y, reference=False))

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """Explicit softmax attention and gate formula, no dropout: the oracle for ``forward``."""
        y = merge_heads(self._attention(x, reference=True))
        return self.out(self._gate(y, reference=True))


def _g1_space(trial) -> dict:
    return {
        "granularity": trial.suggest_categorical("gated-g1.granularity", list(GRANULARITIES)),
        "gate_init": trial.suggest_categorical("gated-g1.gate_init", [None, 0.9, 0.98]),
    }


@register_mixer("gated-g1", options=GatedG1Options, space=_g1_space)
class GatedG1Attention(_AttentionCore):
    """Softmax attention times sigmoid(x W_g) from the block input, after SDPA and before the out proj."""

    def __init__(self, dim: int, heads: int, causal: bool, options: GatedG1Options) -> None:
        super().__init__(dim, heads, causal, options.bias, options.dropout, "gated-g1")
        self.options = options
        self.gate = nn.Linear(dim, heads if options.granularity == "headwise" else dim)
        if options.gate_init is not None:
            p = options.gate_init
            nn.init.zeros_(self.gate.weight)
            nn.init.constant_(self.gate.bias, math.log(p / (1.0 - p)))  # sigmoid(bias) = p

    def _gate(self, x: torch.Tensor, reference: bool) -> torch.Tensor:  # (B, N, D) -> gate like (B, H, N, *)
        z = self.gate(x)  # (B, N, H) or (B, N, D)
        g = _plain_sigmoid(z) if reference else torch.sigmoid(z)
        if not reference:
            self.stats.record(g)
        if self.options.granularity == "headwise":
            return g.transpose(1, 2).unsqueeze(-1)  # (B, H, N, 1): one scalar per head and token
        return split_heads(g, self.heads)  # (B, H, N, Dh)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, D) -> (B, N, D)
        if self._small(x):  # channel-major attention, merged heads (B, N, H, Dh) gated in place
            b, n, d = x.shape
            y = attention_t(x, self.qkv, self.heads, self.causal).view(b, n, self.heads, d // self.heads)
            g = self._gate(x, reference=False).transpose(1, 2)  # (B, N, H, 1 or Dh)
            return self.out((y * g).view(b, n, d))
        y = self._attention(x, reference=False)  # (B, H, N, Dh)
        return self.out(merge_heads(y * self._gate(x, reference=False)))

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """Explicit softmax attention and gate formula, no dropout: the oracle for ``forward``."""
        y = self._attention(x, reference=True)
        return self.out(merge_heads(y * self._gate(x, reference=True)))
