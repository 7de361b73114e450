"""Learning-rate schedules as ``torch.optim.lr_scheduler`` objects, with the interval they step at.

The official LTSF / PatchTST per-epoch rules (``type1``, ``type3``, and ``constant``) become a
``LambdaLR`` stepped once per epoch; the factor is the rule's multiplier of the base lr, so
``base_lr * factor`` reproduces the official ``lr * 0.5 ** (epoch - 1)`` bit for bit. One-cycle
is torch's ``OneCycleLR`` stepped once per optimizer step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.optim.lr_scheduler import LambdaLR, LRScheduler, OneCycleLR

from tsmix.errors import TsmixError

EPOCH_RULES = ("type1", "type3", "constant")
INTERVALS = ("epoch", "step")


def epoch_rule_factor(rule: str, epoch: int, first_epoch_scale: float = 1.0) -> float:
    """Multiplier of the base lr in 0-based ``epoch`` under an official per-epoch rule.

    The official loops set ``lr`` after epoch ``e`` (1-based) to ``type1: lr * 0.5**(e-1)`` and
    ``type3: lr if e < 3 else lr * 0.9**(e-3)``, so 0-based epoch ``k >= 1`` runs at the value set
    after epoch ``k``. Epoch 0 runs at ``first_epoch_scale``: the official PatchTST loop builds a
    OneCycleLR before training, whose constructor leaves lr / 25 in place for epoch 1.
    """
    if rule not in EPOCH_RULES:
        raise TsmixError(f"no per-epoch lr rule {rule!r}; choose one of {', '.join(EPOCH_RULES)}")
    if epoch == 0:
        return first_epoch_scale
    if rule == "type1":
        return 0.5 ** (epoch - 1)
    if rule == "type3":
        return 1.0 if epoch < 3 else 0.9 ** (epoch - 3)
    return 1.0


@dataclass(frozen=True)
class Schedule:
    """A torch scheduler and when the engine steps it."""

    scheduler: LRScheduler
    interval: str  # "epoch": after each epoch; "step": after each optimizer step

    def __post_init__(self) -> None:
        if self.interval not in INTERVALS:
            raise TsmixError(
                f"schedule interval must be one of {', '.join(INTERVALS)}, got {self.interval!r}"
            )


def epoch_rule(optimizer: torch.optim.Optimizer, rule: str, first_epoch_scale: float = 1.0) -> Schedule:
    """The official per-epoch rule as a LambdaLR (sets epoch 0's lr on construction)."""
    epoch_rule_factor(rule, 0)  # unknown rule: fail before touching the optimizer

    def factor(epoch: int) -> float:
        return epoch_rule_factor(rule, epoch, first_epoch_scale)

    return Schedule(LambdaLR(optimizer, factor), "epoch")


def one_cycle(optimizer: torch.optim.Optimizer, max_lr: float, epochs: int, steps_per_epoch: int,
              pct_start: float = 0.3) -> Schedule:
    """torch's OneCycleLR over ``epochs * steps_per_epoch`` optimizer steps."""
    sched = OneCycleLR(optimizer, max_lr=max_lr, epochs=epochs, steps_per_epoch=max(steps_per_epoch, 1),
                       pct_start=pct_start)
    return Schedule(sched, "step")
