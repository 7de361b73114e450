"""The training recipe the task and vision pipelines share: AdamW, warmup + cosine, grad clip.

``fit`` turns a batch sampler and a loss into a call of :func:`tsmix.models.loop.train_steps`;
``token_accuracy`` scores per-token predictions with ignored positions (target -100).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from tsmix.errors import TsmixError
from tsmix.models.loop import LoopResult, train_steps, warmup_cosine

IGNORE = -100  # target of a position that is not scored (the cross-entropy ignore_index)


@dataclass(frozen=True)
class FitConfig:
    steps: int = 400  # optimizer steps
    batch_size: int = 64
    lr: float = 1e-3  # peak AdamW learning rate
    min_lr_ratio: float = 0.1  # the cosine ends at lr * this
    warmup: int = 20  # linear warmup steps
    weight_decay: float = 0.0  # AdamW decoupled weight decay
    grad_clip: float = 1.0  # max global grad norm; 0 = off
    seed: int = 0  # seeds the batch stream (the caller seeds the init)

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1 or self.lr <= 0 or self.warmup < 0:
            raise TsmixError(f"steps and batch_size must be >= 1, lr > 0, warmup >= 0; got {self}")


def fit(
    model: nn.Module,
    sample: Callable[[int, torch.Generator], Any],
    loss_fn: Callable[[Any], torch.Tensor],
    cfg: FitConfig,
) -> LoopResult:
    """Train ``model`` for ``cfg.steps`` on ``sample(batch_size, generator)`` batches."""
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    gen = torch.Generator().manual_seed(cfg.seed)
    batches = (sample(cfg.batch_size, gen) for _ in range(cfg.steps))
    return train_steps(model, opt, batches, loss_fn, grad_clip=cfg.grad_clip,
                       lr_at=lambda s: warmup_cosine(s, cfg.steps, cfg.lr, cfg.warmup, cfg.min_lr_ratio))


def epoch_indices(n: int, batch_size: int, gen: torch.Generator) -> Iterator[torch.Tensor]:
    """Endless minibatch index tensors over ``n`` items, a fresh permutation each epoch."""
    while True:
        perm = torch.randperm(n, generator=gen)
        for i in range(0, n, batch_size):
            yield perm[i : i + batch_size]


def token_accuracy(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """Fraction of scored positions (target != IGNORE) predicted right; logits (..., V), targets (...)."""
    scored = targets != IGNORE
    if not bool(scored.any()):
        raise TsmixError("no scored targets in this batch; every target is the ignore index")
    return float((logits.argmax(-1)[scored] == targets[scored]).float().mean())


@torch.no_grad()
def predict(model: nn.Module, x: torch.Tensor, batch_size: int = 512) -> torch.Tensor:
    """``model(x)`` in eval mode, chunked along the batch (x: (B, ...))."""
    was = model.training
    model.eval()
    out = torch.cat([model(x[i : i + batch_size]) for i in range(0, len(x), batch_size)])
    model.train(was)
    return out
