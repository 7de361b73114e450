"""Forecast-versus-truth plots (PNG) without touching matplotlib's global backend.

The x axis is the step offset from the forecast origin (its timestamp in the label): date
tick locators cost more than the whole drawing, and a run writes this plot on every save.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tsmix.atomic import save_figure_atomic
from tsmix.errors import TsmixError

PLOT_LEVELS = (80.0, 95.0)  # bands drawn for a model with intervals but no levels of its own


def plot_window(
    path: str | Path,
    history_ts: np.ndarray | pd.DatetimeIndex,
    history: np.ndarray,
    future_ts: np.ndarray | pd.DatetimeIndex,
    truth: np.ndarray | None,
    forecast: np.ndarray,
    title: str,
    ylabel: str = "",
    bands: Mapping[float, tuple[np.ndarray, np.ndarray]] | None = None,
    band_label: str = "",
) -> Path:
    """One channel: lookback history, the true continuation (if known) and the forecast.

    ``bands``: ``{level: (lo, hi)}`` central intervals (H,) drawn as shaded bands, the widest
    palest; ``band_label`` names their source (e.g. ``split-conformal``) in the legend.
    """
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
    for i, level in enumerate(sorted(bands or {}, reverse=True)):  # widest first, under the narrower
        lo, hi = bands[level]
        ax.fill_between(ahead, lo, hi, color="tab:orange", alpha=0.15 + 0.15 * i, lw=0,
                        label=f"{level:g}% {band_label}".rstrip())
    ax.plot(ahead, forecast, color="tab:orange", lw=1.4, label="forecast")
    ax.axvline(-0.5, color="0.6", lw=0.8, ls="--")
    ax.set_title(title, fontsize=9)
    ax.set_ylabel(ylabel)
    ax.set_xlabel(f"steps from the forecast origin {pd.Timestamp(future_ts[0])}", fontsize=8)
    ax.legend(loc="upper left", fontsize=7)
    return save_figure_atomic(fig, path)


def run_label(cfg: Any) -> str:
    """``model/mixer``, or the model alone when it has no token mixer."""
    return f"{cfg.model}/{cfg.mixer}" if cfg.model_spec().uses_mixer else cfg.model


def plot_last_window(f: Any, prepared: Any, path: str | Path, split: str = "test",
                     channel: str | None = None) -> Path:
    """PNG of the last window of ``split`` for a fitted forecaster ``f`` (a ``Fitted``), with the
    intervals of the model's levels (``config.level``, else 80 and 95) when it has any: its
    head's own or the split-conformal ones of a point model."""
    from tsmix.forecasting.fitted import head_output, unscale, window_bands

    channel = channel or (f.target if f.target in f.out_columns else f.out_columns[0])
    if channel not in f.out_columns:
        raise TsmixError(f"channel {channel!r} is not forecast; choose one of {f.out_columns}")
    _, b = prepared.borders[split]
    L, H = f.config.lookback, f.config.horizon
    raw, ts = prepared.series.values, prepared.series.index  # zoned stamps when the data has a zone
    s = b - L - H  # the last window of the split
    j = f.out_columns.index(channel)
    out = head_output(f, raw[s : s + L], ts[s : s + L])
    pred = unscale(f, f.head.point(out))[:, j]
    bands, method = window_bands(f, raw[s : s + L], out, f.config.level or PLOT_LEVELS, j)
    c = f.columns.index(channel)
    return plot_window(
        path, ts[s : s + L], raw[s : s + L, c], ts[s + L : s + L + H], raw[s + L : s + L + H, c], pred,
        title=f"{prepared.series.name} {split}: {run_label(f.config)} "
              f"L={L} H={H}, channel {channel}",
        ylabel=channel, bands=bands, band_label=method,
    )


def plot_panel_forecast(pf: Any, path: str | Path, series: str | None = None) -> Path:
    """PNG of one series of a fitted ``PanelForecaster`` (default: the first): its kept history and
    the forecast after its last row, with 80/95% bands when the model has intervals. A model with
    future covariates needs them to forecast, so it cannot be drawn from the fitted state alone."""
    f = pf._require_fitted()
    hp, o = f.history_panel, pf.options
    if o.futr_exog or pf.config.calendar:
        raise TsmixError("this panel model reads future covariates: plot its predict(df, futr_df=...) "
                         "output instead")
    sid = str(series if series is not None else hp.ids[0])
    if sid not in hp.ids:
        raise TsmixError(f"series {sid!r} is not in the fitted panel; choose one of {list(hp.ids[:5])}...")
    try:  # intervals when the model has them (its head's or a conformal calibration)
        fc = pf.predict(level=list(PLOT_LEVELS))
    except TsmixError:
        fc = pf.predict()
    fc = fc[fc[o.id_col].astype(str) == sid]
    rows = hp.rows(hp.ids.index(sid))
    bands = {lv: (fc[f"y_hat-lo-{lv:g}"].to_numpy(), fc[f"y_hat-hi-{lv:g}"].to_numpy())
             for lv in PLOT_LEVELS if f"y_hat-lo-{lv:g}" in fc.columns}
    return plot_window(
        path, hp.timestamps[rows], hp.target[rows], fc[o.time_col].to_numpy(), None, fc["y_hat"].to_numpy(),
        title=f"{hp.name}: {run_label(f.config)} L={f.config.lookback} H={f.config.horizon}, series {sid}",
        ylabel=o.target_col, bands=bands, band_label=fc.attrs.get("interval_method", ""),
    )
