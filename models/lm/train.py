"""Train / evaluate loop for the char LM: AdamW, warmup + cosine decay, periodic val loss."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from tsmix.errors import TsmixError
from tsmix.models.loop import train_steps, warmup_cosine

from .data import CharCorpus, sample_batch
from .model import CharLM


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 300  # optimizer steps
    batch_size: int = 32
    lr: float = 3e-3  # peak learning rate (small models take large rates)
    min_lr_ratio: float = 0.1  # cosine decays to lr * this
    warmup: int = 20  # linear warmup steps
    weight_decay: float = 0.0
    grad_clip: float = 1.0  # max global grad norm; 0 = off
    eval_every: int = 100  # steps between val evaluations (and at the end)
    eval_batches: int = 8  # batches per evaluation (fixed seed: every eval sees the same windows)
    seed: int = 0  # model init is the caller's; this seeds the batch sampler


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Warmup then cosine to min_lr_ratio * lr."""
    return warmup_cosine(step, cfg.steps, cfg.lr, cfg.warmup, cfg.min_lr_ratio)


@torch.no_grad()
def evaluate(model: CharLM, ids: torch.Tensor, batches: int, batch_size: int, seed: int = 1234) -> float:
    """Mean next-char cross-entropy (nats) over ``batches`` fixed random windows of ``ids``."""
    was = model.training
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    total = 0.0
    for _ in range(batches):
        x, y = sample_batch(ids, model.config.block_size, batch_size, gen)
        total += float(model(x.to(device), y.to(device))[1])
    model.train(was)
    return total / batches


def train_lm(
    model: CharLM,
    corpus: CharCorpus,
    cfg: TrainConfig,
    log: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Train in place; returns the history: one dict per evaluation
    ``{"step", "train_loss" (mean since the last eval), "val_loss", "lr", "seconds"}``.

    A non-finite loss raises :class:`TsmixError` naming the step.
    """
    if cfg.steps < 1 or cfg.batch_size < 1:
        raise TsmixError(f"steps and batch_size must be >= 1, got {cfg.steps}, {cfg.batch_size}")
    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    gen = torch.Generator().manual_seed(cfg.seed)
    history: list[dict] = []
    tally = {"running": 0.0, "count": 0}
    start = time.perf_counter()

    def batches():
        for _ in range(cfg.steps):
            x, y = sample_batch(corpus.train, model.config.block_size, cfg.batch_size, gen)
            yield x.to(device), y.to(device)

    def on_step(step: int, loss: float) -> None:
        tally["running"] += loss
        tally["count"] += 1
        if step % cfg.eval_every == 0 or step == cfg.steps:
            row = {
                "step": step,
                "train_loss": tally["running"] / tally["count"],
                "val_loss": evaluate(model, corpus.val, cfg.eval_batches, cfg.batch_size),
                "lr": lr_at(step - 1, cfg),
                "seconds": time.perf_counter() - start,
            }
            history.append(row)
            if log is not None:
                log(row)
            tally.update(running=0.0, count=0)

    train_steps(model, opt, batches(), lambda b: model(*b)[1], lr_at=lambda s: lr_at(s, cfg),
                grad_clip=cfg.grad_clip, callbacks=[on_step])
    return history
