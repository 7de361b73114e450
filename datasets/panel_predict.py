"""Prediction inputs: the last lookback window of each series + its future covariates over the horizon.

Known series are scaled with their training statistics; series unseen in training with statistics of
the history given for them (the only data known about them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import polars as pl
import torch

from tsmix.datasets.covariates import calendar
from tsmix.datasets.dates import localize
from tsmix.datasets.errors import DataError
from tsmix.datasets.panel import Panel, future_stamps
from tsmix.datasets.panel_io import frame_of, ids_and_times, require_columns
from tsmix.datasets.panel_prepare import PanelSchema, scaled_buffers
from tsmix.datasets.panel_split import fit_per_series


@dataclass(frozen=True, eq=False)
class PredictInput:
    """One forecast per series: what the model receives, plus what turns its output back into frames."""

    ids: tuple[str, ...]  # (S,) series, in row order of every array below
    x: torch.Tensor  # (S, L, 1) scaled target, last lookback steps
    hist: torch.Tensor  # (S, L, Ch) past-only covariates
    futr: torch.Tensor  # (S, L+H, Cf) future-known covariates (user columns, then calendar)
    static: torch.Tensor  # (S, Cs) numeric static attributes
    static_cat: torch.Tensor  # (S, Ck) int64 static category codes
    origin: np.ndarray  # (S,) datetime64[ns] last observed stamp (the forecast origin), UTC if tz
    future: np.ndarray  # (S, H) datetime64[ns] stamps being forecast, UTC if tz
    y_mean: np.ndarray  # (S,) float64 target mean used to scale x
    y_scale: np.ndarray  # (S,) float64 target scale
    id_col: str = "unique_id"  # column names of the output frame
    time_col: str = "ds"
    tz: str | None = None  # output stamps in this zone, as the input's

    def to_frame(self, y_hat: torch.Tensor | np.ndarray) -> pd.DataFrame:
        """Scaled model output (S, H) or (S, H, 1) -> long ``id, ds, y_hat`` in original units."""
        v = y_hat.detach().cpu().numpy() if isinstance(y_hat, torch.Tensor) else np.asarray(y_hat)
        S, H = self.future.shape
        if v.size != S * H:
            raise DataError(f"y_hat must be ({S}, {H}) or ({S}, {H}, 1), got shape {v.shape}")
        v = v.reshape(S, H).astype(np.float64) * self.y_scale[:, None] + self.y_mean[:, None]
        return pd.DataFrame({self.id_col: np.repeat(np.asarray(self.ids, dtype=object), H),
                             self.time_col: localize(self.future.ravel(), self.tz), "y_hat": v.ravel()})


def _history_panel(schema: PanelSchema, history, static_df) -> Panel:
    c = schema.columns
    if isinstance(history, Panel):
        if history.columns != c:
            raise DataError(f"history columns {history.columns} differ from the training ones {c}")
        if static_df is None:
            return history
        history = history.to_pandas()
    cat = None if schema.static is None else schema.static.categorical
    return Panel.from_long(history, id_col=c.id_col, time_col=c.time_col, target_col=c.target_col,
                           hist_exog=c.hist_exog, futr_exog=c.futr_exog, static_df=static_df,
                           static_categorical=cat)


def _stats(schema: PanelSchema, panel: Panel) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """Per-series (mean, scale) of target, hist, futr: the training ones, or fit on the history if new."""
    pos = {s: i for i, s in enumerate(schema.ids)}
    known = np.array([pos.get(s, -1) for s in panel.ids])
    lens = panel.lengths
    own = [fit_per_series(v, panel.offsets, np.zeros_like(lens), lens) if (known < 0).any() else None
           for v in (panel.target[:, None], panel.hist, panel.futr)]
    out = []
    trained = ((schema.y_mean[:, None], schema.y_scale[:, None]), (schema.hist_mean, schema.hist_scale),
               (schema.futr_mean, schema.futr_scale))
    for k, (m, sc) in enumerate(trained):
        mean, scale = m[np.maximum(known, 0)], sc[np.maximum(known, 0)]
        if (known < 0).any() and (k == 0 or schema.scale_exog):
            mean[known < 0], scale[known < 0] = own[k][0][known < 0], own[k][1][known < 0]
        out.append((mean, scale))
    return tuple(out)


def _future_covariates(schema: PanelSchema, ids: tuple[str, ...], origin: np.ndarray, future: np.ndarray,
                       futr_df) -> np.ndarray:
    """(S, H, Cf_user) raw future covariates from ``futr_df``; a missing row/value names what is needed."""
    c = schema.columns
    cols = list(c.futr_exog)
    S, H = future.shape
    if not cols:
        return np.zeros((S, H, 0))
    if futr_df is None:
        raise DataError(f"the model uses future covariates {cols}: pass futr_df with columns "
                        f"{[c.id_col, c.time_col, *cols]} for the {H} steps after each series' history")
    df, zones = frame_of(futr_df)
    require_columns(df, [c.id_col, c.time_col, *cols], "futr_df")
    fid, fts, _ = ids_and_times(df, zones, c.id_col, c.time_col)  # instants: any zone matches
    given = pl.DataFrame({"__id": fid, "__ts": fts.view(np.int64)}).with_columns(
        [df[col].cast(pl.Float64, strict=False).alias(col) for col in cols])
    if given.select(pl.struct("__id", "__ts").is_duplicated().any()).item():
        raise DataError("futr_df has duplicated (id, timestamp) rows: keep one row per series and step")
    need = pl.DataFrame({"__id": np.repeat(np.asarray(ids, dtype=str), H),
                         "__ts": future.ravel().view(np.int64)})
    got = need.join(given, on=["__id", "__ts"], how="left", maintain_order="left")
    vals = got.select(cols).to_numpy().astype(np.float64).reshape(S, H, len(cols))
    bad = ~np.isfinite(vals)
    if bad.any():
        rows = np.flatnonzero(bad.any(axis=(1, 2)))
        s = int(rows[0])
        miss_cols = [cols[j] for j in np.flatnonzero(bad[s].any(axis=0))]
        stamps = [str(pd.Timestamp(t)) for t in future[s][bad[s].any(axis=1)][:3]]
        more = " ..." if bad[s].any(axis=1).sum() > 3 else ""
        raise DataError(f"futr_df does not cover the horizon of {len(rows)} series: e.g. series {ids[s]!r} "
                        f"needs columns {miss_cols} at {stamps}{more}"
                        f" (the {H} steps after its last stamp {pd.Timestamp(origin[s])}): add those rows")
    return vals


def build_predict_input(schema: PanelSchema, history, futr_df=None, static_df=None) -> PredictInput:
    """Inputs for forecasting ``schema.horizon`` steps after the end of each series in ``history``.

    ``history``: a :class:`Panel` or a long frame/file with the training columns (every series >= L rows).
    ``futr_df``: long frame with the future covariates for the H steps after each series' last stamp.
    ``static_df``: static attributes (required when training used them and ``history`` has none).
    """
    panel = _history_panel(schema, history, static_df)
    L, H = schema.lookback, schema.horizon
    if (panel.freq, panel.step_ns) != (schema.freq, schema.step_ns):
        raise DataError(f"history has frequency {panel.freq} but the model was trained on {schema.freq}: "
                        f"resample the history")
    if panel.tz != schema.tz:
        raise DataError(f"history dates are in zone {panel.tz} but training dates in {schema.tz}: convert "
                        f"the history's date column to {schema.tz or 'naive local times'}")
    short = [s for s, n in zip(panel.ids, panel.lengths) if n < L]
    if short:
        raise DataError(f"{len(short)} series have fewer than lookback = {L} rows of history: {short[:5]}; "
                        f"give at least {L} rows per series")
    y_st, h_st, f_st = _stats(schema, panel)
    t = scaled_buffers(panel, schema, (y_st[0][:, 0], y_st[1][:, 0]), h_st, f_st)
    last = panel.offsets[1:, None] - L + np.arange(L)  # (S, L) global rows of each series' last window
    origin = panel.timestamps[panel.offsets[1:] - 1]
    future = future_stamps(origin, H, schema.freq, schema.step_ns, schema.tz)  # (S, H)
    S = panel.n_series
    fut = _future_covariates(schema, panel.ids, origin, future, futr_df)  # (S, H, Cf_user) raw
    fut = (fut - f_st[0][:, None]) / f_st[1][:, None]
    if schema.calendar:  # per series over lookback + horizon stamps: each block is one regular grid
        stamps = np.concatenate([panel.timestamps[last], future], axis=1)  # (S, L+H)
        cal = calendar(stamps.ravel(), np.arange(S + 1) * (L + H), schema.calendar, schema.tz)
        cal = cal.reshape(S, L + H, -1)  # (S, L+H, K)
        fut = np.concatenate([fut, cal[:, L:]], axis=2)
    idx = torch.from_numpy(last)
    futr = torch.cat([t.futr[idx], torch.from_numpy(np.ascontiguousarray(fut, dtype=np.float32))], dim=1)
    c = schema.columns
    return PredictInput(ids=panel.ids, x=t.y[idx], hist=t.hist[idx], futr=futr, static=t.static,
                        static_cat=t.static_cat, origin=origin, future=future, y_mean=y_st[0][:, 0],
                        y_scale=y_st[1][:, 0], id_col=c.id_col, time_col=c.time_col, tz=schema.tz)
