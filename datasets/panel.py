"""``Panel``: many series of one frequency in one buffer + per-series offsets (long or wide sources).

Series may start and end at different times. Row ``offsets[s] + t`` of every buffer is step ``t`` of
series ``s``; nothing is ever copied per window (see ``panel_windows.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl

from tsmix.datasets.covariates import StaticTable, read_static
from tsmix.datasets.dates import future_index, localize
from tsmix.datasets.errors import DataError
from tsmix.datasets.panel_io import Source, read_long
from tsmix.datasets.series import load


@dataclass(frozen=True)
class PanelColumns:
    """Column roles of a long frame (neuralforecast's names by default)."""

    id_col: str = "unique_id"  # series id
    time_col: str = "ds"  # timestamp
    target_col: str = "y"  # the forecast target
    hist_exog: tuple[str, ...] = ()  # known up to the forecast origin only
    futr_exog: tuple[str, ...] = ()  # known into the future (user columns; calendar features are added)

    @property
    def value_cols(self) -> tuple[str, ...]:
        return (self.target_col, *self.hist_exog, *self.futr_exog)


@dataclass(frozen=True, eq=False)
class Panel:
    """Raw (unscaled) panel. Buffers are aligned rows: (N,) / (N, C) with series s at offsets[s]:[s+1]."""

    ids: tuple[str, ...]  # (S,) series ids, sorted
    offsets: np.ndarray  # (S+1,) int64 row offsets
    timestamps: np.ndarray  # (N,) datetime64[ns], regular within each series; UTC instants when tz is set
    target: np.ndarray  # (N,) float32 target values
    hist: np.ndarray  # (N, Ch) float32 past-only covariates
    futr: np.ndarray  # (N, Cf) float32 future-known user covariates
    freq: str  # pandas alias shared by every series
    step_ns: int | None  # fixed step (ns) for future stamps; None: calendar frequency, use ``freq``
    tz: str | None = None  # zone of the source's dates: calendar features and forecasts use local time
    columns: PanelColumns = field(default_factory=PanelColumns)
    static: StaticTable | None = None  # one row per series, aligned to ``ids``
    name: str = "panel"  # source name, for messages and summaries

    @classmethod
    def from_long(cls, source: Source, *, id_col: str = "unique_id", time_col: str = "ds",
                  target_col: str = "y", hist_exog: Sequence[str] = (), futr_exog: Sequence[str] = (),
                  static_df: pd.DataFrame | pl.DataFrame | None = None,
                  static_categorical: Sequence[str] | None = None, fill: str | None = None) -> Panel:
        """A panel from a long frame/file ``id_col, time_col, target_col`` (+ covariate columns).

        ``fill`` (None | "ffill" | "interpolate" | "zero") fills NaN values and missing timestamps per
        series; None rejects them. ``static_df`` holds one row per series (``id_col`` + attributes).
        """
        cols = PanelColumns(id_col, time_col, target_col, tuple(hist_exog), tuple(futr_exog))
        arr = read_long(source, id_col=id_col, time_col=time_col, value_cols=cols.value_cols, fill=fill)
        v = _float32(arr.values)
        nh = len(cols.hist_exog)
        static = None if static_df is None else read_static(static_df, id_col, arr.ids, static_categorical)
        name = Path(source).stem if isinstance(source, (str, Path)) else "frame"
        return cls(ids=arr.ids, offsets=arr.offsets, timestamps=arr.timestamps, target=v[:, 0].copy(),
                   hist=np.ascontiguousarray(v[:, 1 : 1 + nh]), futr=np.ascontiguousarray(v[:, 1 + nh :]),
                   freq=arr.freq, step_ns=arr.step_ns, tz=arr.tz, columns=cols, static=static, name=name)

    @classmethod
    def from_wide(cls, source: str | Path | pd.DataFrame | pl.DataFrame, *,
                  data_dir: str | Path | None = None, date_col: str | None = None,
                  columns: Sequence[str] | None = None, fill: str | None = None) -> Panel:
        """One series per value column of a wide dataset (benchmark name, file or frame), via ``load``."""
        s = load(source, data_dir=data_dir, date_col=date_col, fill=fill, columns=columns)
        T, C = s.values.shape
        order = np.argsort(np.asarray(s.columns, dtype=str), kind="stable")  # ids sorted, as in long panels
        step = np.diff(s.timestamps.view(np.int64))
        return cls(ids=tuple(s.columns[i] for i in order), offsets=np.arange(C + 1, dtype=np.int64) * T,
                   timestamps=np.tile(s.timestamps, C),
                   target=np.ascontiguousarray(s.values.T[order]).ravel(),  # (C*T,) series after series
                   hist=np.zeros((T * C, 0), np.float32), futr=np.zeros((T * C, 0), np.float32), freq=s.freq,
                   step_ns=int(step[0]) if (step == step[0]).all() else None, tz=s.tz,
                   columns=PanelColumns(time_col=s.date_col), name=s.name)

    @property
    def n_series(self) -> int:
        return len(self.ids)

    @property
    def n_rows(self) -> int:
        return int(self.offsets[-1])

    @property
    def lengths(self) -> np.ndarray:
        """(S,) rows per series."""
        return np.diff(self.offsets)

    def rows(self, s: int) -> slice:
        return slice(int(self.offsets[s]), int(self.offsets[s + 1]))

    def take(self, keep: np.ndarray) -> Panel:
        """The panel restricted to series indices ``keep`` (sorted), buffers rebuilt contiguous."""
        keep = np.asarray(keep, dtype=np.int64)
        lens = self.lengths[keep]
        rows = np.concatenate([np.arange(self.offsets[s], self.offsets[s + 1]) for s in keep]) if len(keep) \
            else np.zeros(0, np.int64)
        return Panel(ids=tuple(self.ids[s] for s in keep),
                     offsets=np.concatenate([[0], np.cumsum(lens)]).astype(np.int64),
                     timestamps=self.timestamps[rows], target=self.target[rows], hist=self.hist[rows],
                     futr=self.futr[rows], freq=self.freq, step_ns=self.step_ns, tz=self.tz,
                     columns=self.columns, static=None if self.static is None else self.static.take(keep),
                     name=self.name)

    def future_stamps(self, origin: np.ndarray, horizon: int) -> np.ndarray:
        """(S, H) datetime64[ns] stamps after each origin (S,) on the panel's frequency."""
        origin = np.asarray(origin, dtype="datetime64[ns]")
        return future_stamps(origin, horizon, self.freq, self.step_ns, self.tz)

    def to_pandas(self) -> pd.DataFrame:
        """The panel back in long format (id, time, target, covariates)."""
        c = self.columns
        df = pd.DataFrame({c.id_col: np.repeat(np.asarray(self.ids, dtype=object), self.lengths),
                           c.time_col: localize(self.timestamps, self.tz), c.target_col: self.target})
        for j, col in enumerate(c.hist_exog):
            df[col] = self.hist[:, j]
        for j, col in enumerate(c.futr_exog):
            df[col] = self.futr[:, j]
        return df

    def __repr__(self) -> str:
        lens = self.lengths
        span = f"{lens.min()}..{lens.max()}" if len(lens) else "-"
        n_static = 0 if self.static is None else self.static.num.shape[1] + self.static.cat.shape[1]
        return (f"Panel({self.name!r}, {self.n_series} series, {self.n_rows} rows, lengths {span}, "
                f"freq={self.freq}, hist={len(self.columns.hist_exog)}, futr={len(self.columns.futr_exog)}, "
                f"static={n_static})")


def future_stamps(origin: np.ndarray, horizon: int, freq: str, step_ns: int | None,
                  tz: str | None = None) -> np.ndarray:
    """(S, H) stamps after each origin (S,): origin + k * step, or pandas' calendar offsets (month starts,
    days across DST in zone ``tz``...). Returned like the buffers: naive, UTC instants when ``tz`` is set."""
    if step_ns is not None:
        k = np.arange(1, horizon + 1, dtype=np.int64)[None, :]  # (1, H)
        return origin[:, None] + k * np.timedelta64(step_ns, "ns")
    out = np.empty((len(origin), horizon), dtype="datetime64[ns]")
    for i, o in enumerate(origin):
        idx = future_index(o, freq, horizon, tz)
        out[i] = (idx if idx.tz is None else idx.tz_convert("UTC").tz_localize(None)).as_unit("ns").to_numpy()
    return out


def _float32(values: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        v32 = values.astype(np.float32)
    if not np.isfinite(v32).all():
        raise DataError("values overflow float32 (|x| > 3.4e38): rescale the data")
    return v32
