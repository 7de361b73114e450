"""Reading: any CSV/parquet file or pandas/polars frame with a date column -> timestamps + float matrix.

Files are read with polars. Nothing is validated here beyond "is it a date" / "is it a number";
``validate.py`` checks values and timestamps.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl

from tsmix.datasets.errors import DataError

DATE_NAMES = ("date", "time", "timestamp", "datetime", "ds")  # matched case-insensitively
# Cells read as missing (they become NaN and then meet the ``fill`` policy).
NULL_TOKENS = ["", "NA", "N/A", "n/a", "#N/A", "NaN", "nan", "NAN", "null", "NULL", "None", "none"]
CSV_SUFFIXES = (".csv", ".txt", ".tsv")
PARQUET_SUFFIXES = (".parquet", ".pq")


def read_file(path: str | Path) -> pl.DataFrame:
    """Read a CSV (any line ending; undecodable bytes replaced, not fatal) or parquet file."""
    path = Path(path)
    suffix = path.suffix.lower()
    try:
        if suffix in CSV_SUFFIXES:
            sep = "\t" if suffix == ".tsv" else ","
            kw = dict(separator=sep, null_values=NULL_TOKENS, encoding="utf8-lossy")
            try:  # schema from the first rows: fast
                return pl.read_csv(path, **kw)
            except pl.exceptions.ComputeError:
                # A column that looked integer early holds floats (or text) later: infer from every row.
                return pl.read_csv(path, infer_schema_length=None, **kw)
        if suffix in PARQUET_SUFFIXES:
            return pl.read_parquet(path)
    except (pl.exceptions.PolarsError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(f"cannot read {path}: {first}; check that it is a valid {suffix[1:]} file") from None
    raise DataError(f"unsupported file type {path.name!r}: use a .csv or .parquet file (or pass a DataFrame)")


def to_polars(frame: pd.DataFrame | pl.DataFrame) -> pl.DataFrame:
    """A pandas frame becomes polars; a DatetimeIndex (no date column) becomes a ``date`` column."""
    if isinstance(frame, pl.DataFrame):
        return frame
    if not isinstance(frame, pd.DataFrame):
        raise DataError(f"unsupported data source of type {type(frame).__name__}: pass a benchmark name, "
                        f"a .csv/.parquet path, or a pandas/polars DataFrame")
    df = frame
    if isinstance(df.index, pd.DatetimeIndex):
        df = df.reset_index(names=df.index.name or "date")
    df = df.rename(columns=str)
    for c in df.columns:  # tz-aware -> naive UTC here, as for polars frames and files
        if isinstance(df[c].dtype, pd.DatetimeTZDtype):
            df[c] = df[c].dt.tz_convert("UTC").dt.tz_localize(None)
    if df.columns.duplicated().any():
        dups = sorted(set(df.columns[df.columns.duplicated()]))
        raise DataError(f"duplicated column names {dups}: rename them so every column is unique")
    try:
        return pl.from_pandas(df)
    except Exception as exc:  # pyarrow conversion errors come in many types
        raise DataError(f"cannot convert the pandas frame: {exc}; convert object columns to numbers"
                        ) from None


def parse_dates(col: pl.Series) -> np.ndarray | None:
    """Timestamps as naive datetime64[ns] (timezones -> UTC), or None when the column is not dates."""
    dtype = col.dtype
    if dtype == pl.Date:
        col = col.cast(pl.Datetime("ns"))
    elif isinstance(dtype, pl.Datetime):
        if dtype.time_zone is not None:
            col = col.dt.convert_time_zone("UTC").dt.replace_time_zone(None)
        col = col.cast(pl.Datetime("ns"))
    elif dtype == pl.String:
        col = col.str.strip_chars()
        try:  # polars infers ISO-like and day-first dotted formats
            col = col.str.to_datetime(time_unit="ns", strict=True)
            if col.dtype.time_zone is not None:
                col = col.dt.convert_time_zone("UTC").dt.replace_time_zone(None)
        except pl.exceptions.PolarsError:
            return _parse_dates_pandas(col)
    elif dtype.is_integer():  # only reached for a named date_col: e.g. 20200101
        return _parse_dates_pandas(col.cast(pl.String))
    else:
        return None
    if col.null_count() > 0:
        return None
    return col.to_numpy().astype("datetime64[ns]")


def _parse_dates_pandas(col: pl.Series) -> np.ndarray | None:
    # pandas guesses the format from the first value ('1990/1/1 0:00', '20200101', 'Jan 1 2020').
    values = col.to_numpy()
    if col.null_count() > 0 or len(values) == 0:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ts = pd.to_datetime(pd.Series(values), utc=True)
    except (ValueError, TypeError, OverflowError):
        return None
    return ts.dt.tz_localize(None).to_numpy().astype("datetime64[ns]")


def _date_error(df: pl.DataFrame, c: str) -> DataError:
    col = df[c]
    if col.null_count():
        row = int(col.is_null().arg_true()[0])
        return DataError(f"date column {c!r} has {col.null_count()} missing value(s), first at row {row}: "
                         f"drop those rows or fill in their dates")
    example = col.head(1).to_list()[0]
    if col.dtype == pl.String:
        try:  # the first value that does not fit the format inferred from the first rows
            parsed = col.str.strip_chars().str.to_datetime(time_unit="ns", strict=False)
            example = col.filter(parsed.is_null()).head(1).to_list()[0] if parsed.null_count() else example
        except pl.exceptions.PolarsError:
            pass
    return DataError(f"date column {c!r} does not parse as dates (e.g. {example!r}): use one format such as "
                     f"ISO 8601 (2020-01-31 14:00), or parse it yourself into a datetime column")


def find_date_column(df: pl.DataFrame, date_col: str | None) -> tuple[str, np.ndarray]:
    """The named ``date_col``, else one named date/time/..., else the first temporal or date-string one."""
    if date_col is not None:
        if date_col not in df.columns:
            raise DataError(f"date column {date_col!r} not found: columns are {list(df.columns)}")
        ts = parse_dates(df[date_col])
        if ts is None:
            raise _date_error(df, date_col)
        return date_col, ts
    temporal = [c for c in df.columns if df[c].dtype == pl.Date or isinstance(df[c].dtype, pl.Datetime)]
    strings = [c for c in df.columns if df[c].dtype == pl.String]
    named = [c for c in temporal + strings if c.strip().lower() in DATE_NAMES]
    for c in dict.fromkeys(named + temporal + strings):  # ordered, unique
        ts = parse_dates(df[c])
        if ts is not None:
            return c, ts
    if named:  # a column called "date" that does not parse: say why
        raise _date_error(df, named[0])
    raise DataError(f"no date column found among {list(df.columns)}: add one (ISO 8601 dates) or name it "
                    f"with date_col= / --date-col")


def numeric_matrix(df: pl.DataFrame, columns: list[str]) -> np.ndarray:
    """(T, C) float64 of ``columns``; number-like strings ('inf', '1e3') convert, other text is an error."""
    out, bad = [], {}
    for c in columns:
        s = df[c]
        if s.dtype == pl.Boolean or s.dtype.is_numeric():
            out.append(s.cast(pl.Float64))
        elif s.dtype in (pl.String, pl.Null):
            try:
                out.append(s.str.strip_chars().cast(pl.Float64, strict=True) if s.dtype == pl.String
                           else s.cast(pl.Float64))
            except pl.exceptions.PolarsError:
                parsed = s.str.strip_chars().cast(pl.Float64, strict=False)
                bad[c] = s.filter(parsed.is_null() & s.is_not_null()).head(1).to_list()[0]
        else:
            bad[c] = str(s.dtype)
    if bad:
        shown = ", ".join(f"{c!r} (e.g. {v!r})" for c, v in list(bad.items())[:5])
        raise DataError(f"non-numeric columns {shown}: drop them or encode them as numbers "
                        f"(or select value columns with columns=[...])")
    if not out:
        raise DataError("no value columns besides the date column: a dataset needs a numeric column")
    # Nulls (empty cells, 'NA') become NaN so one check covers them with NaN/inf.
    return np.stack([s.fill_null(float("nan")).to_numpy() for s in out], axis=1).astype(np.float64)
