"""Epoch-end hooks and progress output of the engine.

A callback is ``cb(epoch, logs)`` (epoch 1-based; logs: train_loss, val_loss, lr, seconds,
train_seconds): MLflow logging and Optuna pruning are callbacks. Only rank 0 runs them; when one
raises (e.g. ``optuna.TrialPruned``) the exception propagates unchanged there and the other ranks
stop with a TsmixError instead of waiting forever for rank 0.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import torch

from tsmix.engine.distributed import Dist, any_rank
from tsmix.errors import TsmixError

Callback = Callable[[int, dict], None]


def run_callbacks(callbacks: Sequence[Callback], epoch: int, log: dict, d: Dist,
                  device: torch.device) -> None:
    """Call every callback on rank 0 with a copy of ``log``; all ranks learn whether one raised."""
    error: BaseException | None = None
    if d.is_main:
        try:
            for cb in callbacks:
                cb(epoch, dict(log))
        except BaseException as exc:  # noqa: BLE001 - re-raised below after telling the other ranks
            error = exc
    if d.enabled and callbacks and any_rank(error is not None, d, device) and error is None:
        raise TsmixError(f"training stopped after epoch {epoch}: a callback raised on rank 0")
    if error is not None:
        raise error


def _bar_visible() -> bool:
    """Whether a live bar can be seen: a terminal on stderr, or a notebook (tqdm.auto's widget).
    Redirected to a file, a bar is only carriage-return noise; the epoch lines still go there."""
    import warnings

    from tqdm.std import tqdm as console

    with warnings.catch_warnings():  # autonotebook warns when it picks the notebook bar
        warnings.simplefilter("ignore")
        from tqdm.autonotebook import tqdm as chosen
    return chosen is not console or bool(getattr(sys.stderr, "isatty", lambda: False)())


class Progress:
    """A tqdm bar over all steps plus one persistent line per epoch (rank 0, when enabled); the
    bar only where it can be watched (``_bar_visible``), the epoch lines wherever stderr goes."""

    def __init__(self, total: int, epochs: int, enabled: bool, desc: str = "fit") -> None:
        from tqdm.auto import tqdm

        self.epochs, self.enabled = epochs, enabled
        self.bar = tqdm(total=total, disable=not (enabled and _bar_visible()), desc=desc, unit="step",
                        leave=False)

    def step(self) -> None:
        self.bar.update(1)

    def epoch_end(self, log: dict) -> None:
        if not self.enabled:
            return
        val = log.get("val_loss")
        self.bar.set_postfix(epoch=log["epoch"], train=f"{log['train_loss']:.4f}",
                             **({} if val is None else {"val": f"{val:.4f}"}))
        line = (f"epoch {log['epoch']}/{self.epochs}  train {log['train_loss']:.5f}"
                + ("" if val is None else f"  val {val:.5f}")
                + f"  lr {log['lr']:.3g}  {log['seconds']:.1f}s")
        self.bar.write(line, file=sys.stderr)

    def close(self) -> None:
        self.bar.close()
