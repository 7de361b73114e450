"""Reversible instance normalization (RevIN, Kim et al. 2022), as PatchTST and iTransformer use it.

Each window is standardized per channel over time before the encoder and the forecast is
mapped back with the same statistics. Stateless between calls: ``norm`` returns the
statistics and ``denorm`` takes them, so one module can serve interleaved batches.

``center="last"`` subtracts the window's last value instead of its mean (the official PatchTST
``subtract_last`` option): the scale is still the window's standard deviation, and the forecast
is anchored at the level the series ended on, not the window's average level.
"""

from __future__ import annotations

import torch
from torch import nn

CENTERS = ("mean", "last")


class RevIN(nn.Module):
    def __init__(self, channels: int, affine: bool = False, eps: float = 1e-5, center: str = "mean") -> None:
        super().__init__()
        if center not in CENTERS:
            raise ValueError(f"RevIN center must be one of {', '.join(CENTERS)}, got {center!r}")
        self.eps = eps
        self.affine = affine
        self.center = center
        if affine:
            self.weight = nn.Parameter(torch.ones(channels))
            self.bias = nn.Parameter(torch.zeros(channels))

    def norm(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """(B, L, C) -> normalized (B, L, C) and the (center, std) each (B, 1, C): the center is the
        window's mean, or its last value with ``center="last"``."""
        std = torch.sqrt(x.var(dim=1, keepdim=True, unbiased=False) + self.eps).detach()
        center = (x[:, -1:] if self.center == "last" else x.mean(dim=1, keepdim=True)).detach()
        x = (x - center) / std
        if self.affine:
            x = x * self.weight + self.bias
        return x, (center, std)

    def extra_repr(self) -> str:
        return f"affine={self.affine}, center={self.center!r}"

    def denorm(self, y: torch.Tensor, stats: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """(B, H, C) back to the window's scale."""
        center, std = stats
        if self.affine:
            # eps^2 guards a weight driven to 0, as the official implementation does
            y = (y - self.bias) / (self.weight + self.eps * self.eps)
        return y * std + center
