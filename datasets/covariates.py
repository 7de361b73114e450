"""Covariates of a panel: static attributes (one row per series) and calendar features.

Static numeric columns are standardized across series; categorical ones (text, or named in
``categorical=``) become integer codes over a stored, sorted vocabulary so that a model can embed them
and a saved run encodes prediction inputs exactly as in training.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import polars as pl

from tsmix.datasets.dates import localize
from tsmix.datasets.errors import DataError
from tsmix.datasets.io import to_polars
from tsmix.datasets.scaling import Scaler
from tsmix.datasets.timefeatures import feature_names, time_features


@dataclass(frozen=True, eq=False)
class StaticTable:
    """Raw static attributes aligned to a panel's series order."""

    numeric: tuple[str, ...]  # numeric column names
    categorical: tuple[str, ...]  # categorical column names
    num: np.ndarray  # (S, Cn) float64 raw values
    cat: np.ndarray  # (S, Ck) str values

    def take(self, idx: np.ndarray) -> StaticTable:
        return StaticTable(self.numeric, self.categorical, self.num[idx], self.cat[idx])


def read_static(frame: pd.DataFrame | pl.DataFrame, id_col: str, ids: Sequence[str],
                categorical: Sequence[str] | None = None) -> StaticTable:
    """Rows of ``frame`` for ``ids`` (every one must be there); all columns but ``id_col`` are attributes."""
    if not isinstance(frame, (pd.DataFrame, pl.DataFrame)):
        raise DataError(f"static_df must be a pandas/polars DataFrame, got {type(frame).__name__}")
    df, _ = to_polars(frame)
    if id_col not in df.columns:
        raise DataError(f"static_df has no id column {id_col!r}: columns are {list(df.columns)}")
    keys = df[id_col].cast(pl.String)
    if keys.null_count() or keys.is_duplicated().any():
        dups = keys.filter(keys.is_duplicated()).unique().sort().head(3).to_list()
        raise DataError(f"static_df needs exactly one row per series: ids {dups} are repeated or missing; "
                        f"deduplicate it")
    pos = {k: i for i, k in enumerate(keys.to_list())}
    missing = [s for s in ids if s not in pos]
    if missing:
        raise DataError(f"static_df has no row for series {missing[:5]}{' ...' if len(missing) > 5 else ''}"
                        f" ({len(missing)} missing): add a row per series")
    df = df[[pos[s] for s in ids]]
    cols = [c for c in df.columns if c != id_col]
    forced = list(categorical or [])
    unknown = [c for c in forced if c not in cols]
    if unknown:
        raise DataError(f"categorical static columns {unknown} are not in static_df: choose from {cols}")
    num_cols = [c for c in cols
                if c not in forced and (df[c].dtype.is_numeric() or df[c].dtype == pl.Boolean)]
    cat_cols = [c for c in cols if c not in num_cols]
    nulls = [c for c in cols if df[c].null_count()]
    if nulls:
        raise DataError(f"static columns {nulls} have missing values: fill them (or add a category)")
    num = np.stack([df[c].cast(pl.Float64).to_numpy() for c in num_cols], axis=1) if num_cols else \
        np.zeros((len(ids), 0))
    if not np.isfinite(num).all():
        raise DataError(f"static numeric columns {num_cols} hold NaN/inf: clean them")
    cat = np.stack([df[c].cast(pl.String).to_numpy().astype(str) for c in cat_cols], axis=1) if cat_cols \
        else np.zeros((len(ids), 0), dtype=str)
    return StaticTable(tuple(num_cols), tuple(cat_cols), num, cat)


@dataclass(frozen=True, eq=False)
class StaticEncoder:
    """Fitted static encoding: numeric standardization + category vocabularies."""

    numeric: tuple[str, ...]  # numeric columns, in the order of the encoded (S, Cn) array
    categorical: tuple[str, ...]  # categorical columns, in the order of the codes (S, Ck)
    mean: np.ndarray  # (Cn,) float64 across training series
    scale: np.ndarray  # (Cn,) float64, 1 for constant columns (sklearn's rule)
    vocab: tuple[tuple[str, ...], ...]  # per categorical column, values in code order

    @classmethod
    def fit(cls, table: StaticTable) -> StaticEncoder:
        if table.num.shape[1]:
            sc = Scaler().fit(table.num)
            mean, scale = sc.mean_, sc.scale_
        else:
            mean, scale = np.zeros(0), np.ones(0)
        vocab = tuple(tuple(sorted(set(table.cat[:, j].tolist()))) for j in range(len(table.categorical)))
        return cls(table.numeric, table.categorical, mean, scale, vocab)

    @property
    def cardinalities(self) -> tuple[int, ...]:
        """Vocabulary size per categorical column (embedding table sizes)."""
        return tuple(len(v) for v in self.vocab)

    def transform(self, table: StaticTable, ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(S, Cn) float32 standardized numerics and (S, Ck) int64 codes; unseen category -> DataError."""
        if table.numeric != self.numeric or table.categorical != self.categorical:
            raise DataError(f"static columns {list(table.numeric + table.categorical)} differ from the "
                            f"training ones {list(self.numeric + self.categorical)}: pass the same columns")
        num = ((table.num - self.mean) / self.scale).astype(np.float32)
        codes = np.zeros(table.cat.shape, dtype=np.int64)
        for j, (col, voc) in enumerate(zip(self.categorical, self.vocab)):
            known = np.asarray(voc, dtype=str)
            pos = np.searchsorted(known, table.cat[:, j])
            pos = np.minimum(pos, len(known) - 1)
            bad = np.flatnonzero(known[pos] != table.cat[:, j])
            if len(bad):
                i = int(bad[0])
                value = str(table.cat[i, j])
                raise DataError(f"static column {col!r} of series {ids[i]!r} has category {value!r} unseen "
                                f"in training (known: {list(voc)[:10]}): map it to a known one or retrain")
            codes[:, j] = pos
        return num, codes

    def to_dict(self) -> dict:
        return {"numeric": list(self.numeric), "categorical": list(self.categorical),
                "mean": self.mean.tolist(), "scale": self.scale.tolist(),
                "vocab": [list(v) for v in self.vocab]}

    @classmethod
    def from_dict(cls, d: dict) -> StaticEncoder:
        return cls(tuple(d["numeric"]), tuple(d["categorical"]), np.asarray(d["mean"], dtype=np.float64),
                   np.asarray(d["scale"], dtype=np.float64), tuple(tuple(v) for v in d["vocab"]))


def calendar(timestamps: np.ndarray, offsets: np.ndarray, names: tuple[str, ...],
             tz: str | None = None) -> np.ndarray:
    """(N, K) float32 calendar features ``names`` of every row of a buffer of series (local time in ``tz``).

    Computed once per distinct timestamp when the distinct stamps resolve to the same features
    (series on one grid: the usual case); else per series, each being one regular grid.
    """
    ts = np.asarray(timestamps, dtype="datetime64[ns]")
    uniq, inv = np.unique(ts, return_inverse=True)
    if len(uniq) >= 2 and feature_names(uniq) == names:
        return time_features(localize(uniq, tz))[0][inv]
    out = np.empty((len(ts), len(names)), dtype=np.float32)
    for s in range(len(offsets) - 1):
        a, b = int(offsets[s]), int(offsets[s + 1])
        if b - a < 2 or feature_names(ts[a:b]) != names:
            raise DataError(f"cannot compute calendar features {names} for a {b - a}-row series: it needs "
                            f"at least 2 rows on the panel's frequency")
        out[a:b] = time_features(localize(ts[a:b], tz))[0]
    return out
