"""iTransformer (Liu et al., ICLR 2024) over any mixer: each variate's window is one token.

The mixer mixes across variates. The paper preset is the official
``thuml/iTransformer`` ``scripts/multivariate_forecasting`` settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from tsmix.block import make_norm
from tsmix.forecasting.dropout import FastDropout
from tsmix.forecasting.encoders import EncoderConfig, make_blocks
from tsmix.forecasting.registry import ModelNeeds, TrainDefaults, register_model
from tsmix.forecasting.revin import RevIN
from tsmix.forecasting.spaces import encoder_space


@dataclass(frozen=True, kw_only=True)
class ITransformerConfig(EncoderConfig):
    # the official ETT scripts: 2 layers, width 128
    d_model: int = 128  # token width
    heads: int = 8  # mixer heads
    layers: int = 2  # number of blocks
    d_ff: int = 128  # FFN hidden width
    dropout: float = 0.1  # embedding + block dropout
    norm: str = "layer"  # LayerNorm, as the official encoder
    prenorm: bool = False  # post-norm, as the official encoder


# L=96, 8 heads, batch 32, lr 1e-4, 10 epochs, patience 3, lr halving each epoch ("type1").
_COMMON: dict[str, Any] = dict(heads=8, batch_size=32, lr=1e-4, epochs=10, patience=3, dropout=0.1,
                               lr_schedule="type1")
_PAPER: dict[str, dict[str, Any]] = {
    "ETTh1": dict(layers=2, d_model=256, d_ff=256),
    "ETTh2": dict(layers=2, d_model=128, d_ff=128),
    "ETTm1": dict(layers=2, d_model=128, d_ff=128),
    "ETTm2": dict(layers=2, d_model=128, d_ff=128),
    "Weather": dict(layers=3, d_model=512, d_ff=512),
}


def paper(dataset: str, horizon: int) -> dict[str, Any]:
    """The official iTransformer settings of ``dataset`` (a benchmark name) at ``horizon``."""
    return {**_COMMON, **_PAPER[dataset], "lookback": 96, "horizon": horizon}


def space(trial: Any) -> dict[str, Any]:
    """The encoder space plus the official timestamp tokens (``calendar``): on or off, chosen on
    validation like every other setting (ETTm1: lower validation and test MSE with them)."""
    return {**encoder_space(trial), "calendar": trial.suggest_categorical("calendar", [False, True])}


@register_model(
    "itransformer", config=ITransformerConfig, space=space, presets={"paper": paper}, uses_mixer=True,
    training=TrainDefaults(batch_size=32, lr=1e-4, lr_schedule="type1", patience=3),
    needs=ModelNeeds(covariates=("hist_exog", "futr_exog")),  # panels: covariates as extra variate tokens
)
class VariateEncoder(nn.Module):
    """iTransformer: instance norm -> each variate's window is a token -> blocks -> linear head."""

    def __init__(self, cfg: ITransformerConfig, channels: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.revin = RevIN(channels, cfg.revin_affine, center=cfg.revin_center) if cfg.revin else None
        self.embed = nn.Linear(cfg.lookback, cfg.d_model)
        self.drop = FastDropout(cfg.dropout)
        self.blocks = make_blocks(cfg)
        self.final_norm = make_norm(cfg.norm, cfg.d_model)  # the official encoder ends with a norm
        self.head_drop = FastDropout(cfg.head_dropout)
        self.head = nn.Linear(cfg.d_model, cfg.horizon)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, L, C) -> (B, H, C)
        if self.revin is not None:
            x, stats = self.revin.norm(x)
        u = self.drop(self.embed(x.transpose(1, 2)))  # (B, C, D): one token per variate
        for blk in self.blocks:
            u = blk(u)
        y = self.head(self.head_drop(self.final_norm(u))).transpose(1, 2)  # (B, H, C)
        if self.revin is not None:
            y = self.revin.denorm(y, stats)
        return y
