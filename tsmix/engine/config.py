"""What the engine is asked to do: the run's knobs (EngineConfig), the pipeline's pieces (Task),
and what it hands back (FitResult)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tsmix.engine.data import TrainData
from tsmix.engine.schedules import Schedule
from tsmix.errors import TsmixError

PRECISIONS = ("32", "bf16-mixed")


@dataclass(frozen=True)
class EngineConfig:
    epochs: int  # epochs (for step-based data: evaluation periods, SampledBatches.epochs)
    seed: int = 0  # seeds the data-order generator only; model init / dropout RNG is the caller's
    grad_clip: float | None = None  # max global grad norm; None = no clipping
    grad_accum: int = 1  # micro-batches per optimizer step (a global batch is cut into this many)
    precision: str = "32"  # "32" or "bf16-mixed" (torch.autocast; weights and optimizer stay fp32)
    compile: bool = False  # torch.compile the model for training and validation
    patience: int | None = None  # stop after this many epochs without a better val loss; None = never
    restore_best: bool = True  # load the best-validation weights at the end (needs validation)
    checkpoint_dir: str | Path | None = None  # None = no checkpoints (nothing written)
    checkpoint_every: int | None = None  # also checkpoint every N optimizer steps inside an epoch
    resume: bool = False  # continue from checkpoint_dir's checkpoint when there is one
    progress: bool = True  # tqdm bar + one line per epoch on stderr (rank 0)
    # steps between finiteness checks of the running loss (one host sync); None = never (a caller
    # that checks every loss itself, or deliberately trains on through a non-finite loss)
    nan_check_every: int | None = 25

    def __post_init__(self) -> None:
        for name in ("epochs", "grad_accum", "nan_check_every"):
            v = getattr(self, name)
            if name == "nan_check_every" and v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise TsmixError(f"{name} must be a positive int, got {v!r}")
        if self.precision not in PRECISIONS:
            raise TsmixError(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise TsmixError(f"grad_clip must be > 0 or None, got {self.grad_clip!r}")
        if self.patience is not None and self.patience < 1:
            raise TsmixError(f"patience must be >= 1 or None, got {self.patience!r}")
        if self.checkpoint_every is not None and self.checkpoint_every < 1:
            raise TsmixError(f"checkpoint_every must be >= 1 or None, got {self.checkpoint_every!r}")
        if self.resume and self.checkpoint_dir is None:
            raise TsmixError("resume needs a checkpoint folder: set checkpoint_dir")

    def identity(self) -> dict[str, Any]:
        """The fields that change the numbers: a resume must not change them."""
        return {"grad_accum": self.grad_accum, "precision": self.precision, "compile": self.compile,
                "seed": self.seed, "grad_clip": self.grad_clip, "epochs": self.epochs,
                "patience": self.patience}


LossFn = Callable[[nn.Module, Any], torch.Tensor]  # (model, batch) -> mean loss over the batch (scalar)
# (model, rank, world) -> (sum of the validation loss over this rank's share, number of terms)
ValidateFn = Callable[[nn.Module, int, int], tuple[torch.Tensor, int]]
StepHook = Callable[[int, torch.Tensor], None]  # (optimizer steps done, this rank's loss of the step) -> None


@dataclass
class Task:
    """The pieces a pipeline hands the engine."""

    model: nn.Module  # trained in place; its state_dict is what checkpoints hold
    optimizer: torch.optim.Optimizer
    data: TrainData  # WindowBatches (epochs over a dataset) or SampledBatches (fresh samples per step)
    loss: LossFn
    validate: ValidateFn | None = None  # None: no validation, no early stopping
    schedule: Schedule | None = None
    fingerprint: dict[str, Any] = field(default_factory=dict)  # the run's config; resume refuses another
    # after every optimizer step, before a mid-epoch checkpoint (so it saves what the hook consumed);
    # None: no per-step hook (epoch-end callbacks only)
    on_step: StepHook | None = None


@dataclass
class FitResult:
    history: list[dict] = field(default_factory=list)  # one log dict per epoch
    best_epoch: int = 0  # 1-based epoch whose weights were restored
    best_val: float = math.inf
    train_seconds: float = 0.0  # wall time of the optimisation steps (no validation)
    seconds: float = 0.0  # wall time of the whole loop (this process; a resumed run counts its part)
    steps: int = 0  # optimizer steps taken in total (across resumes)
    resumed_from: int | None = None  # 1-based epoch a resumed run started in (epochs + 1: was finished)
    # process CPU time of the loop across resumes: earlier processes' share up to their last
    # checkpoint (work a kill threw away is not counted) plus this process's
    cpu_seconds: float = 0.0
    resumed_cpu_seconds: float = 0.0  # the earlier processes' share alone (0 when not resumed)
