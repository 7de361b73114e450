"""Training losses of the output heads: point (MSE, MAE), pinball over quantiles, and NLL.

Every function takes tensors on any device and reduces to a scalar mean unless it says
``elementwise``. Quantile predictions carry the quantile axis at dim -2: ``(..., Q, C)``
against targets ``(..., C)``, the layout the heads produce.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import distributions as D


def as_levels(quantiles: Sequence[float] | torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Quantile levels as a (Q, 1) tensor on ``like``'s device/dtype, broadcasting over channels."""
    return torch.as_tensor(quantiles, dtype=like.dtype, device=like.device).reshape(-1, 1)


def pinball(pred: torch.Tensor, y: torch.Tensor, quantiles: Sequence[float] | torch.Tensor) -> torch.Tensor:
    """Elementwise pinball (quantile) loss: pred (..., Q, C), y (..., C) -> (..., Q, C).

    ``rho_q(u) = max(q u, (q - 1) u)`` with ``u = y - pred``: a q-quantile that is too low
    costs ``q`` per unit, too high ``1 - q``.
    """
    u = y.unsqueeze(-2) - pred  # (..., Q, C)
    q = as_levels(quantiles, pred)
    return torch.maximum(q * u, (q - 1.0) * u)


def pinball_loss(pred: torch.Tensor, y: torch.Tensor,
                 quantiles: Sequence[float] | torch.Tensor) -> torch.Tensor:
    """Mean pinball loss over every element and quantile (a scalar)."""
    return pinball(pred, y, quantiles).mean()


def nll(dist: D.Distribution, y: torch.Tensor) -> torch.Tensor:
    """Mean negative log-likelihood of ``y`` under ``dist`` (same batch shape)."""
    return -dist.log_prob(y).mean()


# point losses by name: (prediction (..., C), target (..., C)) -> scalar; "mse" is today's F.mse_loss
POINT_LOSS_FNS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "mse": F.mse_loss,
    "mae": F.l1_loss,
}
