"""The one training loop of tsmix.models: every pipeline here (LM, vision, tasks) steps through it.

``train_steps`` runs ``loss_fn(batch)`` -> backward -> (clip) -> optimizer step over an iterable
of batches, with an optional per-step learning-rate function and a torch scheduler, and calls
``callbacks(step, loss)`` after each step (evaluation, logging, early exit by raising). It owns
no data, model or optimizer choice, so the shared engine (tsmix.engine) can replace it behind
the same call.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from tsmix.errors import TsmixError

Callback = Callable[[int, float], None]  # (steps done, this step's loss) -> None


def warmup_cosine(step: int, steps: int, lr: float, warmup: int, min_ratio: float) -> float:
    """Linear warmup over ``warmup`` steps, then cosine from ``lr`` down to ``lr * min_ratio``."""
    if step < warmup:
        return lr * (step + 1) / warmup
    frac = (step - warmup) / max(1, steps - warmup)
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


@dataclass(frozen=True)
class LoopResult:
    steps: int  # optimizer steps taken
    last_loss: float  # training loss of the last step (nan when no step ran)
    seconds: float  # wall time of the loop


def train_steps(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: Iterable[Any],
    loss_fn: Callable[[Any], torch.Tensor],
    *,
    lr_at: Callable[[int], float] | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    grad_clip: float = 0.0,
    callbacks: Sequence[Callback] = (),
    check_finite: bool = True,
) -> LoopResult:
    """One optimizer step per item of ``batches``; returns the step count, last loss, wall time.

    ``lr_at(step)`` sets every group's learning rate before the step (a schedule written as a
    function); ``scheduler.step()`` runs after it (a torch scheduler). With ``check_finite`` a
    non-finite loss raises :class:`TsmixError` naming the step, before it touches the weights.
    """
    model.train()
    step, last, start = 0, float("nan"), time.perf_counter()
    for batch in batches:
        if lr_at is not None:
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step)
        loss = loss_fn(batch)
        last = loss.item()
        if check_finite and not math.isfinite(last):
            lr = optimizer.param_groups[0]["lr"]
            raise TsmixError(f"non-finite training loss at step {step}; lower the learning rate "
                             f"(now {lr:.3g}) or the mixer's step size")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        step += 1
        for callback in callbacks:
            callback(step, last)
    return LoopResult(step, last, time.perf_counter() - start)
