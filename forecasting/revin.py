"""Reversible instance normalization (RevIN, Kim et al. 2022), as PatchTST and iTransformer use it.

Each window is standardized per channel over time before the encoder and the forecast is
mapped back with the same statistics. Stateless between calls: ``norm`` returns the
statistics and ``denorm`` takes them, so one module can serve interleaved batches.
"""

from __future__ import annotations

import torch
from torch import nn


class RevIN(nn.Module):
    def __init__(self, channels: int, affine: bool = False, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.affine = affine
        if affine:
            self.weight = nn.Parameter(torch.ones(channels))
            self.bias = nn.Parameter(torch.zeros(channels))

    def norm(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """(B, L, C) -> normalized (B, L, C) and the (mean, std) each (B, 1, C)."""
        mean = x.mean(dim=1, keepdim=True).detach()
        std = torch.sqrt(x.var(dim=1, keepdim=True, unbiased=False) + self.eps).detach()
        x = (x - mean) / std
        if self.affine:
            x = x * self.weight + self.bias
        return x, (mean, std)

    def denorm(self, y: torch.Tensor, stats: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """(B, H, C) back to the window's scale."""
        mean, std = stats
        if self.affine:
            # eps^2 guards a weight driven to 0, as the official implementation does
            y = (y - self.bias) / (self.weight + self.eps * self.eps)
        return y * std + mean
