"""The loop's mutable state and its round trip through a checkpoint.

Everything that decides the rest of a run is captured: weights, optimizer and scheduler state,
every RNG the loop or the model consumes (python, numpy, torch CPU/CUDA per rank, the data-order
generator), early-stopping state with the best weights, and the data position (epoch, batch).
Restoring all of it makes a resumed run continue with exactly the numbers of an uninterrupted one.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from tsmix.engine import checkpoint as ckpt
from tsmix.engine.distributed import Dist, all_gather


@dataclass
class LoopState:
    epoch: int = 0  # 0-based epoch in progress (== epochs when finished)
    batch: int = 0  # global batches of ``epoch`` already stepped (0 at an epoch boundary)
    steps: int = 0  # optimizer steps in total
    epoch_steps: int = 0  # optimizer steps taken in ``epoch`` (batches may be skipped under DDP)
    epoch_gen_state: torch.Tensor | None = None  # data generator at the start of ``epoch``: replays its order
    loss_sum: torch.Tensor | None = None  # running training loss of ``epoch`` (device scalar)
    lr_used: float = 0.0  # lr at the start of ``epoch`` (the epoch's log reports it)
    epoch_train_seconds: float = 0.0  # training time already spent in ``epoch`` before a resume
    finished: bool = False  # training ended (last epoch or early stop): resume only restores
    best_val: float = math.inf
    best_epoch: int = 0
    bad_epochs: int = 0
    best_state: dict[str, torch.Tensor] | None = None
    history: list[dict] = field(default_factory=list)
    train_seconds: float = 0.0
    cpu_seconds: float = 0.0  # process CPU time of the loop up to the last checkpoint, across resumes


def _rng_of_rank(device: torch.device) -> torch.Tensor:
    """(N,) uint8: the torch RNG state(s) this rank's model uses (CPU, plus CUDA on CUDA)."""
    states = [torch.get_rng_state()]
    if device.type == "cuda":
        states.append(torch.cuda.get_rng_state(device))
    return torch.cat(states)


def save(folder: ckpt.CheckpointDir, model: nn.Module, opt: torch.optim.Optimizer, sched: Any,
         generator: torch.Generator, st: LoopState, identity: dict, d: Dist, device: torch.device) -> None:
    """Write the checkpoint (rank 0); every rank takes part in gathering the RNG states."""
    comm = device if d.enabled and device.type == "cuda" else torch.device("cpu")  # nccl needs CUDA tensors
    ranks = [t.cpu() for t in all_gather(_rng_of_rank(device).to(comm), d)]
    if not d.is_main:
        return
    tensors: dict[str, torch.Tensor] = {f"model.{k}": v for k, v in model.state_dict().items()}
    if st.best_state is not None:
        tensors.update({f"best.{k}": v for k, v in st.best_state.items()})
    loop = {k: getattr(st, k) for k in ("epoch", "batch", "steps", "epoch_steps", "lr_used", "finished",
                                        "best_val", "best_epoch", "bad_epochs", "history", "train_seconds",
                                        "epoch_train_seconds", "cpu_seconds")}
    loop["has_best"] = st.best_state is not None
    meta = {
        "format": ckpt.FORMAT, "version": ckpt.VERSION, "fingerprint": ckpt.fingerprint(identity),
        "config": identity, "loop": loop,
        "state": ckpt.encode({
            "optimizer": opt.state_dict(), "scheduler": None if sched is None else sched.state_dict(),
            "generator": generator.get_state(), "epoch_gen_state": st.epoch_gen_state,
            "loss_sum": st.loss_sum, "rng_ranks": ranks, "python": random.getstate(),
            "numpy": np.random.get_state(),
        }, tensors, "state"),
    }
    ckpt.write(folder.file, tensors, meta)


def load(folder: ckpt.CheckpointDir, model: nn.Module, opt: torch.optim.Optimizer, sched: Any,
         generator: torch.Generator, identity: dict, d: Dist, device: torch.device) -> LoopState:
    """Restore everything :func:`save` wrote; refuses a checkpoint of another config."""
    tensors, meta = ckpt.read(folder.file)
    if meta["fingerprint"] != ckpt.fingerprint(identity):
        diff = "; ".join(ckpt.config_diff(meta["config"], identity)[:5]) or "config differs"
        raise ckpt.CheckpointMismatch(
            f"checkpoint {folder.file} belongs to another run ({diff}); resume with the original config, "
            "or use another checkpoint folder (or none) to start over")
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    loop, state = meta["loop"], ckpt.decode(meta["state"], tensors)
    opt.load_state_dict(state["optimizer"])
    if sched is not None:
        sched.load_state_dict(state["scheduler"])
    generator.set_state(state["generator"])
    st = LoopState(**{k: v for k, v in loop.items() if k != "has_best"})
    st.epoch_gen_state = state["epoch_gen_state"]
    st.loss_sum = None if state["loss_sum"] is None else state["loss_sum"].to(device)
    if loop["has_best"]:
        st.best_state = {k[5:]: v.to(device) for k, v in tensors.items() if k.startswith("best.")}
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    mine = state["rng_ranks"][d.rank]
    n_cpu = torch.get_rng_state().numel()
    torch.set_rng_state(mine[:n_cpu])
    if device.type == "cuda":
        torch.cuda.set_rng_state(mine[n_cpu:], device)
    return st
