"""Where the engine's training batches come from, in a replayable order.

Both sources draw their order from one ``torch.Generator`` that the engine owns and checkpoints:
the order of an epoch is a function of the generator's state at the epoch start, so a resumed run
replays it exactly. Items are global batches; the engine cuts them across ranks and micro-batches
(:func:`tsmix.engine.distributed.split`) before ``load`` turns an item into tensors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch

from tsmix.errors import TsmixError


class TrainData(Protocol):
    def steps_in(self, epoch: int) -> int: ...  # global batches (optimizer steps) in 0-based ``epoch``
    def epoch(self, generator: torch.Generator, epoch: int) -> Iterator[Any]: ...  # global batch items
    def load(self, item: Any) -> Any: ...  # a (shard of an) item -> the batch the loss takes


class WindowBatches:
    """Epochs over an indexable dataset (``len(ds)`` and ``ds.gather(idx) -> batch``).

    Items are index tensors (B,): a rank gathers only its share of a batch, and nothing is copied
    beyond the batch itself (the forecasting WindowSet gathers strided views of one tensor).
    """

    def __init__(self, dataset: Any, batch_size: int, *, shuffle: bool = True,
                 drop_last: bool = False) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise TsmixError(f"batch_size must be a positive int, got {batch_size!r}")
        self.dataset, self.batch_size, self.shuffle, self.drop_last = dataset, batch_size, shuffle, drop_last

    def steps_in(self, epoch: int) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def epoch(self, generator: torch.Generator, epoch: int) -> Iterator[torch.Tensor]:
        n = len(self.dataset)
        order = torch.randperm(n, generator=generator) if self.shuffle else torch.arange(n)  # (n,)
        stop = n - n % self.batch_size if self.drop_last else n
        for s in range(0, stop, self.batch_size):
            yield order[s : s + self.batch_size]

    def load(self, item: torch.Tensor) -> Any:
        return self.dataset.gather(item)


class SampledBatches:
    """Fresh batches each step from ``sample(batch_size, generator)``: step-based pipelines (LM, tasks).

    ``steps`` in all, grouped into engine epochs of ``steps_per_epoch`` (the evaluation period);
    the last epoch may be shorter.
    """

    def __init__(self, sample: Callable[[int, torch.Generator], Any], batch_size: int, steps: int,
                 steps_per_epoch: int) -> None:
        if min(batch_size, steps, steps_per_epoch) < 1:
            raise TsmixError(f"batch_size, steps and steps_per_epoch must be >= 1, got "
                             f"{batch_size}, {steps}, {steps_per_epoch}")
        self.sample, self.batch_size, self.steps, self.per = sample, batch_size, steps, steps_per_epoch

    @property
    def epochs(self) -> int:
        return math.ceil(self.steps / self.per)

    def steps_in(self, epoch: int) -> int:
        return max(0, min(self.per, self.steps - epoch * self.per))

    def epoch(self, generator: torch.Generator, epoch: int) -> Iterator[Any]:
        for _ in range(self.steps_in(epoch)):
            yield self.sample(self.batch_size, generator)

    def load(self, item: Any) -> Any:
        return item
