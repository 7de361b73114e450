"""Encoders that turn a lookback window into a forecast around a stack of ``tsmix.Block``.

Both take the token mixer only as a registry name plus options and build it with
:func:`tsmix.build_mixer`; nothing here knows which mixer it holds, so any registered mixer
(including ones added later) works without edits.

* :class:`PatchEncoder` (PatchTST): channel-independent; each channel's window is cut into
  overlapping patches which become the tokens.
* :class:`VariateEncoder` (iTransformer): each variate's whole window is one token; the
  mixer mixes across variates.

Inputs are ``(B, L, C)`` windows, outputs ``(B, H, C)`` forecasts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tsmix.block import Block, make_norm
from tsmix.errors import TsmixError
from tsmix.forecasting.dropout import FastDropout, swap_dropout
from tsmix.forecasting.revin import RevIN
from tsmix.registry import build_mixer


@dataclass(frozen=True)
class EncoderConfig:
    channels: int  # C: variates in the input window
    lookback: int  # L
    horizon: int  # H
    mixer: str = "softmax"  # registry name
    mixer_options: Mapping[str, Any] = field(default_factory=dict)  # the mixer's options
    d_model: int = 16
    heads: int = 4
    layers: int = 3
    d_ff: int = 128
    dropout: float = 0.0  # embedding + block dropout
    head_dropout: float = 0.0  # before the linear head
    ffn: str = "gelu"
    norm: str = "batch"
    prenorm: bool = False
    revin: bool = True
    revin_affine: bool = False
    patch_len: int = 16  # patch encoder only
    stride: int = 8  # patch encoder only
    padding_patch: str = "end"  # patch encoder only: "end" | "none"


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


class PatchEncoder(nn.Module):
    """PatchTST: RevIN -> patches -> linear embed + learned position -> blocks -> flatten head."""

    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        if cfg.padding_patch not in ("end", "none"):
            raise TsmixError(f"padding_patch must be 'end' or 'none', got {cfg.padding_patch!r}")
        if cfg.patch_len > cfg.lookback:
            raise TsmixError(f"patch_len {cfg.patch_len} exceeds lookback {cfg.lookback}")
        self.cfg = cfg
        self.n_patches = num_patches(cfg.lookback, cfg.patch_len, cfg.stride, cfg.padding_patch)
        self.revin = RevIN(cfg.channels, cfg.revin_affine) if cfg.revin else None
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


class VariateEncoder(nn.Module):
    """iTransformer: instance norm -> each variate's window is a token -> blocks -> linear head."""

    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.revin = RevIN(cfg.channels, cfg.revin_affine) if cfg.revin else None
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
