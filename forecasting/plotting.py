"""Forecast-versus-truth plots (PNG) without touching matplotlib's global backend.

The x axis is the step offset from the forecast origin (its timestamp in the label): date
tick locators cost more than the whole drawing, and a run writes this plot on every save.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tsmix.errors import TsmixError


def plot_window(
    path: str | Path,
    history_ts: np.ndarray | pd.DatetimeIndex,
    history: np.ndarray,
    future_ts: np.ndarray | pd.DatetimeIndex,
    truth: np.ndarray | None,
    forecast: np.ndarray,
    title: str,
    ylabel: str = "",
) -> Path:
    """One channel: lookback history, the true continuation (if known) and the forecast."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.2), dpi=90)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0.07, 0.16, 0.91, 0.74))
    past = np.arange(-len(history), 0)
    ahead = np.arange(len(forecast))
    ax.plot(past, history, color="0.35", lw=1.0, label="history")
    if truth is not None:
        ax.plot(ahead, truth, color="tab:blue", lw=1.2, label="truth")
    ax.plot(ahead, forecast, color="tab:orange", lw=1.4, label="forecast")
    ax.axvline(-0.5, color="0.6", lw=0.8, ls="--")
    ax.set_title(title, fontsize=9)
    ax.set_ylabel(ylabel)
    ax.set_xlabel(f"steps from the forecast origin {pd.Timestamp(future_ts[0])}", fontsize=8)
    ax.legend(loc="upper left", fontsize=7)
    path = Path(path)
    fig.savefig(path, format="png")
    return path


def run_label(cfg: Any) -> str:
    """``model/mixer``, or the model alone when it has no token mixer."""
    return f"{cfg.model}/{cfg.mixer}" if cfg.model_spec().uses_mixer else cfg.model


def plot_last_window(f: Any, prepared: Any, path: str | Path, split: str = "test",
                     channel: str | None = None) -> Path:
    """PNG of the last window of ``split`` for a fitted forecaster ``f`` (a ``Fitted``)."""
    from tsmix.forecasting.fitted import forecast_window

    channel = channel or (f.target if f.target in f.out_columns else f.out_columns[0])
    if channel not in f.out_columns:
        raise TsmixError(f"channel {channel!r} is not forecast; choose one of {f.out_columns}")
    _, b = prepared.borders[split]
    L, H = f.config.lookback, f.config.horizon
    raw, ts = prepared.series.values, prepared.series.index  # zoned stamps when the data has a zone
    s = b - L - H  # the last window of the split
    pred = forecast_window(f, raw[s : s + L])[:, f.out_columns.index(channel)]
    c = f.columns.index(channel)
    return plot_window(
        path, ts[s : s + L], raw[s : s + L, c], ts[s + L : s + L + H], raw[s + L : s + L + H, c], pred,
        title=f"{prepared.series.name} {split}: {run_label(f.config)} "
              f"L={L} H={H}, channel {channel}",
        ylabel=channel,
    )
