"""Validation of values, timestamps and window arguments. Each failure is one DataError with a fix."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from tsmix.datasets.errors import DataError

FILLS = ("ffill", "interpolate", "zero")
FEATURES = ("M", "S", "MS")  # all->all, target->target, all->target
_FILL_HINT = "pass fill='ffill'|'interpolate'|'zero' (CLI: --fill)"


def check_fill(fill: str | None) -> None:
    if fill is not None and fill not in FILLS:
        raise DataError(f"unknown fill {fill!r}: use one of {', '.join(FILLS)} (None rejects missing values)")


def check_window_args(lookback: int, horizon: int, features: str) -> None:
    for name, v in (("lookback", lookback), ("horizon", horizon)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
            raise DataError(f"{name} must be a positive integer, got {v!r}: pass a whole number of steps "
                            f">= 1")
    if features not in FEATURES:
        raise DataError(f"unknown features mode {features!r}: use M (all->all), S (target->target) "
                        f"or MS (all->target)")


def check_split_sizes(borders: dict[str, tuple[int, int]], lookback: int, horizon: int) -> None:
    """Every split needs at least one (lookback + horizon) window."""
    need = lookback + horizon
    for split, (a, b) in borders.items():
        if b - a < need:
            raise DataError(
                f"the {split} split has {b - a} rows (rows {a}..{b}), fewer than lookback + horizon = "
                f"{lookback} + {horizon} = {need}: use a shorter lookback/horizon or a longer series"
            )


def _fmt(t: np.datetime64, tz: str | None = None) -> str:
    """A timestamp for messages: local time with its offset when zoned (``t`` is then a UTC instant)."""
    return str(pd.Timestamp(t) if tz is None else pd.Timestamp(t).tz_localize("UTC").tz_convert(tz))


def fill_values(values: np.ndarray, columns: Sequence[str], timestamps: np.ndarray,
                fill: str | None, tz: str | None = None) -> np.ndarray:
    """Reject NaN/inf (fill=None) or replace them per column. values: (T, C) float64, returned copied."""
    check_fill(fill)
    bad = ~np.isfinite(values)  # (T, C)
    if not bad.any():
        return values
    cols = [c for c, b in zip(columns, bad.any(axis=0)) if b]
    if fill is None:
        row = int(np.argmax(bad.any(axis=1)))
        raise DataError(
            f"{int(bad.sum())} missing/NaN/inf values in columns {cols[:5]}{' ...' if len(cols) > 5 else ''} "
            f"(first at row {row}, {_fmt(timestamps[row], tz)}): clean them or {_FILL_HINT}"
        )
    empty = [c for c, b in zip(columns, bad.all(axis=0)) if b]
    if empty and fill != "zero":
        raise DataError(f"columns {empty} have no finite value to fill from: drop them")
    out = values.copy()
    if fill == "zero":
        out[bad] = 0.0
        return out
    rows = np.arange(len(out))
    for j in np.flatnonzero(bad.any(axis=0)):
        ok = ~bad[:, j]
        if fill == "ffill":
            # Index of the last finite row at or before each row; leading gaps take the first finite value.
            last = np.maximum.accumulate(np.where(ok, rows, -1))
            last[last < 0] = np.flatnonzero(ok)[0]
            out[:, j] = out[last, j]
        else:  # linear in row index; constant beyond the ends
            out[:, j] = np.interp(rows, rows[ok], out[ok, j])
    return out


def _alias(step_ns: int) -> str:
    """A fixed step as a pandas offset alias: 3600e9 -> 'h', 900e9 -> '15min', 86400e9 -> 'D'."""
    for unit, ns in (("D", 86_400 * 10**9), ("h", 3600 * 10**9), ("min", 60 * 10**9), ("s", 10**9),
                     ("ms", 10**6), ("us", 10**3), ("ns", 1)):
        if step_ns % ns == 0:
            k = step_ns // ns
            return unit if k == 1 else f"{k}{unit}"
    raise AssertionError("unreachable")


def infer_freq(timestamps: np.ndarray, tz: str | None = None) -> str | None:
    """pandas' calendar-aware guess (MS, W-SUN, B, h, ...), or None when the steps are not regular.

    With ``tz`` the timestamps are UTC instants judged in that zone: daily data stays 'D' across DST.
    """
    if len(timestamps) < 3:
        return None
    idx = pd.DatetimeIndex(np.asarray(timestamps, dtype="datetime64[ns]"))
    if tz is not None:
        idx = idx.tz_localize("UTC").tz_convert(tz)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pandas 3 warns that infer_freq will return an offset
        try:
            f = pd.infer_freq(idx)
        except ValueError:  # duplicated or unsorted stamps: not regular
            return None
    if f is None:
        return None
    return f if isinstance(f, str) else f.freqstr


def check_timestamps(timestamps: np.ndarray, *, fill: str | None = None, allowed: Iterable[str] = (),
                     tz: str | None = None) -> tuple[np.ndarray, np.ndarray | None, str]:
    """Sorted, unique, regular timestamps. Returns (timestamps, source_rows, freq).

    ``source_rows`` is None when nothing was inserted; else, for each output row, the input row it
    comes from or -1 for a missing timestamp inserted (only with ``fill``) to be filled afterwards.
    ``allowed`` lists timestamps where a known irregularity is accepted as-is (benchmark files).
    ``tz``: the timestamps are UTC instants of a zoned series (messages and calendar rules use the zone);
    missing stamps are then inserted at a fixed step in absolute time.
    """
    ts = np.asarray(timestamps, dtype="datetime64[ns]")
    if len(ts) < 2:
        raise DataError(f"the series has {len(ts)} row(s): a time series needs at least 2 timestamps")
    ok_at = np.isin(ts[1:], np.array(list(allowed), dtype="datetime64[ns]"))  # (T-1,) diff i is known
    d = np.diff(ts.view(np.int64))  # (T-1,)
    back = np.flatnonzero((d < 0) & ~ok_at)
    if len(back):
        i = int(back[0])
        raise DataError(f"timestamps are not sorted: row {i + 1} ({_fmt(ts[i + 1], tz)}) comes after row {i} "
                        f"({_fmt(ts[i], tz)}): sort the data by its date column")
    dup = np.flatnonzero((d == 0) & ~ok_at)
    if len(dup):
        i = int(dup[0])
        raise DataError(f"{len(dup)} duplicated timestamp(s), first {_fmt(ts[i], tz)} at rows {i} and "
                        f"{i + 1}: drop or aggregate the duplicates "
                        f"(e.g. df.unique(subset='date', keep='first'))")
    freq = infer_freq(ts, tz)
    if freq is not None:
        return ts, None, freq
    steps, counts = np.unique(d[d > 0], return_counts=True)
    step = int(steps[np.argmax(counts)])  # the most common step is the sampling period
    odd = (d != step) & ~ok_at
    if not odd.any():
        return ts, None, _alias(step)
    if np.any(d[odd] % step != 0):
        others = sorted({_alias(int(x)) for x in d[odd]})[:3]
        raise DataError(f"irregular timestamps: most steps are {_alias(step)} but others are {others}: "
                        f"resample the data to one regular frequency")
    missing = int((d[odd] // step - 1).sum())
    first = int(np.flatnonzero(odd)[0])
    if fill is None:
        raise DataError(f"{missing} missing timestamp(s) in {int(odd.sum())} gap(s) of the {_alias(step)} "
                        f"grid, "
                        f"first after {_fmt(ts[first], tz)}: resample to a regular grid or {_FILL_HINT} to "
                        f"insert and fill them")
    # Insert the missing grid points; each input row i lands at i + (number of points missing before it).
    gaps = np.where(odd, d // step - 1, 0)  # (T-1,)
    pos = np.concatenate([[0], np.cumsum(gaps)]) + np.arange(len(ts))  # (T,)
    src = np.full(len(ts) + missing, -1, dtype=np.int64)
    src[pos] = np.arange(len(ts))
    new = ts[0] + np.zeros(len(src), dtype="timedelta64[ns]")
    new[pos] = ts
    holes = src < 0
    # A hole k rows after input row i sits at ts[i] + k * step.
    prev = np.maximum.accumulate(np.where(holes, -1, np.arange(len(src))))
    new[holes] = new[prev[holes]] + (np.flatnonzero(holes) - prev[holes]) * np.timedelta64(step, "ns")
    return new, src, _alias(step)
