"""What the two mixer encoders share: their config fields, the block stack, patching.

Both encoders take the token mixer only as a registry name plus options and build it with
:func:`tsmix.build_mixer`; nothing here knows which mixer it holds, so any registered mixer
(including ones added later) works without edits. The encoders themselves live with their
model registration: :class:`~tsmix.forecasting.models.patchtst.PatchEncoder` (PatchTST,
channel-independent patch tokens) and :class:`~tsmix.forecasting.models.itransformer.VariateEncoder`
(iTransformer, one token per variate). Inputs are ``(B, L, C)`` windows, outputs ``(B, H, C)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tsmix.block import Block
from tsmix.forecasting.config import ForecasterConfig
from tsmix.forecasting.dropout import swap_dropout
from tsmix.registry import build_mixer

# Model-independent defaults come from the flat ForecasterConfig (their one home); each encoder's
# config (PatchTSTConfig, ITransformerConfig) declares its own width, depth, dropout and norm.
_FLAT = ForecasterConfig


@dataclass(frozen=True, kw_only=True)
class EncoderConfig:
    """What both encoders share. Field names are ForecasterConfig's: configs are built by name."""

    lookback: int  # L: input window length
    horizon: int  # H: steps to forecast
    mixer: str = _FLAT.mixer  # registry name, built by tsmix.build_mixer
    mixer_options: Mapping[str, Any] = field(default_factory=dict)  # the mixer's options
    d_model: int  # token width
    heads: int  # mixer heads
    layers: int  # number of blocks
    d_ff: int  # FFN hidden width
    dropout: float  # embedding + block dropout
    head_dropout: float = _FLAT.head_dropout  # before the linear head
    ffn: str = _FLAT.ffn  # block FFN kind (tsmix.block.FFNS)
    norm: str  # block norm ("batch" | "layer" | ...)
    prenorm: bool  # False = post-norm as both official encoders
    revin: bool = _FLAT.revin  # instance normalization of each window
    revin_affine: bool = _FLAT.revin_affine  # learnable RevIN scale/shift
    revin_center: str = _FLAT.revin_center  # RevIN subtracts the window's mean or its last value


def make_blocks(cfg: EncoderConfig) -> nn.ModuleList:
    """``layers`` blocks, each with its own mixer built by name (non-causal: encoders see all).

    The blocks' own dropouts (residual branches, FFN) use FastDropout; a mixer's are untouched.
    """
    return nn.ModuleList(
        swap_dropout(Block(
            cfg.d_model,
            build_mixer(cfg.mixer, cfg.d_model, heads=cfg.heads, causal=False, **dict(cfg.mixer_options)),
            cfg.ffn,
            cfg.norm,
            ffn_hidden=cfg.d_ff,
            prenorm=cfg.prenorm,
            dropout=cfg.dropout,
        ), skip=("mixer",))
        for _ in range(cfg.layers)
    )


def num_patches(lookback: int, patch_len: int, stride: int, padding: str) -> int:
    """Patches per channel: PatchTST's ``(L - P) // S + 1``, plus one with end padding."""
    return (lookback - patch_len) // stride + 1 + (1 if padding == "end" else 0)


def patchify(z: torch.Tensor, patch_len: int, stride: int, padding: str) -> torch.Tensor:
    """(B, C, L) -> (B, C, N, P) overlapping patches as one unfold view (fast path)."""
    if padding == "end":
        z = F.pad(z, (0, stride), mode="replicate")  # = nn.ReplicationPad1d((0, stride))
    return z.unfold(-1, patch_len, stride)


def patchify_reference(z: torch.Tensor, patch_len: int, stride: int, padding: str) -> torch.Tensor:
    """Plain loop over patch starts: the oracle for :func:`patchify`."""
    if padding == "end":
        z = torch.cat([z, z[..., -1:].expand(*z.shape[:-1], stride)], dim=-1)
    starts = range(0, z.shape[-1] - patch_len + 1, stride)
    return torch.stack([z[..., s : s + patch_len] for s in starts], dim=-2)
