"""Multi-head softmax attention through ``scaled_dot_product_attention`` (fused kernels)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from tsmix.errors import TsmixError
from tsmix.ops.attention import attend, attention_reference
from tsmix.registry import Mixer, register_mixer


@dataclass(frozen=True)
class SoftmaxOptions:
    bias: bool = True  # bias in the q/k/v/out projections
    dropout: float = 0.0  # attention-probability dropout, training only


def split_heads(t: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, N, H*Dh) -> (B, H, N, Dh)."""
    b, n, _ = t.shape
    return t.view(b, n, heads, -1).transpose(1, 2)


def merge_heads(t: torch.Tensor) -> torch.Tensor:
    """(B, H, N, Dh) -> (B, N, H*Dh)."""
    b, h, n, dh = t.shape
    return t.transpose(1, 2).reshape(b, n, h * dh)


def check_heads(dim: int, heads: int, name: str) -> None:
    if dim % heads:
        raise TsmixError(f"mixer {name!r}: dim {dim} is not divisible by heads {heads}")


def _space(trial) -> dict:
    return {"dropout": trial.suggest_float("softmax.dropout", 0.0, 0.3)}


@register_mixer("softmax", options=SoftmaxOptions, space=_space)
class SoftmaxAttention(Mixer):
    """Multi-head softmax attention (SDPA fast path, explicit-softmax reference)."""

    def __init__(self, dim: int, heads: int, causal: bool, options: SoftmaxOptions) -> None:
        super().__init__()
        check_heads(dim, heads, "softmax")
        self.dim, self.heads, self.causal, self.options = dim, heads, causal, options
        self.qkv = nn.Linear(dim, 3 * dim, bias=options.bias)
        self.out = nn.Linear(dim, dim, bias=options.bias)

    def _qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = self.qkv(x).chunk(3, dim=-1)  # each (B, N, D)
        return split_heads(q, self.heads), split_heads(k, self.heads), split_heads(v, self.heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, D) -> (B, N, D)
        q, k, v = self._qkv(x)  # (B, H, N, Dh)
        p = self.options.dropout if self.training else 0.0
        y = attend(q, k, v, self.causal, p)
        return self.out(merge_heads(y))

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """Plain softmax(QK^T / sqrt(d)) V, no dropout: the oracle for the fast path."""
        q, k, v = self._qkv(x)
        return self.out(merge_heads(attention_reference(q, k, v, self.causal)))
