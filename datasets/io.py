"""Reading: any CSV/parquet file or pandas/polars frame -> polars frame, value columns -> float matrix.

Files are read with polars after sniffing the separator (, ; tab |) and decimal commas from the first
lines. Dates are parsed in ``dates.py``; ``validate.py`` checks values and timestamps.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl

from tsmix.datasets.dates import tz_name
from tsmix.datasets.errors import DataError

# Cells read as missing (they become NaN and then meet the ``fill`` policy).
NULL_TOKENS = ["", "NA", "N/A", "n/a", "#N/A", "NaN", "nan", "NAN", "null", "NULL", "None", "none"]
CSV_SUFFIXES = (".csv", ".txt", ".tsv")
PARQUET_SUFFIXES = (".parquet", ".pq")


SEPARATORS = (",", ";", "\t", "|")  # tried in this order; the first that splits every line alike wins
_SNIFF_BYTES = 1 << 16  # the head read to find the separator and check the header
# A number written with a decimal comma (1,5 or -0,25e3); only read so when ',' is not the separator.
_DECIMAL_COMMA = re.compile(r"^[-+]?\d*,\d+([eE][-+]?\d+)?$")


def sniff(path: Path) -> tuple[str, list[str]]:
    """(separator, header names) from the file's first lines; the fallback is ',' (tab for .tsv)."""
    with open(path, "rb") as fh:
        head = fh.read(_SNIFF_BYTES)
    lines = head.decode("utf-8-sig", errors="replace").splitlines()
    if len(head) == _SNIFF_BYTES and len(lines) > 1:
        lines = lines[:-1]  # the last line may be cut
    lines = [ln for ln in lines if ln.strip()][:50]
    default = "\t" if path.suffix.lower() == ".tsv" else ","
    if not lines:
        return default, []
    best, width = default, 1
    for sep in dict.fromkeys((default, *SEPARATORS)):
        widths = {len(row) for row in csv.reader(lines, delimiter=sep)}
        if len(widths) == 1 and (w := widths.pop()) > width:
            best, width = sep, w
    return best, next(csv.reader(lines[:1], delimiter=best))


def _check_header(path: Path, sep: str, header: list[str]) -> None:
    names = [h.strip() for h in header]
    dups = sorted({h for h in names if names.count(h) > 1})
    if dups:
        raise DataError(f"duplicated column names {dups} in {path}: rename them so every column is unique")
    if len(header) == 1 and any(c in header[0] for c in SEPARATORS if c != sep):
        raise DataError(f"{path} splits into one column {header[0][:60]!r}: no separator among , ; tab | "
                        f"splits its lines alike: check the file (quotes, ragged rows)")


def _decimal_commas(df: pl.DataFrame) -> pl.DataFrame:
    """Text columns whose every value is a decimal-comma number become floats (1,5 -> 1.5)."""
    fixed = []
    for c in df.columns:
        s = df[c]
        if s.dtype == pl.String and s.null_count() < len(s):
            text = s.str.strip_chars()
            if text.drop_nulls().str.contains(_DECIMAL_COMMA.pattern).all():
                fixed.append(text.str.replace(",", ".", literal=True).cast(pl.Float64).alias(c))
    return df.with_columns(fixed) if fixed else df


def read_file(path: str | Path) -> pl.DataFrame:
    """Read a CSV (any line ending; undecodable bytes replaced, not fatal) or parquet file."""
    path = Path(path)
    suffix = path.suffix.lower()
    try:
        if suffix in CSV_SUFFIXES:
            sep, header = sniff(path)
            _check_header(path, sep, header)
            kw = dict(separator=sep, null_values=NULL_TOKENS, encoding="utf8-lossy")
            try:  # schema from the first rows: fast
                df = pl.read_csv(path, **kw)
            except pl.exceptions.ComputeError:
                # A column that looked integer early holds floats (or text) later: infer from every row.
                df = pl.read_csv(path, infer_schema_length=None, **kw)
            return _decimal_commas(df) if sep != "," else df
        if suffix in PARQUET_SUFFIXES:
            return pl.read_parquet(path)
    except (pl.exceptions.PolarsError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(f"cannot read {path}: {first}; check that it is a valid {suffix[1:]} file") from None
    raise DataError(f"unsupported file type {path.name!r}: use a .csv or .parquet file (or pass a DataFrame)")


def to_polars(frame: pd.DataFrame | pl.DataFrame) -> tuple[pl.DataFrame, dict[str, str]]:
    """A pandas frame becomes polars; a DatetimeIndex (no date column) becomes a ``date`` column.

    Zoned pandas columns travel as naive UTC (polars rejects offsets such as +05:30); the second
    value maps each of them to its zone so the date column keeps it.
    """
    if isinstance(frame, pl.DataFrame):
        return frame, {}
    if not isinstance(frame, pd.DataFrame):
        raise DataError(f"unsupported data source of type {type(frame).__name__}: pass a benchmark name, "
                        f"a .csv/.parquet path, or a pandas/polars DataFrame")
    df = frame
    if isinstance(df.index, pd.DatetimeIndex):
        df = df.reset_index(names=df.index.name or "date")
    if df.columns.duplicated().any():
        dups = sorted({str(c) for c in df.columns[df.columns.duplicated()]})
        raise DataError(f"duplicated column names {dups}: rename them so every column is unique")
    df = df.rename(columns=str)
    if df.columns.duplicated().any():  # e.g. 1 and "1"
        dups = sorted(set(df.columns[df.columns.duplicated()]))
        raise DataError(f"column names {dups} collide as text: rename them so every column is unique")
    zones = {}
    for c in df.columns:
        if isinstance(df[c].dtype, pd.DatetimeTZDtype):
            zones[c] = tz_name(df[c].dt.tz)
            df[c] = df[c].dt.tz_convert("UTC").dt.tz_localize(None)
    try:
        return pl.from_pandas(df), zones
    except Exception as exc:  # pyarrow conversion errors come in many types
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(f"cannot convert the pandas frame: {first}; convert object columns to numbers"
                        ) from None


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
        if any(isinstance(v, str) and _DECIMAL_COMMA.match(v.strip()) for v in bad.values()):
            raise DataError(f"non-numeric columns {shown} look like decimal commas in a comma-separated "
                            f"file: write decimal points, or separate the fields with ';'")
        raise DataError(f"non-numeric columns {shown}: drop them or encode them as numbers "
                        f"(or select value columns with columns=[...])")
    if not out:
        raise DataError("no value columns besides the date column: a dataset needs a numeric column")
    # Nulls (empty cells, 'NA') become NaN so one check covers them with NaN/inf.
    return np.stack([s.fill_null(float("nan")).to_numpy() for s in out], axis=1).astype(np.float64)
