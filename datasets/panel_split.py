"""Per-series time splits of a panel and per-series scaling fit on each series' own training rows.

Borders are local rows ``[a, b)`` per series, as ``split_borders`` gives for one wide series: val and
test start ``lookback`` rows before their first target row (context), so window k of a split has its
horizon inside the split's own rows.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tsmix.datasets.errors import DataError
from tsmix.datasets.scaling import Scaler

SPLITS = ("train", "val", "test")
Borders = Mapping[str, tuple[int, int]]
# Padded per-chunk matrices for the vectorized scaler fit stay below this many float64 cells (32 MiB).
_CHUNK_CELLS = 1 << 22


@dataclass(frozen=True)
class PanelSplit:
    """How each series is split by time; set exactly one of the three ways."""

    val_size: int | None = None  # steps of validation targets at the end of each series (before test)
    test_size: int | None = None  # steps of test targets at the end of each series
    val_cutoff: str | pd.Timestamp | None = None  # last training stamp: later rows are validation targets
    test_cutoff: str | pd.Timestamp | None = None  # last validation stamp: later rows are test targets
    # Explicit local row borders {"train": (a, b), "val": ..., "test": ...} for every series, or
    # {series id: such a dict}; e.g. the LTSF borders of ``split_borders`` for a reshaped wide benchmark.
    borders: Mapping | None = None

    def mode(self) -> str:
        sizes = (self.val_size, self.test_size) != (None, None)
        cutoffs = (self.val_cutoff, self.test_cutoff) != (None, None)
        given = (("sizes", sizes), ("cutoffs", cutoffs), ("borders", self.borders is not None))
        modes = [m for m, on in given if on]
        if len(modes) != 1:
            raise DataError(f"split the panel one way: val_size+test_size, val_cutoff+test_cutoff or borders "
                            f"(got {modes or 'none'})")
        return modes[0]


def _sizes(split: PanelSplit, lengths: np.ndarray, lookback: int, horizon: int) -> np.ndarray:
    for name in ("val_size", "test_size"):
        v = getattr(split, name)
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < horizon:
            raise DataError(f"{name} must be an integer >= horizon ({horizon}) so the split holds a window, "
                            f"got {v!r}")
    test0 = lengths - split.test_size
    val0 = test0 - split.val_size
    return np.stack([np.zeros_like(lengths), val0, val0 - lookback, test0, test0 - lookback, lengths], axis=1)


def _cutoffs(split: PanelSplit, timestamps: np.ndarray, offsets: np.ndarray, lookback: int) -> np.ndarray:
    try:
        vc, tc = (pd.Timestamp(x).to_datetime64().astype("datetime64[ns]")
                  for x in (split.val_cutoff, split.test_cutoff))
    except (TypeError, ValueError) as exc:
        raise DataError(f"val_cutoff/test_cutoff must both be timestamps: {exc}") from None
    if not vc < tc:
        raise DataError(f"val_cutoff {split.val_cutoff} must come before test_cutoff {split.test_cutoff}")
    lengths = np.diff(offsets)
    # Rows at or before each cutoff, per series (each series' stamps are sorted).
    val0, test0 = (np.array([np.searchsorted(timestamps[offsets[s] : offsets[s + 1]], c, side="right")
                             for s in range(len(lengths))], dtype=np.int64) for c in (vc, tc))
    return np.stack([np.zeros_like(lengths), val0, val0 - lookback, test0, test0 - lookback, lengths], axis=1)


def _explicit(split: PanelSplit, ids: tuple[str, ...], lengths: np.ndarray) -> np.ndarray:
    b = split.borders
    per_series = not set(b) <= set(SPLITS)
    if not per_series and set(b) != set(SPLITS):
        raise DataError(f"borders need the keys {list(SPLITS)}, got {sorted(b)}")
    if per_series:
        missing = [s for s in ids if s not in b]
        if missing:
            raise DataError(f"borders has no entry for series {missing[:5]}: give borders for every series")
    out = np.zeros((len(ids), 6), dtype=np.int64)
    for i, s in enumerate(ids):
        d = b[s] if per_series else b
        try:
            out[i] = [v for k in SPLITS for v in d[k]]
        except (KeyError, TypeError, ValueError):
            raise DataError(f"borders of series {s!r} must map train/val/test to (start, end) rows, got {d!r}"
                            ) from None
        if not (0 <= out[i, ::2]).all() or not (out[i, 1::2] <= lengths[i]).all():
            raise DataError(f"borders {dict(d)} of series {s!r} fall outside its {lengths[i]} rows")
    return out


def resolve_borders(split: PanelSplit, ids: tuple[str, ...], timestamps: np.ndarray, offsets: np.ndarray,
                    lookback: int, horizon: int) -> np.ndarray:
    """(S, 6) int64 local rows: train a, b, val a, b, test a, b."""
    mode = split.mode()
    lengths = np.diff(offsets).astype(np.int64)
    if mode == "sizes":
        return _sizes(split, lengths, lookback, horizon)
    if mode == "cutoffs":
        return _cutoffs(split, timestamps, offsets, lookback)
    return _explicit(split, ids, lengths)


def window_counts(borders: np.ndarray, lookback: int, horizon: int) -> np.ndarray:
    """(S, 3) windows per series and split; <= 0 where a split cannot hold one (or starts before row 0)."""
    a, b = borders[:, 0::2], borders[:, 1::2]
    n = b - a - lookback - horizon + 1
    return np.where(a < 0, 0, n)


def short_series(ids: tuple[str, ...], borders: np.ndarray, lookback: int, horizon: int,
                 drop_short: bool) -> np.ndarray:
    """Indices of the series to keep; too-short ones are an error or, with ``drop_short``, a warning."""
    n = window_counts(borders, lookback, horizon)
    short = np.flatnonzero((n < 1).any(axis=1))
    if len(short) == 0:
        return np.arange(len(ids))
    names = [ids[i] for i in short]
    where = sorted({SPLITS[j] for i in short for j in np.flatnonzero(n[i] < 1)})
    listed = f"{names[:10]}{' ...' if len(names) > 10 else ''}"
    if not drop_short:
        raise DataError(f"{len(names)} series too short for one lookback {lookback} + horizon {horizon} "
                        f"window in the {'/'.join(where)} split: {listed}; shorten the windows or splits, or "
                        f"pass drop_short=True to skip them")
    if len(short) == len(ids):
        raise DataError(f"every series is too short for lookback {lookback} + horizon {horizon} windows in "
                        f"each split: shorten the windows or splits")
    warnings.warn(f"dropped {len(names)} series too short for lookback {lookback} + horizon {horizon} "
                  f"({'/'.join(where)} split): {listed}", stacklevel=3)
    return np.setdiff1d(np.arange(len(ids)), short)


def fit_per_series(values: np.ndarray, offsets: np.ndarray, lo: np.ndarray, hi: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Per-series StandardScaler stats of rows ``[lo, hi)`` (local) of ``values`` (N, K).

    Returns mean, scale (S, K) float64. Series of similar length are stacked as NaN-padded columns and
    fit by one ``Scaler`` per chunk (sklearn ignores NaN), so thousands of series need few fits and the
    statistics are sklearn's, bit for bit as the wide path's when the series have equal lengths.
    """
    S, K = len(lo), values.shape[1]
    mean, scale = np.zeros((S, K)), np.ones((S, K))
    if K == 0:
        return mean, scale
    n = (hi - lo).astype(np.int64)
    order = np.argsort(n, kind="stable")
    i = 0
    while i < S:
        cols = max(1, _CHUNK_CELLS // max(1, int(n[order[i:]].max()) * K))
        chunk = order[i : i + cols]
        m = int(n[chunk].max())
        pad = np.full((m, len(chunk), K), np.nan)  # (rows, series, K)
        for j, s in enumerate(chunk):
            a = int(offsets[s] + lo[s])
            pad[: n[s], j] = values[a : a + n[s]]
        sc = Scaler().fit(pad.reshape(m, len(chunk) * K))
        mean[chunk], scale[chunk] = sc.mean_.reshape(-1, K), sc.scale_.reshape(-1, K)
        i += len(chunk)
    return mean, scale


def apply_per_series(values: np.ndarray, lengths: np.ndarray, mean: np.ndarray, scale: np.ndarray
                     ) -> np.ndarray:
    """(N, K) float32 ``(values - mean[s]) / scale[s]`` row-wise, computed in float64 like ``Scaler``."""
    if values.shape[1] == 0:
        return np.ascontiguousarray(values, dtype=np.float32)
    m, sc = np.repeat(mean, lengths, axis=0), np.repeat(scale, lengths, axis=0)  # (N, K)
    return np.ascontiguousarray((values.astype(np.float64) - m) / sc, dtype=np.float32)
