"""``prepare_panel``: panel -> per-series splits -> per-series train-fit scaling -> window sets.

The :class:`PanelSchema` is everything a saved run needs to turn new history frames into model inputs
(column roles, frequency, per-series statistics, calendar features, static vocabularies).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
import polars as pl
import torch

from tsmix.datasets.covariates import StaticEncoder, calendar
from tsmix.datasets.dates import localize
from tsmix.datasets.errors import DataError
from tsmix.datasets.panel import Panel, PanelColumns
from tsmix.datasets.panel_split import (
    SPLITS,
    PanelSplit,
    apply_per_series,
    fit_per_series,
    resolve_borders,
    short_series,
    window_counts,
)
from tsmix.datasets.panel_windows import PanelTensors, PanelWindows
from tsmix.datasets.timefeatures import feature_names
from tsmix.datasets.validate import check_window_args


@dataclass(frozen=True, eq=False)
class PanelSchema:
    """What turns raw panel rows into model inputs, identically at training and prediction time."""

    columns: PanelColumns  # column roles of the long frames
    freq: str  # sampling frequency every input series must have
    step_ns: int | None  # fixed step for future stamps; None: calendar frequency
    tz: str | None  # zone of the training dates (calendar features in local time); None: naive
    lookback: int  # L
    horizon: int  # H
    ids: tuple[str, ...]  # training series, in the order of the stats below
    y_mean: np.ndarray  # (S,) float64 target mean of each series' training rows
    y_scale: np.ndarray  # (S,) float64 target scale (1 for constant training rows)
    hist_mean: np.ndarray  # (S, Ch) float64 (0 when scale_exog=False)
    hist_scale: np.ndarray  # (S, Ch) float64 (1 when scale_exog=False)
    futr_mean: np.ndarray  # (S, Cf) float64 user future covariates
    futr_scale: np.ndarray  # (S, Cf) float64
    calendar: tuple[str, ...]  # calendar features appended to futr, () when off
    scale_exog: bool  # covariates scaled per series like the target (new series: on their history)
    static: StaticEncoder | None  # static encoding, None without static attributes

    @property
    def futr_channels(self) -> int:
        """Cf of a batch: user future covariates + calendar features."""
        return len(self.columns.futr_exog) + len(self.calendar)

    def to_dict(self) -> dict:
        """JSON-ready (e.g. for a run's config.json)."""
        d = {k: getattr(self, k) for k in ("freq", "step_ns", "tz", "lookback", "horizon", "scale_exog")}
        d.update(columns=asdict(self.columns), ids=list(self.ids), calendar=list(self.calendar),
                 static=None if self.static is None else self.static.to_dict())
        for k in ("y_mean", "y_scale", "hist_mean", "hist_scale", "futr_mean", "futr_scale"):
            d[k] = getattr(self, k).tolist()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> PanelSchema:
        c = d["columns"]
        cols = PanelColumns(c["id_col"], c["time_col"], c["target_col"], tuple(c["hist_exog"]),
                            tuple(c["futr_exog"]))
        S = len(d["ids"])
        arr = {k: np.asarray(d[k], dtype=np.float64) for k in ("y_mean", "y_scale")}
        for k, n in (("hist", len(cols.hist_exog)), ("futr", len(cols.futr_exog))):
            for part in ("mean", "scale"):
                arr[f"{k}_{part}"] = np.asarray(d[f"{k}_{part}"], dtype=np.float64).reshape(S, n)
        return cls(columns=cols, freq=d["freq"], step_ns=d["step_ns"], tz=d["tz"], lookback=d["lookback"],
                   horizon=d["horizon"], ids=tuple(d["ids"]), calendar=tuple(d["calendar"]),
                   scale_exog=d["scale_exog"],
                   static=None if d["static"] is None else StaticEncoder.from_dict(d["static"]), **arr)


@dataclass(frozen=True, eq=False)
class PreparedPanel:
    panel: Panel  # raw values (original units), after dropping too-short series
    schema: PanelSchema  # statistics and column roles (what a saved run keeps)
    tensors: PanelTensors  # scaled buffers; every window set is a view of them
    borders: np.ndarray  # (S, 6) int64 local rows: train a, b, val a, b, test a, b
    train: PanelWindows
    val: PanelWindows
    test: PanelWindows

    def split(self, name: str) -> PanelWindows:
        if name not in SPLITS:
            raise DataError(f"unknown split {name!r}: use one of {', '.join(SPLITS)}")
        return getattr(self, name)

    def summary(self) -> dict:
        """JSON-ready description."""
        p, s = self.panel, self.schema
        lens = p.lengths
        span = localize(np.array([p.timestamps.min(), p.timestamps.max()]), p.tz)
        out = {"name": p.name, "series": p.n_series, "rows": p.n_rows, "min_length": int(lens.min()),
               "max_length": int(lens.max()), "freq": p.freq, "start": str(span[0]), "end": str(span[1]),
               "lookback": s.lookback, "horizon": s.horizon,
               "hist_exog": list(s.columns.hist_exog), "futr_exog": list(s.columns.futr_exog),
               "calendar": list(s.calendar), "static": [] if s.static is None else
               list(s.static.numeric + s.static.categorical)}
        out.update({f"{k}_windows": len(self.split(k)) for k in SPLITS})
        return out

    def predict_input(self, history: pd.DataFrame | pl.DataFrame | Panel | None = None,
                      futr_df: pd.DataFrame | pl.DataFrame | None = None,
                      static_df: pd.DataFrame | pl.DataFrame | None = None):
        """Model inputs for the next horizon after each series' history (default: the whole panel)."""
        from tsmix.datasets.panel_predict import build_predict_input

        history = self.panel if history is None else history
        return build_predict_input(self.schema, history, futr_df, static_df)


def scaled_buffers(panel: Panel, schema: PanelSchema, y_stats: tuple[np.ndarray, np.ndarray],
                   hist_stats: tuple[np.ndarray, np.ndarray], futr_stats: tuple[np.ndarray, np.ndarray]
                   ) -> PanelTensors:
    """The panel's rows scaled with per-series stats (S, ...) aligned to ``panel.ids``."""
    lens = panel.lengths
    y = apply_per_series(panel.target[:, None], lens, y_stats[0][:, None], y_stats[1][:, None])  # (N, 1)
    hist = apply_per_series(panel.hist, lens, *hist_stats)  # (N, Ch)
    futr = apply_per_series(panel.futr, lens, *futr_stats)  # (N, Cf_user)
    if schema.calendar:
        cal = calendar(panel.timestamps, panel.offsets, schema.calendar, schema.tz)  # (N, K)
        futr = np.concatenate([futr, cal], axis=1)
    S = panel.n_series
    if schema.static is not None:
        if panel.static is None:
            used = list(schema.static.numeric + schema.static.categorical)
            raise DataError(f"the model was trained with static attributes {used}: pass static_df with one "
                            f"row per series")
        num, codes = schema.static.transform(panel.static, panel.ids)
    else:
        num, codes = np.zeros((S, 0), np.float32), np.zeros((S, 0), np.int64)
    return PanelTensors(y=torch.from_numpy(y), hist=torch.from_numpy(hist), futr=torch.from_numpy(futr),
                        static=torch.from_numpy(num), static_cat=torch.from_numpy(codes),
                        stamps=torch.from_numpy(panel.timestamps.view(np.int64).copy()))


def prepare_panel(panel: Panel, lookback: int, horizon: int, split: PanelSplit, *, drop_short: bool = False,
                  calendar: bool = True, scale_exog: bool = True) -> PreparedPanel:
    """Split each series by time, fit scaling on each series' own training rows, build the windows.

    ``calendar`` appends calendar features to the future covariates; ``scale_exog`` standardizes the
    hist/futr columns per series like the target; static numerics are standardized across series.
    """
    check_window_args(lookback, horizon, "M")
    if not isinstance(panel, Panel):
        raise DataError(f"prepare_panel takes a Panel (Panel.from_long / Panel.from_wide), got "
                        f"{type(panel).__name__}")
    borders = resolve_borders(split, panel.ids, panel.timestamps, panel.offsets, lookback, horizon)
    keep = short_series(panel.ids, borders, lookback, horizon, drop_short)
    if len(keep) < panel.n_series:
        panel, borders = panel.take(keep), borders[keep]
    lo, hi = borders[:, 0], borders[:, 1]  # training rows: the only rows any statistic sees
    y_mean, y_scale = fit_per_series(panel.target[:, None], panel.offsets, lo, hi)
    fit_exog = (lambda v: fit_per_series(v, panel.offsets, lo, hi)) if scale_exog else \
        (lambda v: (np.zeros((panel.n_series, v.shape[1])), np.ones((panel.n_series, v.shape[1]))))
    hist_stats, futr_stats = fit_exog(panel.hist), fit_exog(panel.futr)
    longest = panel.rows(int(np.argmax(panel.lengths)))
    schema = PanelSchema(
        columns=panel.columns, freq=panel.freq, step_ns=panel.step_ns, tz=panel.tz, lookback=lookback,
        horizon=horizon,
        ids=panel.ids, y_mean=y_mean[:, 0], y_scale=y_scale[:, 0], hist_mean=hist_stats[0],
        hist_scale=hist_stats[1], futr_mean=futr_stats[0], futr_scale=futr_stats[1],
        calendar=feature_names(panel.timestamps[longest]) if calendar else (), scale_exog=scale_exog,
        static=None if panel.static is None else StaticEncoder.fit(panel.static))
    tensors = scaled_buffers(panel, schema, (y_mean[:, 0], y_scale[:, 0]), hist_stats, futr_stats)
    start = panel.offsets[:-1]
    series = np.arange(panel.n_series)
    sets = {k: PanelWindows(tensors, series, start + borders[:, 2 * i], start + borders[:, 2 * i + 1],
                            lookback, horizon) for i, k in enumerate(SPLITS)}
    assert (window_counts(borders, lookback, horizon) >= 1).all()
    return PreparedPanel(panel=panel, schema=schema, tensors=tensors, borders=borders, **sets)
