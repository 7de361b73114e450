"""DLinear (Zeng et al., AAAI 2023): trend + seasonal linear maps, no token mixer.

The layers live in :mod:`tsmix.forecasting.dlinear`; this file registers the model. The paper
preset is LTSF-Linear's ``scripts/EXP-LongForecasting/Linear/*.sh``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from tsmix.forecasting.config import ForecasterConfig
from tsmix.forecasting.dlinear import DLinear
from tsmix.forecasting.registry import TrainDefaults, register_model
from tsmix.forecasting.spaces import training_space


@dataclass(frozen=True, kw_only=True)
class DLinearConfig:
    lookback: int  # L: input window length
    horizon: int  # H: steps to forecast
    kernel_size: int = ForecasterConfig.kernel_size  # moving-average window (odd)
    individual: bool = ForecasterConfig.individual  # one linear map per channel instead of shared


_COMMON: dict[str, Any] = dict(
    lookback=336, kernel_size=25, individual=False, epochs=10, patience=3, lr_schedule="type1",
    optimizer="adam", first_epoch_lr_scale=1.0, drop_last=True, grad_clip=None,
)
_BATCH_LR: dict[str, tuple[int, float]] = {
    "ETTh1": (32, 0.005), "ETTh2": (32, 0.05), "ETTm1": (8, 1e-4), "ETTm2": (32, 0.001),
    "Weather": (16, 1e-4),
}


def paper(dataset: str, horizon: int) -> dict[str, Any]:
    """The LTSF-Linear script settings of ``dataset`` (a benchmark name) at ``horizon``."""
    batch, lr = _BATCH_LR[dataset]
    if dataset == "ETTm2" and horizon in (336, 720):
        lr = 0.01  # the ETTm2 script raises the lr for the two long horizons
    return dict(_COMMON, batch_size=batch, test_batch_size=batch, lr=lr, horizon=horizon)


def space(trial: Any) -> dict[str, Any]:
    return {
        **training_space(trial),
        # odd kernels: the moving average stays centred
        "kernel_size": trial.suggest_categorical("kernel_size", [13, 25, 37]),
        "individual": trial.suggest_categorical("individual", [False, True]),
    }


@register_model(
    "dlinear", config=DLinearConfig, space=space, presets={"paper": paper}, uses_mixer=False,
    training=TrainDefaults(batch_size=32, lr=0.005, lr_schedule="type1", patience=3),
)
def build(cfg: DLinearConfig, channels: int) -> nn.Module:
    """DLinear: moving-average trend + seasonal remainder, one linear map each."""
    return DLinear(channels, cfg.lookback, cfg.horizon, cfg.kernel_size, cfg.individual)
