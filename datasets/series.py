"""``load``: any source (benchmark name, file, frame) -> one validated :class:`Series`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl

from tsmix.datasets.dates import Dates, check_date_args, find_date_column, future_index, localize
from tsmix.datasets.errors import DataError
from tsmix.datasets.io import numeric_matrix, read_file, to_polars
from tsmix.datasets.lookup import resolve_path
from tsmix.datasets.specs import BENCHMARKS, BenchmarkSpec, benchmark_for_file, get_benchmark
from tsmix.datasets.validate import check_fill, check_timestamps, fill_values


@dataclass(frozen=True, eq=False)
class Series:
    name: str  # benchmark name, file stem, or "frame"
    values: np.ndarray  # (T, C) float32, columns in source order, date excluded
    timestamps: np.ndarray  # (T,) datetime64[ns], sorted, unique, regular; UTC instants when tz is set
    columns: tuple[str, ...]  # value column names, as in the source
    target: str  # forecast target (for features S/MS)
    freq: str  # pandas offset alias of the sampling step
    kind: str = "custom"  # border rule: "etth" | "ettm" | "custom"
    date_col: str = "date"  # name of the date column in the source (to write frames back alike)
    path: Path | None = None  # file read, None for frames
    tz: str | None = None  # the dates' zone ('+02:00', 'Europe/Berlin', 'UTC'); None: naive dates

    @property
    def index(self) -> pd.DatetimeIndex:
        """The timestamps as written: in zone ``tz`` when the source had one, else naive."""
        return localize(self.timestamps, self.tz)

    def future(self, horizon: int) -> pd.DatetimeIndex:
        """The ``horizon`` stamps after the last row at ``freq``, in the series' zone (what to forecast)."""
        return future_index(self.timestamps[-1], self.freq, horizon, self.tz)

    @property
    def n_rows(self) -> int:
        return int(self.values.shape[0])

    @property
    def n_channels(self) -> int:
        return int(self.values.shape[1])

    @property
    def target_idx(self) -> int:
        return self.columns.index(self.target)

    def to_pandas(self) -> pd.DataFrame:
        """The series as a pandas frame (date column first), e.g. to write predictions alongside it."""
        df = pd.DataFrame(self.values, columns=list(self.columns))
        df.insert(0, self.date_col, self.index)
        return df


def _source_frame(source, data_dir) -> tuple[pl.DataFrame, dict[str, str], str, Path | None,
                                              BenchmarkSpec | None]:
    """(frame, zones of pandas date columns, name, path, benchmark spec) of any source."""
    if not isinstance(source, (str, Path)):  # frames; anything else raises "unsupported source"
        df, zones = to_polars(source)
        return df, zones, "frame", None, None
    path = Path(source).expanduser()
    spec = get_benchmark(source, required=False) if isinstance(source, str) else None
    if not path.is_absolute() and not path.exists() and data_dir is not None:
        inside = Path(data_dir).expanduser() / path  # e.g. "ETT-small/ETTh1.csv" with --data-dir
        path = inside if inside.is_file() else path
    if path.is_file():
        spec = benchmark_for_file(path)
    elif spec is not None:
        path = resolve_path(spec.name, data_dir)
    elif path.exists():
        raise DataError(f"{path} is a folder: pass a .csv or .parquet file inside it")
    elif path.suffix or len(path.parts) > 1:
        where = "" if path.is_absolute() else f" (relative to {Path.cwd()})"
        raise DataError(f"file {str(source)!r} not found{where}: check the path")
    else:
        raise DataError(f"dataset {str(source)!r} not found: give a benchmark name "
                        f"({', '.join(BENCHMARKS)}) or the path of a .csv/.parquet file")
    return read_file(path), {}, (spec.name if spec else path.stem), path, spec


def load(source: str | Path | pd.DataFrame | pl.DataFrame, *, data_dir: str | Path | None = None,
         date_col: str | None = None, target: str | None = None, fill: str | None = None,
         columns: Sequence[str] | None = None, date_format: str | None = None,
         date_unit: str | None = None) -> Series:
    """Read and validate a dataset. Raises one :class:`DataError` naming the problem and its fix.

    ``target`` defaults to ``OT`` when present, else the last column. ``fill`` (None | "ffill" |
    "interpolate" | "zero") replaces NaN/inf and fills missing timestamps; None rejects them.
    ``columns`` selects value columns (default: every column but the date). ``date_format`` (strftime,
    e.g. "%m/%d/%Y") reads text dates exactly so; by default the format is inferred from the whole
    column. ``date_unit`` ("s" | "ms" | "us" | "ns") reads an integer date column as epoch times (UTC).
    """
    check_fill(fill)
    check_date_args(date_format, date_unit)
    df, zones, name, path, spec = _source_frame(source, data_dir)
    where = f" in {path}" if path else ""
    if df.height == 0:
        raise DataError(f"no rows{where}: the dataset is empty")
    dcol, dates = find_date_column(df, date_col, date_format=date_format, date_unit=date_unit)
    if dcol in zones:  # a zoned pandas column, carried as naive UTC
        dates = Dates(dates.values, zones[dcol], dates.format)
    ts, tz = dates.values, dates.tz
    if columns is None:
        cols = [c for c in df.columns if c != dcol]
    else:
        cols = list(columns)
        unknown = [c for c in cols if c not in df.columns or c == dcol]
        if unknown:
            choices = [c for c in df.columns if c != dcol]
            raise DataError(f"unknown value columns {unknown}: choose from {choices}")
    if len(set(cols)) != len(cols):
        raise DataError(f"duplicated value columns in {cols}: name each column once")
    values = numeric_matrix(df, cols)  # (T, C) float64
    ts, src, freq = check_timestamps(ts, fill=fill, allowed=spec.known_irregular if spec else (), tz=tz)
    if src is not None:  # missing timestamps inserted as NaN rows, filled below
        grown = np.full((len(src), values.shape[1]), np.nan)
        grown[src >= 0] = values
        values = grown
    values = fill_values(values, cols, ts, fill, tz)
    if target is None:
        target = "OT" if "OT" in cols else cols[-1]
    elif target not in cols:
        raise DataError(f"unknown target {target!r}: choose one of the value columns {cols}")
    with np.errstate(over="ignore"):
        v32 = values.astype(np.float32)
    if not np.isfinite(v32).all():
        raise DataError(f"values{where} overflow float32 (|x| > 3.4e38): rescale the data")
    return Series(name=name, values=v32, timestamps=ts, columns=tuple(cols), target=target,
                  freq=spec.freq if spec else freq, kind=spec.kind if spec else "custom",
                  date_col=dcol, path=path, tz=tz)
