"""Explicit softmax attention and the causal mask: the one plain reference every mixer uses.

The fast paths call ``scaled_dot_product_attention`` (fused kernels); the references here
form the (N, N) scores explicitly, so the float64 contract tests compare two genuinely
different computations.
"""

from __future__ import annotations

import torch


def causal_mask(n: int, device: torch.device | str | None = None, *, strict: bool = False) -> torch.Tensor:
    """(n, n) bool, True where query ``t`` may see key ``s``: ``s <= t`` (``s < t`` if strict)."""
    return torch.ones(n, n, dtype=torch.bool, device=device).tril(-1 if strict else 0)


def attention_logits(
    q: torch.Tensor, k: torch.Tensor, causal: bool, scale: float | None = None
) -> torch.Tensor:
    """Scores ``q k^T * scale`` (B, H, N, N) from ``q, k (B, H, N, d)``, -inf above the diagonal
    when causal; ``scale`` None = ``1 / sqrt(d)`` (applied as a division, as SDPA defines it)."""
    s = q @ k.transpose(-1, -2)
    s = s / q.shape[-1] ** 0.5 if scale is None else s * scale
    if causal:
        s = s.masked_fill(~causal_mask(q.shape[-2], q.device), float("-inf"))
    return s


def attention_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float | None = None
) -> torch.Tensor:
    """Plain ``softmax(q k^T * scale) v``, no dropout: ``(B, H, N, d), (B, H, N, d_v) -> (B, H, N, d_v)``."""
    return torch.softmax(attention_logits(q, k, causal, scale), dim=-1) @ v
