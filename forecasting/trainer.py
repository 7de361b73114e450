"""Forecasting on the training engine (:mod:`tsmix.engine`), and window evaluation.

Matches the official LTSF / PatchTST loops: MSE loss, Adam, the per-epoch learning-rate
adjustments (``type1``, ``type3``) as a LambdaLR or a per-batch OneCycleLR, early stopping on
validation loss with the best weights restored. The loop itself (checkpoints and resume, DDP,
bf16, compile, accumulation) is the engine's; this module supplies the forecasting pieces.
The loss is the network's output head's (:mod:`tsmix.forecasting.probabilistic`): for the
default ``mse`` head literally ``F.mse_loss``, as before.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tsmix.engine import (
    Callback,
    EngineConfig,
    FitResult,
    Schedule,
    Task,
    WindowBatches,
    epoch_rule,
    epoch_rule_factor,
    fit,
    one_cycle,
)
from tsmix.errors import TsmixError
from tsmix.forecasting.config import ForecasterConfig
from tsmix.forecasting.probabilistic import Head, PointHead

NAN_CHECK_EVERY = 25  # steps between finiteness checks of the running loss (one host sync each)
TrainResult = FitResult  # history, best_epoch, best_val, train_seconds, seconds (+ steps, resumed_from)
# Config fields that never change the numbers: a resume may differ in them.
_NOT_IDENTITY = ("progress", "threads")


def resolve_device(device: str) -> torch.device:
    """``auto``: CUDA when present, else CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(device)
    except RuntimeError as exc:
        raise TsmixError(f"unknown device {device!r}; use auto, cpu, cuda or cuda:N") from exc


def epoch_lr(schedule: str, lr: float, epoch: int, first_epoch_scale: float = 1.0) -> float:
    """Learning rate of 0-based ``epoch`` for the per-epoch schedules of the official code.

    The official loops set ``lr`` after epoch ``e`` (1-based) to ``type1: lr * 0.5**(e-1)`` and
    ``type3: lr if e < 3 else lr * 0.9**(e-3)``; so 0-based epoch ``k >= 1`` runs at the value
    set after epoch ``k``. Epoch 0 runs at the optimizer's initial lr times ``first_epoch_scale``.
    The same numbers the engine's LambdaLR sets (``lr * factor``, bit for bit).
    """
    return lr * epoch_rule_factor(schedule, epoch, first_epoch_scale)


def make_optimizer(model: nn.Module, cfg: ForecasterConfig) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)


def select_output(out: torch.Tensor, out_index: int | None) -> torch.Tensor:
    """(B, H, C_in) -> (B, H, C_out): MS forecasts only the target channel."""
    return out if out_index is None else out[..., out_index : out_index + 1]


def iterate(windows: Any, batch_size: int, *, shuffle: bool = False, generator=None,
            drop_last: bool = False) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Batches of a WindowSet through its one-gather fast path."""
    return windows.batches(batch_size, shuffle=shuffle, generator=generator, drop_last=drop_last)


@dataclass
class WindowErrors:
    """Per-channel sums of squared and absolute errors over the windows of one split."""

    se: torch.Tensor  # (C_out,) float64
    ae: torch.Tensor  # (C_out,) float64
    windows: int
    horizon: int

    def metrics(self, columns: Sequence[str]) -> dict[str, Any]:
        per = self.windows * self.horizon
        se, ae = self.se.cpu().tolist(), self.ae.cpu().tolist()
        return {
            "mse": sum(se) / (per * len(se)),
            "mae": sum(ae) / (per * len(ae)),
            "per_channel": {c: {"mse": s / per, "mae": a / per} for c, s, a in zip(columns, se, ae)},
            "windows": self.windows,
        }


def output_head(model: nn.Module) -> Head:
    """The network's output head; a network without one (a bare encoder) is an ``mse`` point model."""
    head = getattr(model, "head", None)
    return head if isinstance(head, Head) else PointHead("mse")


# (head output, y (B, H, C_out), x (B, L, C_in)) per batch
BatchHook = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]


@torch.no_grad()
def window_errors(
    model: nn.Module, windows: Any, batch_size: int, device: torch.device,
    out_index: int | None, drop_last: bool = False, *, head: Head | None = None,
    on_batch: BatchHook | None = None,
) -> WindowErrors:
    """Errors of the point forecast of ``model`` over the windows (all, or full batches only with
    ``drop_last``). ``head``: the model's output head (default: read off the model); ``on_batch``
    also sees every batch's head output (channel-selected) and targets, for further scores."""
    head = head if head is not None else output_head(model)
    was_training = model.training
    model.eval()
    se = ae = None
    count = 0
    for x, y in iterate(windows, batch_size, drop_last=drop_last):
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        out = select_output(model(x), out_index)  # (B, H, C_out), or (B, H, K, C_out)
        err = head.point(out).float() - y  # (B, H, C_out)
        s, a = err.square().sum(dim=(0, 1)).double(), err.abs().sum(dim=(0, 1)).double()
        se, ae = (s, a) if se is None else (se + s, ae + a)
        count += x.shape[0]
        if on_batch is not None:
            on_batch(out.float(), y, x)
    model.train(was_training)
    if count == 0:
        raise TsmixError(
            f"no complete batch of {batch_size} windows in a split of {len(windows)} windows; "
            "use eval_protocol='fair' or a smaller test_batch_size"
        )
    return WindowErrors(se, ae, count, windows.horizon if hasattr(windows, "horizon") else y.shape[1])


@torch.no_grad()
def head_loss_sum(model: nn.Module, windows: Any, batch_size: int, device: torch.device,
                  out_index: int | None, head: Head) -> tuple[torch.Tensor, int]:
    """(sum over windows of the head's mean loss per batch x batch size, windows): the mean head loss
    over a split, summable over DDP ranks (validation of quantile / distribution heads)."""
    was_training = model.training
    model.eval()
    total, count = torch.zeros((), dtype=torch.float64, device=device), 0
    for x, y in iterate(windows, batch_size):
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        total += head.loss(select_output(model(x), out_index).float(), y).double() * x.shape[0]
        count += x.shape[0]
    model.train(was_training)
    return total, count


def head_loss(head: Head, out_index: int | None) -> Callable[[nn.Module, Any], torch.Tensor]:
    """The engine's training loss: the head's loss of the (channel-selected) output; mse: F.mse_loss."""

    def loss(m: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch  # (B, L, C_in), (B, H, C_out)
        return head.loss(select_output(m(x), out_index), y)

    return loss


def make_schedule(opt: torch.optim.Optimizer, cfg: ForecasterConfig, steps_per_epoch: int) -> Schedule:
    """``onecycle``: OneCycleLR per batch; the per-epoch rules: LambdaLR per epoch."""
    if cfg.lr_schedule == "onecycle":
        return one_cycle(opt, cfg.lr, cfg.epochs, steps_per_epoch, cfg.pct_start)
    return epoch_rule(opt, cfg.lr_schedule, cfg.first_epoch_lr_scale)


def engine_config(cfg: ForecasterConfig, checkpoint_dir: str | Path | None = None,
                  resume: bool = False) -> EngineConfig:
    """The engine knobs of a resolved forecasting config.

    ``precision``, ``compile`` and ``grad_accum`` are read when the config has them (the fields
    default to the plain fp32, eager, one-micro-batch loop otherwise).
    """
    return EngineConfig(
        epochs=cfg.epochs, seed=cfg.seed, grad_clip=cfg.grad_clip, patience=max(cfg.patience, 1),
        grad_accum=cfg.grad_accum, precision=cfg.precision,
        compile=cfg.compile, checkpoint_dir=checkpoint_dir, resume=resume,
        progress=cfg.progress, nan_check_every=NAN_CHECK_EVERY,
    )


def shard_windows(windows: Any, rank: int, world: int) -> Any:
    """Rank ``rank``'s contiguous share of a WindowSet, as a WindowSet over the same tensor (no copy)."""
    if world == 1:
        return windows
    bounds = torch.arange(len(windows)).tensor_split(world)[rank]
    if len(bounds) == 0:
        raise TsmixError(f"{len(windows)} validation windows cannot be shared by {world} processes; "
                         "use fewer processes or a longer validation split")
    a, b = int(bounds[0]), int(bounds[-1]) + 1
    span = windows.lookback + windows.horizon - 1
    return type(windows)(windows.data, windows.lookback, windows.horizon, windows.features,
                         windows.target_idx, windows.start + a, windows.start + b + span, windows.marks)


def fingerprint(cfg: ForecasterConfig, train_windows: Any, val_windows: Any | None,
                out_index: int | None) -> dict:
    """The run's identity for resume: every config field that matters and a hash of the data."""
    data = train_windows.data.detach().cpu().contiguous()
    return {
        "config": {k: v for k, v in cfg.to_dict().items() if k not in _NOT_IDENTITY},
        "data": {"sha256": hashlib.sha256(data.numpy().tobytes()).hexdigest(), "shape": list(data.shape),
                 "train_windows": len(train_windows),
                 "val_windows": None if val_windows is None else len(val_windows), "out_index": out_index},
    }


def train(
    model: nn.Module,
    train_windows: Any,
    val_windows: Any,
    cfg: ForecasterConfig,
    device: torch.device,
    *,
    out_index: int | None = None,
    callbacks: Sequence[Callback] = (),
    checkpoint_dir: str | Path | None = None,
    resume: bool = False,
) -> TrainResult:
    """Fit ``model`` in place; returns the history. ``cfg`` must be resolved.

    The loss is the model's output head's (``model.head``; ``mse`` for a bare network). Early
    stopping watches the validation MSE of point heads (as the official loops) and the mean head
    loss (pinball, NLL) of probabilistic ones.

    ``checkpoint_dir``: write a checkpoint there after every epoch; with ``resume`` continue from
    it (same config and data required) and end exactly as an uninterrupted run would. Raises
    TsmixError (naming the epoch) as soon as the training loss is not finite. An exception from a
    callback propagates unchanged (e.g. optuna.TrialPruned).
    """
    bs = cfg.batch_size
    drop_last = cfg.drop_last and len(train_windows) >= bs
    data = WindowBatches(train_windows, bs, shuffle=True, drop_last=drop_last)
    opt = make_optimizer(model, cfg)
    schedule = make_schedule(opt, cfg, data.steps_in(0))
    head = output_head(model)  # before the engine wraps the model (DDP, compile)

    def validate(m: nn.Module, rank: int, world: int) -> tuple[torch.Tensor, int]:
        dev = next(m.parameters()).device  # the engine's device (cuda:LOCAL_RANK under torchrun)
        shard = shard_windows(val_windows, rank, world)
        if not isinstance(head, PointHead):
            return head_loss_sum(m, shard, cfg.test_batch_size, dev, out_index, head)
        val = window_errors(m, shard, cfg.test_batch_size, dev, out_index, head=head)
        return val.se.sum(), val.windows * val.horizon * val.se.numel()

    ident = {} if checkpoint_dir is None else fingerprint(cfg, train_windows, val_windows, out_index)
    task = Task(model, opt, data, head_loss(head, out_index), validate, schedule, ident)
    return fit(task, engine_config(cfg, checkpoint_dir, resume), device, callbacks)
