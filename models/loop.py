"""The one training loop of tsmix.models: every pipeline here (LM, vision, tasks) steps through it.

``train_steps`` runs ``loss_fn(batch)`` -> backward -> (clip) -> optimizer step over an iterable
of batches, with an optional per-step learning-rate function and a torch scheduler, and calls
``callbacks(step, loss)`` after each step (evaluation, logging, early exit by raising). The steps
run on the shared engine (:func:`tsmix.engine.fit`): the whole stream is one engine epoch, the
callbacks are its per-step hook, and ``checkpoint_dir`` gives atomic checkpoints with bit-exact
resume. It owns no data, model or optimizer choice.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tsmix.engine import EngineConfig, Schedule, Task, fit, from_env
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


class _Stream:
    """Engine data over a caller's iterable of batches: one epoch, item ``i`` the (1,) tensor ``[i]``.

    The engine only sees step indices (its batch splitting and device moves never touch the
    caller's batches, which may be any object); the loss takes the batch from ``current``. A
    resumed run iterates a fresh ``batches`` from the start and the engine skips the steps
    already done, so a stream drawn from its own seeded generator replays exactly.
    """

    def __init__(self, batches: Iterable[Any]) -> None:
        self.batches = batches
        self.current: Any = None  # the batch of the index last handed to the engine

    def steps_in(self, epoch: int) -> int:
        # an unsized stream has no known length: an upper bound (it only sizes the disabled bar)
        return len(self.batches) if isinstance(self.batches, Sized) else sys.maxsize

    def epoch(self, generator: torch.Generator, epoch: int) -> Iterator[torch.Tensor]:
        for i, batch in enumerate(self.batches):
            self.current = batch
            yield torch.tensor([i])  # (1,)

    def load(self, item: torch.Tensor) -> torch.Tensor:
        return item


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
    checkpoint_dir: str | Path | None = None,
    checkpoint_every: int | None = None,
    fingerprint: dict[str, Any] | None = None,
) -> LoopResult:
    """One optimizer step per item of ``batches``; returns the step count, last loss, wall time.

    ``lr_at(step)`` sets every group's learning rate before the step (a schedule written as a
    function: set exactly, where a LambdaLR's ``base_lr * factor`` could differ in the last bit);
    ``scheduler.step()`` runs after it (a torch scheduler). With ``check_finite`` a non-finite loss
    raises :class:`TsmixError` naming the step, before it touches the weights. With
    ``checkpoint_dir`` the run checkpoints there every ``checkpoint_every`` steps and at the end,
    and continues from a checkpoint found there (refused when ``fingerprint`` differs); the
    caller re-creates the same model, optimizer, scheduler and ``batches`` to resume.
    """
    if from_env().enabled:
        raise TsmixError("tsmix.models training runs in one process; launch it with python, not torchrun")
    stream, last = _Stream(batches), [float("nan")]
    start = time.perf_counter()

    def step_loss(_: nn.Module, index: torch.Tensor) -> torch.Tensor:  # index: (1,) the step number
        step = int(index[0])
        if lr_at is not None:
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step)
        loss = loss_fn(stream.current)
        last[0] = loss.item()
        if check_finite and not math.isfinite(last[0]):
            lr = optimizer.param_groups[0]["lr"]
            raise TsmixError(f"non-finite training loss at step {step}; lower the learning rate "
                             f"(now {lr:.3g}) or the mixer's step size")
        return loss

    def on_step(steps: int, _: torch.Tensor) -> None:
        for callback in callbacks:
            callback(steps, last[0])

    task = Task(model, optimizer, stream, step_loss,
                schedule=None if scheduler is None else Schedule(scheduler, "step"),
                fingerprint={"loop": "tsmix.models", **(fingerprint or {})}, on_step=on_step)
    cfg = EngineConfig(epochs=1, grad_clip=grad_clip if grad_clip > 0 else None, progress=False,
                       checkpoint_dir=checkpoint_dir, checkpoint_every=checkpoint_every,
                       resume=checkpoint_dir is not None, nan_check_every=None)
    device = next(iter(model.parameters()), torch.empty(0)).device
    done = fit(task, cfg, device)
    model.train()  # the engine leaves the model in eval mode; this loop always left it training
    return LoopResult(done.steps, last[0], time.perf_counter() - start)
