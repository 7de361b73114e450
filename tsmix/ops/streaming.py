"""Run a mixer's streaming ``step(x_t, state) -> (y_t, state)`` over a whole sequence."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

StepFn = Callable[[torch.Tensor, Any], tuple[torch.Tensor, Any]]


def run_steps(step: StepFn, x: torch.Tensor) -> torch.Tensor:
    """Token by token, as a stream would arrive: (B, N, D) -> (B, N, D), state starts at None."""
    state, ys = None, []
    for t in range(x.shape[1]):
        y, state = step(x[:, t], state)
        ys.append(y)
    return torch.stack(ys, dim=1)
