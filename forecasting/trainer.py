"""Training loop and window evaluation, shared by every forecasting model.

Matches the official LTSF / PatchTST loops: MSE loss, Adam, the per-epoch learning-rate
adjustments (``type1``, ``type3``) or a per-batch one-cycle schedule, early stopping on
validation loss with the best weights restored. Per-step host syncs are avoided: losses are
summed on the device and read once per epoch (plus a finiteness check every few steps).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tsmix.errors import TsmixError
from tsmix.forecasting.config import ForecasterConfig

Callback = Callable[[int, dict], None]
NAN_CHECK_EVERY = 25  # steps between finiteness checks of the running loss (one host sync each)


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
    """
    if epoch == 0:
        return lr * first_epoch_scale
    if schedule == "type1":
        return lr * 0.5 ** (epoch - 1)
    if schedule == "type3":
        return lr if epoch < 3 else lr * 0.9 ** (epoch - 3)
    if schedule == "constant":
        return lr
    raise TsmixError(f"epoch_lr has no per-epoch rule for schedule {schedule!r}")


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


def n_batches(n: int, batch_size: int, drop_last: bool) -> int:
    return n // batch_size if drop_last else math.ceil(n / batch_size)


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


@torch.no_grad()
def window_errors(
    model: nn.Module, windows: Any, batch_size: int, device: torch.device,
    out_index: int | None, drop_last: bool = False,
) -> WindowErrors:
    """Errors of ``model`` over the windows (all, or full batches only with ``drop_last``)."""
    was_training = model.training
    model.eval()
    se = ae = None
    count = 0
    for x, y in iterate(windows, batch_size, drop_last=drop_last):
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        err = select_output(model(x), out_index).float() - y  # (B, H, C_out)
        s, a = err.square().sum(dim=(0, 1)).double(), err.abs().sum(dim=(0, 1)).double()
        se, ae = (s, a) if se is None else (se + s, ae + a)
        count += x.shape[0]
    model.train(was_training)
    if count == 0:
        raise TsmixError(
            f"no complete batch of {batch_size} windows in a split of {len(windows)} windows; "
            "use eval_protocol='fair' or a smaller test_batch_size"
        )
    return WindowErrors(se, ae, count, windows.horizon if hasattr(windows, "horizon") else y.shape[1])


@dataclass
class TrainResult:
    history: list[dict] = field(default_factory=list)  # one log dict per epoch
    best_epoch: int = 0  # 1-based epoch whose weights were restored
    best_val: float = math.inf
    train_seconds: float = 0.0  # wall time of the optimisation steps (no validation)
    seconds: float = 0.0  # wall time of the whole loop


def train(
    model: nn.Module,
    train_windows: Any,
    val_windows: Any,
    cfg: ForecasterConfig,
    device: torch.device,
    *,
    out_index: int | None = None,
    callbacks: Sequence[Callback] = (),
) -> TrainResult:
    """Fit ``model`` in place; returns the history. ``cfg`` must be resolved.

    Raises TsmixError (naming the epoch) as soon as the training loss is not finite. An
    exception from a callback propagates unchanged (e.g. optuna.TrialPruned).
    """
    from tqdm.auto import tqdm

    generator = torch.Generator().manual_seed(cfg.seed)  # shuffling order, independent of dropout
    bs = cfg.batch_size
    drop_last = cfg.drop_last and len(train_windows) >= bs
    steps = n_batches(len(train_windows), bs, drop_last)
    opt = make_optimizer(model, cfg)
    sched = None
    if cfg.lr_schedule == "onecycle":
        sched = torch.optim.lr_scheduler.OneCycleLR(
            opt, max_lr=cfg.lr, epochs=cfg.epochs, steps_per_epoch=steps, pct_start=cfg.pct_start
        )
    result = TrainResult()
    best_state: dict[str, torch.Tensor] | None = None
    bad_epochs = 0
    start = time.perf_counter()
    bar = tqdm(total=cfg.epochs * steps, disable=not cfg.progress, desc="fit", unit="step", leave=False)
    try:
        for epoch in range(cfg.epochs):
            if sched is None:
                for group in opt.param_groups:
                    group["lr"] = epoch_lr(cfg.lr_schedule, cfg.lr, epoch, cfg.first_epoch_lr_scale)
            lr_used = opt.param_groups[0]["lr"]
            model.train()
            t0 = time.perf_counter()
            loss_sum = torch.zeros((), device=device)
            for i, (x, y) in enumerate(
                iterate(train_windows, bs, shuffle=True, generator=generator, drop_last=drop_last)
            ):
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                loss = F.mse_loss(select_output(model(x), out_index), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if cfg.grad_clip is not None:
                    nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                opt.step()
                if sched is not None:
                    sched.step()
                loss_sum += loss.detach()
                if (i + 1) % NAN_CHECK_EVERY == 0:
                    _check_finite(loss_sum, epoch)
                bar.update(1)
            train_loss = (loss_sum / max(steps, 1)).item()  # the one sync of the epoch
            _check_finite(torch.tensor(train_loss), epoch)
            train_time = time.perf_counter() - t0
            result.train_seconds += train_time
            val = window_errors(model, val_windows, cfg.test_batch_size, device, out_index)
            val_loss = float(val.se.sum().item()) / (val.windows * val.horizon * val.se.numel())
            if not math.isfinite(val_loss):
                raise TsmixError(f"validation loss is {val_loss} after epoch {epoch + 1}; lower the lr")
            improved = val_loss <= result.best_val  # ties count as improvement, as the official code
            if improved:
                result.best_val, result.best_epoch, bad_epochs = val_loss, epoch + 1, 0
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            else:
                bad_epochs += 1
            log = {
                "epoch": epoch + 1, "train_loss": train_loss, "val_loss": val_loss, "lr": lr_used,
                "seconds": time.perf_counter() - t0, "train_seconds": train_time,
            }
            result.history.append(log)
            bar.set_postfix(epoch=epoch + 1, train=f"{train_loss:.4f}", val=f"{val_loss:.4f}")
            for cb in callbacks:
                cb(epoch + 1, dict(log))
            if bad_epochs >= max(cfg.patience, 1):  # official: stop once the counter reaches patience
                break
    finally:
        bar.close()
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    result.seconds = time.perf_counter() - start
    return result


def _check_finite(loss_sum: torch.Tensor, epoch: int) -> None:
    if not torch.isfinite(loss_sum).item():
        raise TsmixError(
            f"training loss became NaN/inf in epoch {epoch + 1}; training stopped. "
            "Lower the learning rate (--lr) or set grad_clip"
        )
