"""DLinear (Zeng et al., AAAI 2023): moving-average trend + seasonal remainder, one linear map each.

The moving average pads each end by repeating the edge value ``(k - 1) // 2`` times, as the
official code does, so the trend has the window's length.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tsmix.errors import TsmixError


def moving_average(x: torch.Tensor, kernel_size: int) -> torch.Tensor:
    """(B, L, C) -> (B, L, C) centred mean with edge replication (one avg_pool1d: fast path)."""
    pad = (kernel_size - 1) // 2
    z = F.pad(x.transpose(1, 2), (pad, pad), mode="replicate")  # (B, C, L + 2 pad)
    return F.avg_pool1d(z, kernel_size, stride=1).transpose(1, 2)


def moving_average_reference(x: torch.Tensor, kernel_size: int) -> torch.Tensor:
    """Explicit edge repeat and a loop over window positions: the oracle for the fast path."""
    pad = (kernel_size - 1) // 2
    z = torch.cat([x[:, :1].expand(-1, pad, -1), x, x[:, -1:].expand(-1, pad, -1)], dim=1)
    return torch.stack([z[:, t : t + kernel_size].mean(dim=1) for t in range(x.shape[1])], dim=1)


class PerChannelLinear(nn.Module):
    """C independent ``nn.Linear(L, H)`` maps as one batched einsum; same init as nn.Linear."""

    def __init__(self, channels: int, in_len: int, out_len: int) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(in_len)
        self.weight = nn.Parameter(torch.empty(channels, out_len, in_len).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(channels, out_len).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, L) -> (B, C, H)
        return torch.einsum("bcl,chl->bch", x, self.weight) + self.bias


class DLinear(nn.Module):
    def __init__(
        self, channels: int, lookback: int, horizon: int, kernel_size: int = 25, individual: bool = False
    ) -> None:
        super().__init__()
        if kernel_size % 2 == 0 or kernel_size < 1:
            raise TsmixError(f"DLinear kernel_size must be a positive odd int, got {kernel_size}")
        self.kernel_size = kernel_size
        if individual:
            self.seasonal = PerChannelLinear(channels, lookback, horizon)
            self.trend = PerChannelLinear(channels, lookback, horizon)
        else:
            self.seasonal = nn.Linear(lookback, horizon)
            self.trend = nn.Linear(lookback, horizon)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, L, C) -> (B, H, C)
        trend = moving_average(x, self.kernel_size)
        seasonal = x - trend
        y = self.seasonal(seasonal.transpose(1, 2)) + self.trend(trend.transpose(1, 2))  # (B, C, H)
        return y.transpose(1, 2)
