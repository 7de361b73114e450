"""What a fitted forecaster knows besides its config, and the inference done with it.

Kept in one object so that ``fit`` is atomic: the estimator swaps in a complete
:class:`Fitted` or keeps the previous one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from tsmix.errors import TsmixError
from tsmix.forecasting import trainer as tr
from tsmix.forecasting.config import ForecasterConfig


@dataclass
class Fitted:
    """A trained network with the data facts needed to forecast and to evaluate again."""

    model: nn.Module
    config: ForecasterConfig  # resolved
    device: torch.device
    columns: tuple[str, ...]  # value columns of the fitted data, in order
    target: str
    target_idx: int
    freq: str
    date_col: str
    scaler: Any  # tsmix.datasets.Scaler
    context_values: np.ndarray  # (L, C) float32 last lookback rows, original units
    context_ts: np.ndarray  # (L,) datetime64[ns]
    source: str | None  # benchmark name or file path to re-read the data; None for frames
    data_dir: str | None
    history: list[dict]
    best_epoch: int
    metrics: dict
    prepared: Any = None  # tsmix.datasets.Prepared while the data is at hand
    plot_from: Path | None = None  # an existing forecast.png (after load) to carry on save
    tz: str | None = None  # the dates' zone (context_ts are then UTC instants); None: naive dates
    metrics_error: str | None = None  # why a loaded run's metrics.json could not be read (predict needs none)

    @property
    def in_idx(self) -> list[int]:
        """Input channels the model sees (S: the target only)."""
        return [self.target_idx] if self.config.features == "S" else list(range(len(self.columns)))

    @property
    def out_idx(self) -> list[int]:
        """Columns the forecast holds: all for M, the target for S and MS."""
        return list(range(len(self.columns))) if self.config.features == "M" else [self.target_idx]

    @property
    def out_index(self) -> int | None:
        """Model output channel to keep (MS) or None (the model's outputs are the forecast)."""
        return self.target_idx if self.config.features == "MS" else None

    @property
    def out_columns(self) -> list[str]:
        return [self.columns[i] for i in self.out_idx]


def check_device(name: str) -> torch.device:
    """The torch device ``name`` asks for, once it exists here (before any data is read)."""
    device = tr.resolve_device(name)
    why = None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if torch.version.cuda is None:
            why = "this torch build has no CUDA support"
        elif count == 0:
            why = "no CUDA GPU is visible"
        elif device.index is not None and device.index >= count:
            why = f"this machine has {count} CUDA device(s), cuda:0..cuda:{count - 1}"
    elif device.type == "mps" and not torch.backends.mps.is_available():
        why = "the Apple MPS backend is not available here"
    if why is not None:
        raise TsmixError(f"device {name!r} is not available ({why}); use --device cpu or auto")
    return device


def device_windows(prepared: Any, split: str, device: torch.device) -> Any:
    """The split's WindowSet, rebuilt over a device copy of the data off-CPU."""
    ws = getattr(prepared, split)
    return ws if device.type == "cpu" else ws.to(device)


def evaluate_split(f: Fitted, prepared: Any, split: str, protocol: str) -> dict[str, Any]:
    """MSE/MAE (normalized scale) over the split's windows, overall and per channel."""
    errs = tr.window_errors(f.model, device_windows(prepared, split, f.device), f.config.test_batch_size,
                            f.device, f.out_index, drop_last=(protocol == "paper"))
    out = errs.metrics(f.out_columns)
    out.update(split=split, protocol=protocol)
    return out


@torch.no_grad()
def forecast_window(f: Fitted, raw: np.ndarray) -> np.ndarray:
    """(L, C) original units -> (H, C_out) original units."""
    mean, scale = scaler_arrays(f.scaler, len(f.columns))
    x = (raw.astype(np.float64) - mean) / scale
    xt = torch.as_tensor(x[:, f.in_idx], dtype=torch.float32, device=f.device).unsqueeze(0)
    f.model.eval()
    y = tr.select_output(f.model(xt), f.out_index)[0].double().cpu().numpy()  # (H, C_out)
    return y * scale[f.out_idx] + mean[f.out_idx]


def scaler_arrays(scaler: Any, channels: int) -> tuple[np.ndarray, np.ndarray]:
    mean = np.asarray(scaler.mean_, dtype=np.float64).reshape(-1)
    scale = np.asarray(scaler.scale_, dtype=np.float64).reshape(-1)
    if mean.shape[0] != channels:
        raise TsmixError(f"scaler has {mean.shape[0]} channels, data {channels}: refit the forecaster")
    return mean, scale
