"""A small causal character language model over any registered mixer.

token + position embeddings -> ``layers`` x :class:`tsmix.Block` (causal mixer) -> norm ->
linear head. Which mixer it holds is a name in the config; the model never looks inside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tsmix.block import Block, make_norm
from tsmix.errors import TsmixError
from tsmix.registry import build_mixer


@dataclass(frozen=True)
class LMConfig:
    mixer: str = "softmax"  # any registered mixer that supports causal=True
    mixer_options: dict[str, Any] = field(default_factory=dict)  # the mixer's own options
    vocab_size: int = 65  # set from the corpus (Tiny Shakespeare has 65 characters)
    block_size: int = 64  # context length in characters
    dim: int = 64  # residual width
    heads: int = 4
    layers: int = 2  # Blocks stacked (recurrent mixers such as nrgpt usually take 1)
    ffn: str = "gelu"  # the Block's FFN: gelu | relu | swiglu | none (mixers carrying their own MLP)
    norm: str = "layer"  # the Block's norm: layer | rms | none (none = the mixer's own recurrence exactly)
    dropout: float = 0.0  # on the residual branches and the embeddings
    embed_std: float = 0.02  # GPT-2's embedding init; beat N(0, 1) for every mixer in 300-step runs


class CharLM(nn.Module):
    """Causal char LM: embeddings -> Blocks(build_mixer(name, causal=True)) -> head."""

    def __init__(self, config: LMConfig) -> None:
        super().__init__()
        if config.block_size < 1 or config.vocab_size < 1 or config.layers < 1:
            raise TsmixError(f"block_size, vocab_size and layers must be >= 1, got {config}")
        self.config = c = config
        self.tok = nn.Embedding(c.vocab_size, c.dim)
        self.pos = nn.Embedding(c.block_size, c.dim)
        nn.init.normal_(self.tok.weight, std=c.embed_std)
        nn.init.normal_(self.pos.weight, std=c.embed_std)
        self.drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(
            Block(
                c.dim,
                build_mixer(c.mixer, c.dim, heads=c.heads, causal=True, **c.mixer_options),
                c.ffn,
                c.norm,
                dropout=c.dropout,
            )
            for _ in range(c.layers)
        )
        self.norm = make_norm("layer", c.dim)
        self.head = nn.Linear(c.dim, c.vocab_size)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """idx (B, N) int64 -> logits (B, N, V), and the mean cross-entropy if targets are given."""
        n = idx.shape[1]
        if n > self.config.block_size:
            raise TsmixError(f"sequence of {n} tokens exceeds block_size {self.config.block_size}; "
                             f"crop the context or build the model with a larger block_size")
        x = self.drop(self.tok(idx) + self.pos(torch.arange(n, device=idx.device)))  # (B, N, D)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))  # (B, N, V)
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    def mixers(self) -> list[nn.Module]:
        return [b.mixer for b in self.blocks]

    def hidden_states(self, idx: torch.Tensor) -> list[torch.Tensor]:
        """The residual stream entering each block (after the embeddings): list of (B, N, D)."""
        n = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(n, device=idx.device))
        out = []
        for block in self.blocks:
            out.append(x)
            x = block(x)
        return out

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Sample ``max_new_tokens`` after the prompt ``idx`` (B, N0): (B, N0 + new).

        ``temperature`` 0 is greedy. The context is cropped to the last block_size tokens.
        """
        if temperature < 0:
            raise TsmixError(f"temperature must be >= 0, got {temperature}")
        for _ in range(max_new_tokens):
            logits, _ = self(idx[:, -self.config.block_size :])
            logits = logits[:, -1]  # (B, V)
            if temperature == 0:
                nxt = logits.argmax(-1, keepdim=True)
            else:
                logits = logits / temperature
                if top_k is not None:
                    kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                nxt = torch.multinomial(torch.softmax(logits.float(), -1), 1, generator=generator)
            idx = torch.cat([idx, nxt], dim=1)
        return idx
