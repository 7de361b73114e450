"""Backtest plot: actuals over the backtested span and each cutoff's forecast, one panel per series;
with interval columns, each cutoff's bands shaded in its colour (wider levels lighter).

Drawn on a private Agg canvas (matplotlib's global backend is never touched), written atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tsmix.atomic import save_figure_atomic
from tsmix.errors import TsmixError
from tsmix.forecasting.probabilistic.output import interval_columns

MAX_CUTOFFS = 12  # more forecast lines than this are unreadable: an even subset of cutoffs is drawn


def plot_backtest(bt: Any, path: str | Path, series: list[str] | None = None, max_series: int = 3) -> Path:
    """PNG of ``bt`` (a :class:`Backtest`): per series, actuals in black and one line per cutoff."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    f, idc, tc = bt.frame, bt.id_col, bt.time_col
    known = list(dict.fromkeys(f[idc]))
    chosen = known[:max_series] if series is None else list(series)
    unknown = [s for s in chosen if s not in known]
    if unknown or not chosen:
        raise TsmixError(f"series {unknown or chosen} are not in the backtest; choose from {known[:10]}")
    cutoffs = np.sort(f["cutoff"].unique())
    if len(cutoffs) > MAX_CUTOFFS:
        cutoffs = cutoffs[np.linspace(0, len(cutoffs) - 1, MAX_CUTOFFS).round().astype(int)]
    fig = Figure(figsize=(9, 2.6 * len(chosen)), dpi=90)
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(chosen), 1, squeeze=False)[:, 0]
    colors = [f"C{i % 10}" for i in range(len(cutoffs))]  # matplotlib's default colour cycle
    for ax, sid in zip(axes, chosen):
        g = f[f[idc] == sid]
        actual = g.drop_duplicates(tc).sort_values(tc)
        ax.plot(actual[tc], actual["y"], color="black", lw=1.2, label="actual")
        for color, c in zip(colors, cutoffs):
            w = g[g["cutoff"] == c]
            if len(w):
                for lv in sorted(bt.level, reverse=True):  # widest first, under the rest
                    lo, hi = interval_columns("y_hat", lv)
                    ax.fill_between(w[tc], w[lo], w[hi], color=color, alpha=0.12, lw=0)
                ax.plot(w[tc], w["y_hat"], color=color, lw=1.0, alpha=0.9)
                ax.axvline(c, color=color, lw=0.6, ls=":")
        ax.set_title(f"{sid}: forecasts from {len(cutoffs)} cutoffs (dotted) vs actual", fontsize=9)
        ax.tick_params(labelsize=7)
    axes[0].legend(loc="upper left", fontsize=7)
    fig.tight_layout()
    return save_figure_atomic(fig, Path(path).expanduser())

