"""PatchTST (Nie et al., ICLR 2023) over any mixer: RevIN -> patches -> blocks -> flatten head.

Channel-independent: each channel's window is cut into overlapping patches which become the
tokens. The paper preset is the official ``scripts/PatchTST/*.sh`` + ``run_longExp.py``
defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from tsmix.block import make_norm
from tsmix.errors import TsmixError
from tsmix.forecasting.config import ForecasterConfig
from tsmix.forecasting.dropout import FastDropout
from tsmix.forecasting.encoders import EncoderConfig, make_blocks, num_patches, patchify
from tsmix.forecasting.registry import TrainDefaults, register_model
from tsmix.forecasting.revin import RevIN
from tsmix.forecasting.spaces import encoder_space


@dataclass(frozen=True, kw_only=True)
class PatchTSTConfig(EncoderConfig):
    # the official ETTh recipe: small and fast
    d_model: int = 16  # token width
    heads: int = 4  # mixer heads
    layers: int = 3  # number of blocks
    d_ff: int = 128  # FFN hidden width
    dropout: float = 0.3  # embedding + block dropout
    norm: str = "batch"  # BatchNorm over tokens, as the official encoder
    prenorm: bool = False  # post-norm, as the official encoder
    patch_len: int = ForecasterConfig.patch_len  # P: patch length
    stride: int = ForecasterConfig.stride  # S: patch stride
    padding_patch: str = ForecasterConfig.padding_patch  # "end": replicate the last value `stride` times

    def __post_init__(self) -> None:
        if self.padding_patch not in ("end", "none"):
            raise TsmixError(f"padding_patch must be 'end' or 'none', got {self.padding_patch!r}")
        if self.patch_len > self.lookback:
            raise TsmixError(
                f"patch_len {self.patch_len} is longer than lookback {self.lookback}; lower --patch-len"
            )


# The official PatchTST loop builds a OneCycleLR before training even when lradj != 'TST'; its
# constructor sets the lr to max_lr / div_factor (25), and the per-epoch "type3" rule only
# overwrites that after epoch 1. So epoch 1 of every non-one-cycle PatchTST run used lr / 25.
FIRST_EPOCH_LR_SCALE = 1 / 25

_COMMON: dict[str, Any] = dict(
    lookback=336, patch_len=16, stride=8, padding_patch="end", layers=3, revin=True, revin_affine=False,
    norm="batch", prenorm=False, ffn="gelu", head_dropout=0.0, batch_size=128, test_batch_size=128,
    lr=1e-4, optimizer="adam", epochs=100, drop_last=True, grad_clip=None,
)
_SMALL = dict(d_model=16, heads=4, d_ff=128, dropout=0.3)  # ETTh scripts
_LARGE = dict(d_model=128, heads=16, d_ff=256, dropout=0.2)  # ETTm / Weather scripts
_PAPER: dict[str, dict[str, Any]] = {
    "ETTh1": dict(_SMALL, lr_schedule="type3", patience=100, first_epoch_lr_scale=FIRST_EPOCH_LR_SCALE),
    "ETTh2": dict(_SMALL, lr_schedule="type3", patience=100, first_epoch_lr_scale=FIRST_EPOCH_LR_SCALE),
    "ETTm1": dict(_LARGE, lr_schedule="onecycle", pct_start=0.4, patience=20),
    "ETTm2": dict(_LARGE, lr_schedule="onecycle", pct_start=0.4, patience=20),
    "Weather": dict(_LARGE, lr_schedule="type3", patience=20, first_epoch_lr_scale=FIRST_EPOCH_LR_SCALE),
}


def paper(dataset: str, horizon: int) -> dict[str, Any]:
    """The official PatchTST/42 settings of ``dataset`` (a benchmark name) at ``horizon``."""
    return dict(_COMMON, **_PAPER[dataset], horizon=horizon)


def space(trial: Any) -> dict[str, Any]:
    patch_len = trial.suggest_categorical("patch_len", [8, 16])  # both fit a lookback >= 16
    return {**encoder_space(trial), "patch_len": patch_len, "stride": patch_len // 2}


@register_model(
    "patchtst", config=PatchTSTConfig, space=space, presets={"paper": paper}, uses_mixer=True,
    training=TrainDefaults(batch_size=128, lr=1e-4, lr_schedule="type3", patience=10),
)
class PatchEncoder(nn.Module):
    """PatchTST: RevIN -> patches -> linear embed + learned position -> blocks -> flatten head."""

    def __init__(self, cfg: PatchTSTConfig, channels: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.n_patches = num_patches(cfg.lookback, cfg.patch_len, cfg.stride, cfg.padding_patch)
        self.revin = RevIN(channels, cfg.revin_affine, center=cfg.revin_center) if cfg.revin else None
        self.embed = nn.Linear(cfg.patch_len, cfg.d_model)
        # learned positional embedding, uniform(-0.02, 0.02) as the official "zeros" + learn_pe
        self.pos = nn.Parameter(torch.empty(self.n_patches, cfg.d_model).uniform_(-0.02, 0.02))
        self.drop = FastDropout(cfg.dropout)
        self.blocks = make_blocks(cfg)
        # a pre-norm stack leaves the residual stream un-normalized: close it with one norm
        self.final_norm = make_norm(cfg.norm, cfg.d_model) if cfg.prenorm else nn.Identity()
        self.head_drop = FastDropout(cfg.head_dropout)
        self.head = nn.Linear(self.n_patches * cfg.d_model, cfg.horizon)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, L, C) -> (B, H, C)
        b, _, c = x.shape
        if self.revin is not None:
            x, stats = self.revin.norm(x)
        p = patchify(x.transpose(1, 2), self.cfg.patch_len, self.cfg.stride, self.cfg.padding_patch)
        u = self.embed(p).reshape(b * c, self.n_patches, -1)  # (B*C, N, D) channel-independent
        u = self.drop(u + self.pos)
        for blk in self.blocks:
            u = blk(u)
        u = self.final_norm(u).reshape(b, c, -1)  # (B, C, N*D)
        y = self.head(self.head_drop(u)).transpose(1, 2)  # (B, H, C)
        if self.revin is not None:
            y = self.revin.denorm(y, stats)
        return y
