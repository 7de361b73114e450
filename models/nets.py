"""Networks shared by the task and vision pipelines: positions, a stack of mixer Blocks, a token net.

Every network is ``front -> [+ positions] -> MixerStack -> readout``; the mixer is a registry
name and the network never looks inside it. Position embeddings follow the mixer's declared
capabilities: a position-aware mixer (its token map depends on positions) gets none under
``positions="auto"``, every other mixer gets the configured kind.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from tsmix.block import Block, make_norm
from tsmix.errors import TsmixError
from tsmix.models.capabilities import capabilities, require
from tsmix.registry import build_mixer

POSITIONS = ("auto", "learned", "sincos", "none")
READOUTS = ("tokens", "last", "mean")


@dataclass(frozen=True)
class NetConfig:
    mixer: str = "softmax"  # any registered mixer supporting the mode below
    mixer_options: dict[str, Any] = field(default_factory=dict)  # the mixer's own options
    causal: bool = True  # the mode the task needs (per-token prediction: causal)
    dim: int = 64  # residual width
    heads: int = 4
    layers: int = 2  # Blocks stacked
    ffn: str = "gelu"  # Block FFN: gelu | relu | swiglu | none
    norm: str = "layer"  # Block norm: layer | rms | none
    # auto: none for position-aware mixers, else learned; sincos extrapolates to unseen lengths
    positions: str = "auto"
    max_len: int = 256  # rows of a learned position table (the longest sequence it can take)

    def __post_init__(self) -> None:
        if self.positions not in POSITIONS:
            raise TsmixError(f"positions {self.positions!r} unknown; choose one of {', '.join(POSITIONS)}")
        if min(self.dim, self.heads, self.layers, self.max_len) < 1:
            raise TsmixError(f"dim, heads, layers and max_len must be >= 1, got {self}")

    def position_kind(self) -> str:
        if self.positions != "auto":
            return self.positions
        return "none" if capabilities(self.mixer, self.mixer_options).position_aware else "learned"


def sincos(n: int, dim: int, device: torch.device | None = None) -> torch.Tensor:
    """Fixed sinusoidal positions (n, dim) for any length n."""
    pos = torch.arange(n, device=device, dtype=torch.float32)[:, None]  # (n, 1)
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, dim, 2, device=device) / dim)  # (ceil(dim/2),)
    out = torch.zeros(n, dim, device=device)
    out[:, 0::2] = torch.sin(pos * freq)
    out[:, 1::2] = torch.cos(pos * freq[: dim // 2])
    return out


class Positions(nn.Module):
    """Adds position embeddings of one kind to (B, N, D) inputs."""

    def __init__(self, kind: str, dim: int, max_len: int) -> None:
        super().__init__()
        self.kind = kind
        self.table = nn.Parameter(0.02 * torch.randn(max_len, dim)) if kind == "learned" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, D) -> (B, N, D)
        n = x.shape[1]
        if self.kind == "learned":
            if n > self.table.shape[0]:
                raise TsmixError(f"sequence of {n} tokens exceeds the {self.table.shape[0]} learned "
                                 f"positions; "
                                 f"use positions=sincos (or a position-aware mixer) for longer sequences")
            return x + self.table[:n]
        if self.kind == "sincos":
            return x + sincos(n, x.shape[-1], x.device).to(x.dtype)
        return x


class MixerStack(nn.Module):
    """``layers`` x Block(build_mixer(name, causal)) then a final LayerNorm: (B, N, D) -> (B, N, D)."""

    def __init__(self, cfg: NetConfig, what: str) -> None:
        super().__init__()
        require(cfg.mixer, causal=cfg.causal, what=what)
        self.blocks = nn.ModuleList(
            Block(cfg.dim, build_mixer(cfg.mixer, cfg.dim, heads=cfg.heads, causal=cfg.causal,
                                       **cfg.mixer_options), cfg.ffn, cfg.norm)
            for _ in range(cfg.layers)
        )
        self.norm = make_norm("layer", cfg.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


def pool(h: torch.Tensor, readout: str) -> torch.Tensor:
    """(B, N, D) -> (B, N, D) for "tokens", (B, D) for "last" / "mean"."""
    if readout == "tokens":
        return h
    if readout == "last":
        return h[:, -1]
    if readout == "mean":
        return h.mean(dim=1)
    raise TsmixError(f"readout {readout!r} unknown; choose one of {', '.join(READOUTS)}")


class TokenNet(nn.Module):
    """Token ids (B, N) -> logits: (B, N, out) with readout "tokens", else (B, out)."""

    def __init__(
        self, vocab: int, out: int, cfg: NetConfig, readout: str = "tokens", what: str = "task"
    ) -> None:
        super().__init__()
        if readout not in READOUTS:
            raise TsmixError(f"readout {readout!r} unknown; choose one of {', '.join(READOUTS)}")
        self.cfg, self.readout = cfg, readout
        self.embed = nn.Embedding(vocab, cfg.dim)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.positions = Positions(cfg.position_kind(), cfg.dim, cfg.max_len)
        self.stack = MixerStack(cfg, what)
        self.head = nn.Linear(cfg.dim, out)

    def features(self, ids: torch.Tensor) -> torch.Tensor:  # (B, N) -> (B, N, D) or (B, D)
        return pool(self.stack(self.positions(self.embed(ids))), self.readout)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(ids))


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
