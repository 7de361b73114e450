"""The training loop every tsmix pipeline runs through (``fit(task, config)``).

One plain loop in the style of nanoGPT's train.py: per epoch a replayable batch order, per step
micro-batches (gradient accumulation, DDP ``no_sync`` until the last), autocast, backward,
clipping, optimizer and scheduler step; per epoch validation (reduced over ranks), early
stopping with the best weights kept, callbacks, and an atomic checkpoint. Losses are summed on
the device and read once per epoch (plus a finiteness check every few steps).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from tsmix.engine import state as ckstate
from tsmix.engine.callbacks import Callback, Progress, run_callbacks
from tsmix.engine.checkpoint import CheckpointDir
from tsmix.engine.config import EngineConfig, FitResult, Task
from tsmix.engine.distributed import all_reduce_sum, any_rank, batch_len, setup, split
from tsmix.errors import TsmixError


def to_device(batch: Any, device: torch.device) -> Any:
    if torch.is_tensor(batch):
        return batch.to(device, non_blocking=True)
    return type(batch)(to_device(b, device) for b in batch)


class _Loop:
    """One fit: holds the wrapped models and the loop state while ``run`` iterates."""

    def __init__(self, task: Task, cfg: EngineConfig, device: torch.device, callbacks: Sequence[Callback]):
        self.task, self.cfg, self.callbacks = task, cfg, callbacks
        self.d, self.device = setup(device)
        self.raw = task.model.to(self.device)
        self.sched = task.schedule.scheduler if task.schedule is not None else None
        self.step_sched = task.schedule is not None and task.schedule.interval == "step"
        self.generator = torch.Generator().manual_seed(cfg.seed)  # data order, independent of dropout
        self.identity = {"task": task.fingerprint, "engine": cfg.identity(), "world_size": self.d.world}
        self.st = ckstate.LoopState()
        self.autocast = (lambda: torch.autocast(self.device.type, dtype=torch.bfloat16)) \
            if cfg.precision == "bf16-mixed" else contextlib.nullcontext
        self.eval_model: nn.Module = self.raw
        self.train_model: nn.Module = self.raw
        self.bar: Progress | None = None
        self.cpu_mark = time.process_time()  # CPU time of this process not yet added to st.cpu_seconds

    def wrap(self) -> None:
        """compile, then DDP (nanoGPT's order); evaluation uses the compiled model without DDP."""
        if self.cfg.compile:
            self.eval_model = torch.compile(self.raw)
        self.train_model = self.eval_model
        if self.d.enabled:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.train_model = DistributedDataParallel(self.eval_model, device_ids=ids)

    # ------------------------------------------------------------------ one optimizer step
    def step(self, item: Any) -> torch.Tensor | None:
        """Forward/backward over this rank's share of ``item`` in micro-batches, then update.

        Each micro loss is weighted by its share of the global batch (times the world size, which
        DDP's gradient averaging divides out), so the update equals one step on the whole batch.
        Returns this rank's weighted loss, or None for a batch too small to give every rank a row.
        """
        d, accum, total_n = self.d, self.cfg.grad_accum, batch_len(item)
        if total_n < d.world:
            return None  # only a last partial batch (drop_last=False) can be this small
        mine = split(item, d.world)[d.rank] if d.enabled else item
        micros = split(mine, min(accum, batch_len(mine))) if accum > 1 else [mine]
        self.task.optimizer.zero_grad(set_to_none=True)
        total = None
        for j, micro in enumerate(micros):
            last = not d.enabled or j == len(micros) - 1
            with contextlib.nullcontext() if last else self.train_model.no_sync():  # one all-reduce per step
                batch = to_device(self.task.data.load(micro), self.device)
                with self.autocast():
                    loss = self.task.loss(self.train_model, batch)
                scale = batch_len(micro) * d.world / total_n
                weighted = loss if scale == 1 else loss * scale  # (no-op multiply skipped: bitwise as before)
                weighted.backward()
            total = weighted.detach() if total is None else total + weighted.detach()
        if self.cfg.grad_clip is not None:
            nn.utils.clip_grad_norm_(self.raw.parameters(), self.cfg.grad_clip)
        self.task.optimizer.step()
        if self.step_sched:
            self.sched.step()
        return total

    # ------------------------------------------------------------------ checkpoints
    def count_cpu(self) -> None:
        now = time.process_time()
        self.st.cpu_seconds += now - self.cpu_mark
        self.cpu_mark = now

    def save(self, folder: CheckpointDir | None) -> None:
        if folder is not None:
            self.count_cpu()  # the checkpoint carries the CPU time spent so far
            ckstate.save(folder, self.raw, self.task.optimizer, self.sched, self.generator, self.st,
                         self.identity, self.d, self.device)

    def resume(self, folder: CheckpointDir | None) -> int | None:
        if folder is None or not self.cfg.resume or not folder.exists():
            return None
        self.st = ckstate.load(folder, self.raw, self.task.optimizer, self.sched, self.generator,
                               self.identity, self.d, self.device)
        self.cpu_mark = time.process_time()  # restoring is this process's, not the earlier ones'
        return self.st.epoch + 1

    # ------------------------------------------------------------------ the loop
    def run_epoch(self, epoch: int, folder: CheckpointDir | None, bar: Progress) -> tuple[float, float]:
        """Train one epoch (from the saved position when resuming inside it); (train loss, seconds)."""
        st, cfg = self.st, self.cfg
        if st.batch == 0:  # a fresh epoch: remember where its order comes from
            st.epoch_gen_state = self.generator.get_state()
            st.loss_sum = torch.zeros((), device=self.device)
            st.lr_used = self.task.optimizer.param_groups[0]["lr"]
            st.epoch_steps, st.epoch_train_seconds = 0, 0.0
        else:  # resumed inside the epoch: replay the same order and skip what was done
            self.generator.set_state(st.epoch_gen_state)
        self.raw.train()
        t0 = time.perf_counter()
        n = self.task.data.steps_in(epoch)
        for i, item in enumerate(self.task.data.epoch(self.generator, epoch)):
            if i < st.batch:
                continue
            loss = self.step(item)
            st.batch = i + 1
            if loss is not None:
                st.loss_sum += loss
                st.steps, st.epoch_steps = st.steps + 1, st.epoch_steps + 1
            if loss is not None and self.task.on_step is not None:
                self.task.on_step(st.steps, loss)
            if cfg.nan_check_every is not None and (i + 1) % cfg.nan_check_every == 0:
                self.check_finite(st.loss_sum, epoch)
            bar.step()
            every = cfg.checkpoint_every
            if every and loss is not None and st.steps % every == 0 and i + 1 < n:  # epoch end saves anyway
                st.epoch_train_seconds += time.perf_counter() - t0
                t0 = time.perf_counter()
                self.save(folder)
        loss_sum = all_reduce_sum(st.loss_sum, self.d) / self.d.world if self.d.enabled else st.loss_sum
        train_loss = (loss_sum / max(st.epoch_steps, 1)).item()  # the one sync of the epoch
        if cfg.nan_check_every is not None:
            self.check_finite(torch.tensor(train_loss), epoch)
        return train_loss, st.epoch_train_seconds + time.perf_counter() - t0

    def check_finite(self, loss_sum: torch.Tensor, epoch: int) -> None:
        bad = not torch.isfinite(loss_sum).item()
        if any_rank(bad, self.d, self.device):  # all ranks stop together (no rank left in a collective)
            raise TsmixError(
                f"training loss became NaN/inf in epoch {epoch + 1}; training stopped. "
                "Lower the learning rate (--lr) or set grad_clip"
            )

    def validate(self, epoch: int) -> float | None:
        if self.task.validate is None:
            return None
        with self.autocast():
            total, count = self.task.validate(self.eval_model, self.d.rank, self.d.world)
        total = all_reduce_sum(total.detach().reshape(()).double(), self.d)
        count = int(all_reduce_sum(torch.tensor(count, device=self.device), self.d).item())
        val_loss = float(total.item()) / count
        if not math.isfinite(val_loss):
            raise TsmixError(f"validation loss is {val_loss} after epoch {epoch + 1}; lower the lr")
        return val_loss

    def end_epoch(self, epoch: int, train_loss: float, train_time: float) -> bool:
        """Validation, early stopping, log, callbacks; True when training should stop."""
        st, cfg, t0 = self.st, self.cfg, time.perf_counter()
        val_loss = self.validate(epoch)
        if val_loss is not None:
            if val_loss <= st.best_val:  # ties count as improvement, as the official code
                st.best_val, st.best_epoch, st.bad_epochs = val_loss, epoch + 1, 0
                st.best_state = {k: v.detach().clone() for k, v in self.raw.state_dict().items()}
            else:
                st.bad_epochs += 1
        log = {"epoch": epoch + 1, "train_loss": train_loss, "lr": st.lr_used,
               "seconds": train_time + time.perf_counter() - t0, "train_seconds": train_time}
        if val_loss is not None:
            log["val_loss"] = val_loss
        st.history.append(log)
        st.train_seconds += train_time
        self.bar.epoch_end(log)
        run_callbacks(self.callbacks, epoch + 1, log, self.d, self.device)
        if self.sched is not None and not self.step_sched:
            self.sched.step()
        stop = cfg.patience is not None and val_loss is not None and st.bad_epochs >= cfg.patience
        return stop or epoch + 1 == cfg.epochs

    def run(self) -> FitResult:
        start = time.perf_counter()
        path = self.cfg.checkpoint_dir
        folder = CheckpointDir(path) if path is not None else None
        # rank 0 locks the folder (and clears killed writes); the other ranks only read the checkpoint
        held = folder if folder is not None and self.d.is_main else contextlib.nullcontext()
        with held:
            resumed = self.resume(folder)
            resumed_cpu = self.st.cpu_seconds
            self.wrap()
            steps = [self.task.data.steps_in(e) for e in range(self.cfg.epochs)]
            self.bar = Progress(sum(steps), self.cfg.epochs, self.cfg.progress and self.d.is_main)
            self.bar.bar.update(sum(steps[: self.st.epoch]) + self.st.batch)
            try:
                while not self.st.finished:
                    epoch = self.st.epoch
                    train_loss, train_time = self.run_epoch(epoch, folder, self.bar)
                    self.st.finished = self.end_epoch(epoch, train_loss, train_time)
                    self.st.epoch, self.st.batch = epoch + 1, 0
                    self.save(folder)
            finally:
                self.bar.close()
        self.count_cpu()
        st = self.st
        if self.cfg.restore_best and st.best_state is not None:
            self.raw.load_state_dict(st.best_state)
        self.raw.eval()
        return FitResult(history=st.history, best_epoch=st.best_epoch, best_val=st.best_val,
                         train_seconds=st.train_seconds, seconds=time.perf_counter() - start, steps=st.steps,
                         resumed_from=resumed, cpu_seconds=st.cpu_seconds, resumed_cpu_seconds=resumed_cpu)


def fit(task: Task, cfg: EngineConfig, device: torch.device | str = "cpu",
        callbacks: Sequence[Callback] = ()) -> FitResult:
    """Train ``task.model`` in place under ``cfg``; returns the history and best-epoch summary.

    Under torchrun (``WORLD_SIZE`` > 1) the model runs in DistributedDataParallel, each rank takes
    its share of every global batch, validation losses are summed over ranks, and only rank 0
    writes checkpoints, prints and runs ``callbacks``. Raises TsmixError on a non-finite loss.
    """
    return _Loop(task, cfg, torch.device(device), callbacks).run()
