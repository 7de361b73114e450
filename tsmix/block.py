"""The residual block every encoder and pipeline stacks: ``x + mixer(norm(x))`` then FFN.

The block holds a mixer *module* and never looks inside it; which mixer it is was decided
by :func:`tsmix.build_mixer`. A mixer returns the update that the block adds to the
residual stream.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tsmix.errors import TsmixError

NORMS = ("layer", "rms", "batch", "none")
FFNS = ("gelu", "relu", "swiglu", "none")


class BatchNormTokens(nn.Module):
    """BatchNorm1d over the feature dim of (B, N, D) tokens (PatchTST's choice)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        return self.bn(x.reshape(b * n, d)).reshape(b, n, d)


def make_norm(kind: str, dim: int) -> nn.Module:
    """A normalization layer by name: layer | rms | batch | none."""
    if kind == "layer":
        return nn.LayerNorm(dim)
    if kind == "rms":
        return nn.RMSNorm(dim)
    if kind == "batch":
        return BatchNormTokens(dim)
    if kind == "none":
        return nn.Identity()
    raise TsmixError(f"unknown norm {kind!r}; choose one of {', '.join(NORMS)}")


# Hidden activations per token block of the CPU feed-forward (elements): ~1 MB in float32, so a
# block's (rows, hidden) activations stay in cache from ``up`` through the activation and dropout
# to ``down`` and back (autograd runs each block's chain in turn). Whole-batch, at the PatchTST
# paper preset (37632 tokens x 128 hidden) GELU, its backward and the dropout products are
# memory-bound passes over 19 MB each; blocked, the training step measured 1.11-1.23x faster at one
# thread (idle, alternating rounds; benchmarks/README.md, session 14).
FFN_BLOCK_ELEMS = 1 << 18


class FFN(nn.Module):
    """Position-wise feed-forward: Linear -> act -> Linear (or SwiGLU); on CPU in token blocks."""

    def __init__(self, dim: int, hidden: int, kind: str = "gelu", dropout: float = 0.0) -> None:
        super().__init__()
        if kind not in FFNS or kind == "none":
            raise TsmixError(f"unknown ffn {kind!r}; choose one of {', '.join(FFNS)}")
        self.kind = kind
        self.up = nn.Linear(dim, hidden * (2 if kind == "swiglu" else 1))
        self.down = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, D) -> (B, N, D)
        rows = max(1, FFN_BLOCK_ELEMS // self.up.out_features)  # tokens per block
        if x.device.type != "cpu" or x.numel() <= rows * x.shape[-1]:
            return self._ffn(x)
        tokens = x.reshape(-1, x.shape[-1])  # (T, D): position-wise, so any split of T is exact
        return torch.cat([self._ffn(t) for t in tokens.split(rows)]).view(*x.shape[:-1], -1)

    def _ffn(self, x: torch.Tensor) -> torch.Tensor:  # (..., D) -> (..., D)
        h = self.up(x)
        if self.kind == "swiglu":
            a, b = h.chunk(2, dim=-1)
            h = F.silu(a) * b
        elif self.kind == "gelu":
            h = F.gelu(h)
        else:
            h = F.relu(h)
        return self.down(self.drop(h))


class Block(nn.Module):
    """Residual block around any mixer: pre-norm ``x + drop(mixer(norm1 x))``, then FFN.

    Post-norm (``prenorm=False``) is ``norm1(x + drop(mixer(x)))`` as in PatchTST.
    """

    def __init__(
        self,
        dim: int,
        mixer: nn.Module,
        ffn: str = "gelu",
        norm: str = "layer",
        *,
        ffn_hidden: int | None = None,
        prenorm: bool = True,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.mixer = mixer
        self.prenorm = prenorm
        self.norm1 = make_norm(norm, dim)
        self.drop = nn.Dropout(dropout)
        if ffn == "none":
            self.ffn, self.norm2 = None, None
        else:
            self.ffn = FFN(dim, ffn_hidden or 4 * dim, ffn, dropout)
            self.norm2 = make_norm(norm, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, D) -> (B, N, D)
        if self.prenorm:
            x = x + self.drop(self.mixer(self.norm1(x)))
            if self.ffn is not None:
                x = x + self.drop(self.ffn(self.norm2(x)))
            return x
        x = self.norm1(x + self.drop(self.mixer(x)))
        if self.ffn is not None:
            x = self.norm2(x + self.drop(self.ffn(x)))
        return x
