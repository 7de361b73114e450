"""Rotary position embedding (rotate-half layout), a true rotation of each channel pair.

Channel ``i`` is paired with ``i + d/2`` and the pair is rotated by ``pos * base^(-i/(d/2))``,
so norms are preserved and ``<rope(q, m), rope(k, n)>`` depends on ``m - n`` only. (The FEM
release pairs channels ``(2i, 2i+1)`` for the rotation but builds the angles for the
``(i, i + d/2)`` layout, which is not a rotation.)
"""

from __future__ import annotations

import torch


def rope(x: torch.Tensor, base: float = 10000.0, offset: int = 0) -> torch.Tensor:
    """``x (..., N, d)`` with even ``d``, positions ``offset .. offset + N - 1``."""
    n, d = x.shape[-2], x.shape[-1]
    if d % 2:
        raise ValueError(f"rope needs an even head dimension, got {d}")
    half = d // 2
    wd = torch.float64 if x.dtype == torch.float64 else torch.float32
    inv = base ** (-torch.arange(half, device=x.device, dtype=wd) / half)  # (d/2,)
    ang = (torch.arange(n, device=x.device, dtype=wd) + offset)[:, None] * inv  # (N, d/2)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
