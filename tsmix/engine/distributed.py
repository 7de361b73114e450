"""torchrun / DistributedDataParallel plumbing: join the process group, reduce, shard batches.

torchrun starts the processes and sets ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE``; this module
only joins the group they describe (gloo on CPU, nccl on CUDA). Without those variables every
function is the single-process identity, so the same code runs with and without torchrun.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from tsmix.errors import TsmixError


@dataclass(frozen=True)
class Dist:
    """This process's place in the job."""

    rank: int = 0  # global rank; 0 writes files, logs and runs callbacks
    world: int = 1  # number of processes
    local_rank: int = 0  # rank on this machine: picks the CUDA device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world > 1


def from_env() -> Dist:
    """The job described by torchrun's environment variables (single process when absent)."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError as exc:
        raise TsmixError(f"RANK/LOCAL_RANK/WORLD_SIZE must be integers (set by torchrun): {exc}") from exc
    if world < 1 or not 0 <= rank < world:
        raise TsmixError(f"invalid torchrun environment: RANK={rank}, WORLD_SIZE={world}")
    return Dist(rank, world, local)


def rank_device(device: torch.device) -> torch.device:
    """``device`` for this rank: under torchrun each process owns ``cuda:LOCAL_RANK``."""
    d = from_env()
    if d.enabled and device.type == "cuda":
        return torch.device("cuda", d.local_rank)
    return device


def setup(device: torch.device) -> tuple[Dist, torch.device]:
    """Join torchrun's process group if there is one; returns the job and this rank's device."""
    d = from_env()
    if not d.enabled:
        return d, device
    device = rank_device(device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        atexit.register(_destroy)
    return d, device


def _destroy() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(t: torch.Tensor, d: Dist) -> torch.Tensor:
    """Sum of ``t`` over all ranks (``t`` itself when single-process)."""
    if d.enabled:
        t = t.clone()
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def all_gather(t: torch.Tensor, d: Dist) -> list[torch.Tensor]:
    """``t`` of every rank, in rank order (same shape on every rank)."""
    if not d.enabled:
        return [t]
    out = [torch.empty_like(t) for _ in range(d.world)]
    dist.all_gather(out, t)
    return out


def any_rank(flag: bool, d: Dist, device: torch.device) -> bool:
    """True when ``flag`` is true on at least one rank (every rank gets the same answer)."""
    if not d.enabled:
        return flag
    return bool(all_reduce_sum(torch.tensor([float(flag)], device=device), d).item() > 0)


def batch_len(item: Any) -> int:
    """Leading size of a batch: a tensor, or a tuple/list whose first element is one."""
    return int(item.shape[0]) if torch.is_tensor(item) else batch_len(item[0])


def split(item: Any, parts: int) -> Sequence[Any]:
    """``item`` cut along dim 0 into ``parts`` near-equal views (tensors or tuples of tensors)."""
    if torch.is_tensor(item):
        return item.tensor_split(parts)
    pieces = [split(x, parts) for x in item]
    return [type(item)(p[i] for p in pieces) for i in range(parts)]
