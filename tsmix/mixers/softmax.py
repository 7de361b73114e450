"""Multi-head softmax attention: ``scaled_dot_product_attention`` (fused kernels), or on CPU for
small heads and short sequences one channel-major pass of plain ops (``_forward_t``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tsmix.errors import TsmixError
from tsmix.ops.attention import attend, attend_t, attention_reference, small_attention
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


def attention_t(x: torch.Tensor, qkv: nn.Linear, heads: int, causal: bool) -> torch.Tensor:
    """Multi-head softmax attention of ``x (B, N, D)`` with the fused projection ``qkv`` (D -> 3D,
    q | k | v, heads split as :func:`split_heads`), channel-major: -> merged heads ``(B N, D)``
    (the transpose of a contiguous ``(D, B N)``; a linear layer reads it as it is).

    The small-head form (CPU, heads <= 16 wide, short sequences; see
    :func:`tsmix.ops.attention.small_attention`) with every head of every sequence a ``(Dh, N)``
    block. Why: token-major, splitting and merging heads of 4 channels are strided copies and the
    read's bmm has the 4-wide head axis innermost; here the projection writes ``(3D, B N)`` (``mm``
    reads x transposed), q, k, v become ``(H B, Dh, N)`` blocks in one copy, and
    :func:`~tsmix.ops.attention.attend_t` reads ``v p^T`` in cache-sized blocks of the batch
    (``p^T`` as the bmm's operand flag), so every bmm runs along the N-long token axis. Patch
    encoder's shape (896 x 42 tokens, D = 16, 4 heads), fwd+bwd, one thread: ~15% faster than the
    token-major form (session 13, before the blocked read). Same maths as
    :func:`~tsmix.ops.attention.attend`'s small-head path.
    """
    b, n, d = x.shape
    dh = d // heads
    xt, w, bias = x.reshape(-1, d).t(), qkv.weight, qkv.bias  # xt (D, B N)
    z = w @ xt if bias is None else torch.addmm(bias[:, None], w, xt)  # (3D, B N)
    blocks = z.view(3, heads, dh, b, n).transpose(2, 3).reshape(3, heads * b, dh, n)  # one copy
    q, k, v = blocks.unbind(0)  # (H B, Dh, N) each
    r = attend_t(q, k, v, causal)  # (H B, Dh, N)
    return r.view(heads, b, dh, n).transpose(1, 2).reshape(d, b * n).t()  # (B N, D)


def linear_t(layer: nn.Module, xt: torch.Tensor) -> torch.Tensor:
    """An ``nn.Linear`` (or an ``nn.Sequential`` of only them) applied to channel-major
    ``xt (D_in, M)``: ``(D_out, M)``, one ``addmm`` per layer (its bias a broadcast column)."""
    if isinstance(layer, nn.Sequential):
        for sub in layer:
            xt = linear_t(sub, xt)
        return xt
    return layer.weight @ xt if layer.bias is None else torch.addmm(layer.bias[:, None], layer.weight, xt)


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
        p = self.options.dropout if self.training else 0.0
        if small_attention(x.device, self.dim // self.heads, x.shape[1], p):
            return self._forward_t(x)
        q, k, v = self._qkv(x)  # (B, H, N, Dh)
        y = attend(q, k, v, self.causal, p)
        return self.out(merge_heads(y))

    def _forward_t(self, x: torch.Tensor) -> torch.Tensor:
        """The small-head form channel-major (:func:`attention_t`), then the out projection."""
        b, n, d = x.shape
        y = attention_t(x, self.qkv, self.heads, self.causal)  # (B N, D)
        return F.linear(y, self.out.weight, self.out.bias).view(b, n, d)

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """Plain softmax(QK^T / sqrt(d)) V, no dropout: the oracle for the fast path."""
        q, k, v = self._qkv(x)
        return self.out(merge_heads(attention_reference(q, k, v, self.causal)))
