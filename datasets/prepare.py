"""``prepare``: source -> validated series -> standard borders -> train-fit scaler -> window sets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl
import torch

from tsmix.datasets.scaling import Scaler
from tsmix.datasets.series import Series, load
from tsmix.datasets.specs import split_borders
from tsmix.datasets.timefeatures import time_features
from tsmix.datasets.validate import check_fill, check_split_sizes, check_window_args
from tsmix.datasets.windows import WindowSet

SPLITS = ("train", "val", "test")


@dataclass
class Prepared:
    series: Series  # raw values (original units) and timestamps
    scaler: Scaler  # fit on series.values[train rows]
    data: torch.Tensor  # (T, C) float32, scaled; every WindowSet is a view of it
    borders: dict[str, tuple[int, int]]  # row ranges incl. the lookback context of val/test
    train: WindowSet
    val: WindowSet
    test: WindowSet
    lookback: int
    horizon: int
    features: str  # "M" | "S" | "MS"
    target_idx: int  # index of series.target in series.columns
    marks: torch.Tensor | None = None  # (T, K) calendar features when calendar=True
    mark_names: tuple[str, ...] = field(default=())

    @property
    def columns(self) -> tuple[str, ...]:
        return self.series.columns

    @property
    def x_channels(self) -> int:
        return self.train.x_channels

    @property
    def y_channels(self) -> int:
        return self.train.y_channels

    @property
    def y_columns(self) -> tuple[str, ...]:
        """Names of the predicted channels (all for M, the target for S/MS)."""
        return self.columns if self.features == "M" else (self.series.target,)

    def split(self, name: str) -> WindowSet:
        if name not in SPLITS:
            from tsmix.datasets.errors import DataError

            raise DataError(f"unknown split {name!r}: use one of {', '.join(SPLITS)}")
        return getattr(self, name)

    def summary(self) -> dict:
        """JSON-ready description (the ``tsmix data`` output)."""
        s = self.series
        out = {
            "name": s.name, "path": str(s.path) if s.path else None, "rows": s.n_rows,
            "channels": s.n_channels, "columns": list(s.columns), "target": s.target, "freq": s.freq,
            "kind": s.kind, "start": str(s.index[0]), "end": str(s.index[-1]), "tz": s.tz,
            "lookback": self.lookback, "horizon": self.horizon,
            "features": self.features, "x_channels": self.x_channels, "y_channels": self.y_channels,
            "calendar": list(self.mark_names),
            "borders": {k: list(v) for k, v in self.borders.items()},
        }
        out.update({f"{k}_windows": len(self.split(k)) for k in SPLITS})
        return out


def prepare(source: str | Path | pd.DataFrame | pl.DataFrame, lookback: int, horizon: int,
            features: str = "M", *, data_dir: str | Path | None = None, date_col: str | None = None,
            target: str | None = None, fill: str | None = None, calendar: bool = False,
            columns: Sequence[str] | None = None, date_format: str | None = None,
            date_unit: str | None = None) -> Prepared:
    """Everything a forecaster needs, validated up front; one :class:`DataError` otherwise.

    ``calendar=True`` appends calendar features (see ``timefeatures.py``) to the inputs x only, in the
    series' local time when its dates carry a zone. The other keywords go to :func:`load`.
    """
    check_window_args(lookback, horizon, features)  # cheap checks before reading anything
    check_fill(fill)
    series = load(source, data_dir=data_dir, date_col=date_col, target=target, fill=fill, columns=columns,
                  date_format=date_format, date_unit=date_unit)
    borders = split_borders(series.n_rows, lookback, series.kind)
    check_split_sizes(borders, lookback, horizon)
    a, b = borders["train"]
    scaler = Scaler().fit(series.values[a:b])  # train rows only: no val/test statistics leak
    data = torch.from_numpy(np.ascontiguousarray(scaler.transform(series.values), dtype=np.float32))
    marks, names = None, ()
    if calendar:
        m, names = time_features(series.index)
        marks = torch.from_numpy(m)
    t = series.target_idx
    sets = {k: WindowSet(data, lookback, horizon, features, t, *borders[k], marks=marks) for k in SPLITS}
    return Prepared(series=series, scaler=scaler, data=data, borders=borders, lookback=lookback,
                    horizon=horizon, features=features, target_idx=t, marks=marks, mark_names=names, **sets)
