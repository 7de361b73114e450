"""Train / evaluate loop for the char LM: AdamW, warmup + cosine decay, periodic val loss."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from tsmix.errors import TsmixError

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
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


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
    running, count, start = 0.0, 0, time.perf_counter()
    model.train()
    for step in range(cfg.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        x, y = sample_batch(corpus.train, model.config.block_size, cfg.batch_size, gen)
        _, loss = model(x.to(device), y.to(device))
        if not torch.isfinite(loss):
            raise TsmixError(f"non-finite training loss at step {step}; lower the learning rate "
                             f"(now {cfg.lr}) or the mixer's step size")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        running, count = running + loss.item(), count + 1
        if (step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps:
            row = {
                "step": step + 1,
                "train_loss": running / count,
                "val_loss": evaluate(model, corpus.val, cfg.eval_batches, cfg.batch_size),
                "lr": lr_at(step, cfg),
                "seconds": time.perf_counter() - start,
            }
            history.append(row)
            if log is not None:
                log(row)
            running, count = 0.0, 0
    return history
