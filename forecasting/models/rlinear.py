"""RLinear (Li et al., 2023, "Revisiting Long-term Time Series Forecasting: An Investigation on
Linear Mapping"): reversible instance normalization around one linear map L -> H per channel.

No token mixer. It is the strongest simple baseline on the ETT sets in that paper, and the
linear member of tsmix's ensembles and anchor searches. The map is shared by the channels
(``individual=False``, the paper's default) or one per channel; dropout acts on the
normalized input window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from tsmix.forecasting.config import ForecasterConfig
from tsmix.forecasting.dlinear import PerChannelLinear
from tsmix.forecasting.registry import TrainDefaults, register_model
from tsmix.forecasting.revin import RevIN
from tsmix.forecasting.spaces import training_space


@dataclass(frozen=True, kw_only=True)
class RLinearConfig:
    lookback: int  # L: input window length
    horizon: int  # H: steps to forecast
    revin: bool = ForecasterConfig.revin  # the R of RLinear: without it this is a plain linear map
    revin_affine: bool = ForecasterConfig.revin_affine  # learnable per-channel scale/shift (a tuning choice)
    revin_center: str = ForecasterConfig.revin_center  # subtract the window's mean or its last value
    dropout: float = 0.0  # on the normalized input window
    individual: bool = ForecasterConfig.individual  # one linear map per channel instead of shared


def space(trial: Any) -> dict[str, Any]:
    return {
        **training_space(trial),
        "dropout": trial.suggest_float("dropout", 0.0, 0.5),
        "revin_affine": trial.suggest_categorical("revin_affine", [False, True]),
        "individual": trial.suggest_categorical("individual", [False, True]),
    }


@register_model(
    "rlinear", config=RLinearConfig, space=space, uses_mixer=False,
    training=TrainDefaults(batch_size=32, lr=0.005, lr_schedule="type1", patience=3),
)
class RLinear(nn.Module):
    """RevIN -> dropout -> Linear(L, H) along time for each channel -> RevIN back."""

    def __init__(self, cfg: RLinearConfig, channels: int) -> None:
        super().__init__()
        self.revin = RevIN(channels, cfg.revin_affine, center=cfg.revin_center) if cfg.revin else None
        self.drop = nn.Dropout(cfg.dropout)
        self.linear = (PerChannelLinear(channels, cfg.lookback, cfg.horizon) if cfg.individual
                       else nn.Linear(cfg.lookback, cfg.horizon))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, L, C) -> (B, H, C)
        if self.revin is not None:
            x, stats = self.revin.norm(x)
        y = self.linear(self.drop(x.transpose(1, 2))).transpose(1, 2)  # (B, C, L) -> (B, C, H) -> (B, H, C)
        if self.revin is not None:
            y = self.revin.denorm(y, stats)
        return y
