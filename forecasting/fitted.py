"""What a fitted forecaster knows besides its config, and the inference done with it.

Kept in one object so that ``fit`` is atomic: the estimator swaps in a complete
:class:`Fitted` or keeps the previous one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from tsmix.errors import TsmixError
from tsmix.forecasting import trainer as tr
from tsmix.forecasting.config import ForecasterConfig
from tsmix.forecasting.probabilistic import (
    Calibration,
    Head,
    collect_residuals,
    fit_conformal,
    forecast_bands,
    scored_levels,
    split_scores,
    window_scale,
)
from tsmix.forecasting.probabilistic.conformal import collect_interval_errors, fit_interval_conformal


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
    calibration: Calibration | None = None  # conformal radii of a point model (scaled units); None: none
    marks: tuple[str, ...] = ()  # calendar features read after the series (calendar=True); () when off

    @property
    def head(self) -> Head:
        """The network's output head (point, quantile, distribution)."""
        return tr.output_head(self.model)

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
    """MSE/MAE (normalized scale) over the split's windows, overall and per channel; with intervals
    (the head's or a calibration) also CRPS, pinball, coverage and width under ``probabilistic``."""
    scores = split_scores(f.head, f.calibration, f.config.level)
    errs = tr.window_errors(f.model, device_windows(prepared, split, f.device), f.config.test_batch_size,
                            f.device, f.out_index, drop_last=(protocol == "paper"), head=f.head,
                            on_batch=None if scores is None else
                            lambda out, y, x: scores.update(out, y,
                                                            window_scale(x, f.out_index, y.shape[-1])))
    out = errs.metrics(f.out_columns)
    out.update(split=split, protocol=protocol)
    if scores is not None:
        out["probabilistic"] = scores.metrics()
    return out


def calibrate(f: Fitted, prepared: Any) -> Calibration | None:
    """Conformal calibration on the validation windows (``config.conformal``): a point model's
    split-conformal radii, or the CQR adjustment of a head's own bounds at its scored levels; both
    scaled by each window's spread (conformal.py says why).

    None with ``conformal=False``, or when training used the validation windows
    (``train_on="train+val"``/``"all"``): residuals on training data would give too narrow intervals.
    """
    head = f.head
    if not f.config.conformal or f.config.train_on != "train":
        return None
    f.model.eval()
    val = device_windows(prepared, "val", f.device)
    if head.has_intervals:
        levels = scored_levels(head, None, f.config.level)
        if not levels:
            return None

        def bands(x: torch.Tensor) -> dict[float, tuple[torch.Tensor, torch.Tensor]]:
            out = tr.select_output(f.model(x), f.out_index)
            return {lv: head.interval(out, lv) for lv in levels}

        errors, scales = collect_interval_errors(bands, val, f.config.test_batch_size, levels,
                                                 out_index=f.out_index)
        return fit_interval_conformal(errors, scales, f"{head.name}+conformal (scaled)")

    def point(x: torch.Tensor) -> torch.Tensor:  # (B, L, C_in) -> (B, H, C_out)
        return tr.select_output(head.point(f.model(x)), f.out_index)

    residuals, scales = collect_residuals(point, val, f.config.test_batch_size, out_index=f.out_index,
                                          with_scales=True)
    return fit_conformal(residuals, scales=scales)  # scaled scores (conformal.py says why)


def scaled_input(f: Fitted, raw: np.ndarray, stamps: Any = None) -> torch.Tensor:
    """(L, C) original units -> the model's input (1, L, C_in) in scaled units, with the window's
    calendar features after the series for a ``calendar=True`` model (``stamps``: the window's (L,)
    datetime64 stamps, UTC instants when the data has a zone, or a DatetimeIndex)."""
    x = _scaled_series(f, raw)
    if not f.marks:
        return x
    if stamps is None or len(stamps) != len(raw):
        raise TsmixError(f"this model reads the calendar features {list(f.marks)} of its window: pass the "
                         f"window's {len(raw)} timestamps")
    from tsmix.datasets.dates import localize
    from tsmix.datasets.timefeatures import named_features

    idx = stamps if isinstance(stamps, pd.DatetimeIndex) else localize(stamps, f.tz)
    marks = torch.as_tensor(named_features(idx, f.marks), device=f.device).unsqueeze(0)  # (1, L, K)
    return torch.cat([x, marks], dim=2)


def _scaled_series(f: Fitted, raw: np.ndarray) -> torch.Tensor:
    """(L, C) original units -> (1, L, C_in) scaled series (the input without calendar features)."""
    mean, scale = scaler_arrays(f.scaler, len(f.columns))
    x = (raw.astype(np.float64) - mean) / scale
    return torch.as_tensor(x[:, f.in_idx], dtype=torch.float32, device=f.device).unsqueeze(0)


@torch.no_grad()
def head_output(f: Fitted, raw: np.ndarray, stamps: Any = None) -> torch.Tensor:
    """(L, C) original units (and the window's stamps, for a ``calendar=True`` model) -> the head's
    output for this window in scaled units: (H, C_out) for a point head, (H, K, C_out) for a
    quantile / distribution head."""
    f.model.eval()
    return tr.select_output(f.model(scaled_input(f, raw, stamps)), f.out_index)[0]


def input_scale(f: Fitted, raw: np.ndarray) -> torch.Tensor:
    """(L, C) original units -> (C_out,) the window's spread in scaled units (a scaled conformal
    calibration's radii are multiples of it)."""
    return window_scale(_scaled_series(f, raw), f.out_index)[0]


def window_bands(f: Fitted, raw: np.ndarray, out: torch.Tensor, levels: Any,
                 channel: int) -> tuple[dict[float, tuple[np.ndarray, np.ndarray]], str]:
    """({level: (lo, hi)} in original units for output channel ``channel``, method) of the window
    ``raw`` (L, C) with head output ``out``, for the levels the model can give (a quantile head
    trained without one, or too few calibration windows, skips it); ({}, "") without intervals."""
    bands: dict[float, tuple[np.ndarray, np.ndarray]] = {}
    method = ""
    if not (f.head.has_intervals or f.calibration is not None):
        return bands, method
    scale = input_scale(f, raw)
    for level in levels:
        try:
            method, got = forecast_bands(f.head, out, [level], f.calibration, scale)
        except TsmixError:
            continue
        lo, hi = got[level]
        bands[level] = (unscale(f, lo)[:, channel], unscale(f, hi)[:, channel])
    return bands, method


def unscale(f: Fitted, values: Any) -> np.ndarray:
    """Locations (..., C_out) in scaled units (a point forecast, bounds, quantiles) -> original units."""
    mean, scale = scaler_arrays(f.scaler, len(f.columns))
    v = values.detach().double().cpu().numpy() if isinstance(values, torch.Tensor) else \
        np.asarray(values, dtype=np.float64)
    return v * scale[f.out_idx] + mean[f.out_idx]


def scaler_arrays(scaler: Any, channels: int) -> tuple[np.ndarray, np.ndarray]:
    mean = np.asarray(scaler.mean_, dtype=np.float64).reshape(-1)
    scale = np.asarray(scaler.scale_, dtype=np.float64).reshape(-1)
    if mean.shape[0] != channels:
        raise TsmixError(f"scaler has {mean.shape[0]} channels, data {channels}: refit the forecaster")
    return mean, scale
