"""Long-format reading: a frame/file with ``unique_id, ds, y`` (+ covariates) -> sorted, checked arrays.

Rows are sorted by (series id, timestamp). Checks, each one :class:`DataError` naming series: missing
columns, duplicated ``(id, ds)``, irregular or mixed frequencies, NaN/inf (or ``fill`` them).
Per-series work is vectorized over the whole buffer; only series that need it (gaps, NaN, calendar
frequencies such as month starts) go through the single-series validators of ``validate.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl

from tsmix.datasets.dates import find_date_column
from tsmix.datasets.errors import DataError
from tsmix.datasets.io import numeric_matrix, read_file, to_polars
from tsmix.datasets.validate import check_fill, check_timestamps, fill_values, infer_freq

Source = str | Path | pd.DataFrame | pl.DataFrame


@dataclass(frozen=True, eq=False)
class LongArrays:
    ids: tuple[str, ...]  # (S,) series ids in sorted order
    offsets: np.ndarray  # (S+1,) int64: series s is rows offsets[s]:offsets[s+1]
    timestamps: np.ndarray  # (N,) datetime64[ns], sorted within each series; UTC instants when tz is set
    values: np.ndarray  # (N, K) float64: target first, then the covariate columns
    freq: str  # the one sampling frequency of every series (pandas alias)
    step_ns: int | None  # fixed step in ns; None for calendar frequencies (MS, B, ...)
    tz: str | None  # zone of the source's dates (calendar rules use it); None: naive dates


def frame_of(source: Source) -> tuple[pl.DataFrame, dict[str, str]]:
    """A pandas/polars frame or a .csv/.parquet path as a polars frame (+ zones of zoned pandas columns)."""
    if isinstance(source, (str, Path)):
        path = Path(source).expanduser()
        if not path.is_file():
            raise DataError(f"file {str(source)!r} not found: give the path of a .csv/.parquet file")
        return read_file(path), {}
    return to_polars(source)


def require_columns(df: pl.DataFrame, cols: Sequence[str], what: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise DataError(f"{what} is missing columns {missing}: columns are {list(df.columns)}; "
                        f"name them with id_col=/time_col=/target_col=/hist_exog=/futr_exog=")


def ids_and_times(df: pl.DataFrame, zones: dict[str, str], id_col: str, time_col: str
                  ) -> tuple[pl.Series, np.ndarray, str | None]:
    """Series ids as strings, timestamps as datetime64[ns] (UTC instants if zoned) and the zone."""
    ids = df[id_col]
    if ids.null_count():
        raise DataError(f"id column {id_col!r} has {ids.null_count()} missing value(s): give every row a "
                        f"series id")
    _, dates = find_date_column(df, time_col)
    return ids.cast(pl.String), dates.values, zones.get(time_col, dates.tz)


def _series_name(ids: Sequence[str], idx: Sequence[int], limit: int = 5) -> str:
    shown = [ids[i] for i in list(idx)[:limit]]
    return f"{shown}{' ...' if len(idx) > limit else ''}"


def _sort_order(codes: np.ndarray, ts: np.ndarray) -> np.ndarray | None:
    """Row order sorting by (series code, time); None when the rows are sorted already (common)."""
    t = ts.view(np.int64)
    dc, dt = np.diff(codes), np.diff(t)
    if ((dc > 0) | ((dc == 0) & (dt >= 0))).all():
        return None
    # One int64 key (code, rank of the stamp) and one sort: faster than lexsort on two keys.
    uniq, rank = np.unique(t, return_inverse=True)
    return np.argsort(codes.astype(np.int64) * len(uniq) + rank)  # keys unique unless duplicates (an error)


def _check_duplicates(ids: tuple[str, ...], codes: np.ndarray, ts: np.ndarray, same: np.ndarray) -> None:
    dup = np.flatnonzero(same & (np.diff(ts.view(np.int64)) == 0))  # row i+1 repeats row i
    if len(dup):
        ex = [f"({ids[codes[i]]!r}, {pd.Timestamp(ts[i])})" for i in dup[:3]]
        raise DataError(f"{len(dup)} duplicated (id, timestamp) row(s), e.g. {', '.join(ex)}: drop or "
                        f"aggregate them (e.g. df.unique(subset=[id_col, time_col]))")


def _fixed_steps(ts: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per series (min, max) step in ns over consecutive rows (0, 0 for series of < 2 rows)."""
    d = np.diff(ts.view(np.int64))  # (N-1,); diffs at series boundaries are masked out below
    cross = np.zeros(len(d), dtype=bool)
    cross[offsets[1:-1] - 1] = True
    lens = np.diff(offsets)
    lo, hi = np.zeros(len(lens), dtype=np.int64), np.zeros(len(lens), dtype=np.int64)
    ok = np.flatnonzero(lens >= 2)
    if len(ok):
        starts = offsets[:-1][ok]
        lo[ok] = np.minimum.reduceat(np.where(cross, np.iinfo(np.int64).max, d), starts)
        hi[ok] = np.maximum.reduceat(np.where(cross, 0, d), starts)
    return lo, hi


def _step_label(ts: np.ndarray, step: int, tz: str | None) -> str:
    return infer_freq(ts[:5], tz) or pd.Timedelta(step, "ns").isoformat()


def _regularize(ids: tuple[str, ...], offsets: np.ndarray, ts: np.ndarray, values: np.ndarray,
                fill: str | None, tz: str | None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, str, int | None]:
    """One frequency for all series; gaps filled (``fill``) or rejected. Returns new offsets/ts/values."""
    lo, hi = _fixed_steps(ts, offsets)
    lens = np.diff(offsets)
    labels: dict[str, list[int]] = {}  # frequency -> series with it
    steps: dict[str, int | None] = {}
    fixed = (lo == hi) & (lens >= 3)
    for step in np.unique(lo[fixed]):
        members = np.flatnonzero(fixed & (lo == step))
        a = offsets[members[0]]
        label = _step_label(ts[a : offsets[members[0] + 1]], int(step), tz)
        labels.setdefault(label, []).extend(members.tolist())
        steps[label] = int(step)
    segments: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for s in np.flatnonzero(~fixed & (lens >= 3)):  # gaps, calendar steps or irregular: the slow path
        a, b = offsets[s], offsets[s + 1]
        try:
            new_ts, src, label = check_timestamps(ts[a:b], fill=fill, tz=tz)
        except DataError as exc:
            raise DataError(f"series {ids[s]!r}: {exc}") from None
        if src is not None:  # missing timestamps inserted as NaN rows, filled with the values below
            grown = np.full((len(src), values.shape[1]), np.nan)
            grown[src >= 0] = values[a:b]
            segments[int(s)] = (new_ts, grown)
        d = np.diff(new_ts.view(np.int64))
        step = int(d[0]) if (d == d[0]).all() else None
        if step is not None and step in steps.values():  # same step as a fixed-step group: same frequency
            label = next(k for k, v in steps.items() if v == step)
        labels.setdefault(label, []).append(int(s))
        steps.setdefault(label, step)
    if len(labels) > 1:
        shown = "; ".join(f"{f}: {_series_name(ids, sorted(m), 3)}" for f, m in labels.items())
        raise DataError(f"series have mixed frequencies ({shown}): resample them to one frequency or "
                        f"build one panel per frequency")
    freq = next(iter(labels), "")
    if segments:  # rebuild the buffers with the grown series
        parts_t, parts_v = [], []
        for s in range(len(ids)):
            t, v = segments.get(s, (ts[offsets[s] : offsets[s + 1]], values[offsets[s] : offsets[s + 1]]))
            parts_t.append(t)
            parts_v.append(v)
        offsets = np.concatenate([[0], np.cumsum([len(t) for t in parts_t])]).astype(np.int64)
        ts, values = np.concatenate(parts_t), np.concatenate(parts_v)
    return offsets, ts, values, freq, steps.get(freq)


def _fill(ids: tuple[str, ...], offsets: np.ndarray, ts: np.ndarray, values: np.ndarray,
          cols: Sequence[str], fill: str | None, tz: str | None) -> np.ndarray:
    bad_rows = ~np.isfinite(values).all(axis=1)  # (N,)
    if not bad_rows.any():
        return values
    series = np.unique(np.searchsorted(offsets, np.flatnonzero(bad_rows), side="right") - 1)
    if fill is None:
        r = int(np.argmax(bad_rows))
        col = cols[int(np.argmax(~np.isfinite(values[r])))]
        raise DataError(f"{int(bad_rows.sum())} row(s) with missing/NaN/inf values in series "
                        f"{_series_name(ids, series)} (first: {ids[series[0]]!r} column {col!r} at "
                        f"{pd.Timestamp(ts[r])}): clean them or pass fill='ffill'|'interpolate'|'zero'")
    out = values.copy()
    for s in series:
        a, b = offsets[s], offsets[s + 1]
        try:
            out[a:b] = fill_values(values[a:b], cols, ts[a:b], fill, tz)
        except DataError as exc:
            raise DataError(f"series {ids[s]!r}: {exc}") from None
    return out


def read_long(source: Source, *, id_col: str, time_col: str, value_cols: Sequence[str],
              fill: str | None = None) -> LongArrays:
    """Read ``id_col, time_col, *value_cols`` of a long frame into sorted per-series buffers."""
    check_fill(fill)
    df, zones = frame_of(source)
    if df.height == 0:
        raise DataError("no rows: the long frame is empty")
    require_columns(df, [id_col, time_col, *value_cols], "the long frame")
    if len(set(value_cols)) != len(value_cols) or {id_col, time_col} & set(value_cols):
        raise DataError(f"value columns {list(value_cols)} must be distinct and differ from the id/time "
                        f"columns: name each column in one role only")
    ids_s, ts, tz = ids_and_times(df, zones, id_col, time_col)
    values = numeric_matrix(df, list(value_cols))  # (N, K) float64
    codes, uniq = pd.factorize(ids_s.to_pandas(), sort=True)  # hashing, then only the S ids are sorted
    order = _sort_order(codes, ts)
    if order is not None:
        codes, ts, values = codes[order], ts[order], values[order]
    same = codes[1:] == codes[:-1]  # (N-1,) consecutive rows of one series
    ids = tuple(str(u) for u in uniq)
    _check_duplicates(ids, codes, ts, same)
    offsets = np.concatenate([[0], np.flatnonzero(~same) + 1, [len(ts)]]).astype(np.int64)
    offsets, ts, values, freq, step = _regularize(ids, offsets, ts, values, fill, tz)
    values = _fill(ids, offsets, ts, values, value_cols, fill, tz)
    return LongArrays(ids=ids, offsets=offsets, timestamps=ts, values=values, freq=freq, step_ns=step, tz=tz)
