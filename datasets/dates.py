"""Date columns -> timestamps: format inference over the whole column, timezones, epoch integers.

A string column is read with every plausible format of its first value (day-first and month-first
for ``01/02/2000``); when both read every row, the reading that gives a regular series wins and a
truly ambiguous column is an error asking for ``date_format``. Zoned dates keep their zone: the
instants are returned in UTC together with the zone's name, so order and steps stay exact across
DST while calendar features and forecasts can be expressed in local time.
"""

from __future__ import annotations

import datetime as _dt
import re
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
import polars as pl
from pandas.tseries.api import guess_datetime_format

from tsmix.datasets.errors import DataError
from tsmix.datasets.validate import infer_freq

DATE_NAMES = ("date", "time", "timestamp", "datetime", "ds")  # matched case-insensitively
DATE_UNITS = ("s", "ms", "us", "ns")  # epoch units accepted by date_unit=
_HINT = "pass date_format= (CLI: --date-format), e.g. '%m/%d/%Y'"


@dataclass(frozen=True, eq=False)
class Dates:
    values: np.ndarray  # (T,) datetime64[ns]: UTC instants when tz is set, else the wall times as written
    tz: str | None  # the source's zone ('+02:00', 'Europe/Berlin', 'UTC'); None for naive dates
    format: str | None = None  # the strftime format a string column was read with (None: not a string)


def tz_name(tz: _dt.tzinfo | str | None) -> str | None:
    """A zone as a string pandas/polars accept back: fixed offsets as '+02:00', 'UTC', or the IANA name."""
    if tz is None or isinstance(tz, str):
        return tz
    if isinstance(tz, _dt.timezone):
        off = tz.utcoffset(None)
        if not off:
            return "UTC"
        sign, mins = ("-", -off) if off < _dt.timedelta(0) else ("+", off)
        h, m = divmod(int(mins.total_seconds()) // 60, 60)
        return f"{sign}{h:02d}:{m:02d}"
    return str(tz)


def localize(timestamps: np.ndarray, tz: str | None) -> pd.DatetimeIndex:
    """(T,) datetime64[ns] as a DatetimeIndex: in zone ``tz`` when set (input = UTC instants), else naive."""
    idx = pd.DatetimeIndex(np.asarray(timestamps, dtype="datetime64[ns]"))
    return idx if tz is None else idx.tz_localize("UTC").tz_convert(tz)


def future_index(last: np.datetime64 | pd.Timestamp, freq: str, horizon: int,
                 tz: str | None = None) -> pd.DatetimeIndex:
    """The ``horizon`` stamps after ``last`` at ``freq``, in zone ``tz`` (``last``: naive UTC if tz set)."""
    start = pd.Timestamp(last)
    if tz is not None:
        start = start.tz_localize("UTC").tz_convert(tz) if start.tz is None else start.tz_convert(tz)
    return pd.date_range(start=start, periods=horizon + 1, freq=freq)[1:]


def _from_index(idx: pd.DatetimeIndex | pd.Series, fmt: str | None = None) -> Dates:
    idx = pd.DatetimeIndex(idx)
    try:
        if idx.tz is None:
            return Dates(idx.as_unit("ns").to_numpy(), None, fmt)
        utc = idx.tz_convert("UTC").tz_localize(None).as_unit("ns")
        return Dates(utc.to_numpy(), tz_name(idx.tz), fmt)
    except (OverflowError, ValueError) as exc:  # OutOfBoundsDatetime is a ValueError
        raise DataError(f"dates outside the supported range 1677-09-22 .. 2262-04-11 ({exc}): "
                        "check the date column") from None


def _read_with(values: pd.Series, fmt: str) -> pd.Series | None:
    """``values`` parsed with exactly ``fmt`` (None when a row does not match); mixed offsets -> UTC."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return pd.to_datetime(values, format=fmt)
        except ValueError as exc:
            if "Mixed timezones" not in str(exc) and "mixed time zones" not in str(exc).lower():
                return None
        try:  # one column, several UTC offsets (e.g. DST written as +01:00/+02:00): keep the instants
            return pd.to_datetime(values, format=fmt, utc=True)
        except ValueError:
            return None


def _candidates(first: str) -> list[str]:
    """Formats the first value may be written in. Year-day-month and dotted month-first are not in use."""
    out = []
    for dayfirst in (False, True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fmt = guess_datetime_format(first, dayfirst=dayfirst)
        if fmt is None or fmt in out or "%m.%d" in fmt:
            continue
        pos = [fmt.find(d) for d in ("%Y", "%d", "%m")]
        if min(pos) >= 0 and pos[0] < pos[1] < pos[2]:  # year-day-month
            continue
        out.append(fmt)
    return out


def _fit(d: Dates) -> tuple[bool, bool, float]:
    """(strictly increasing, regular frequency, coverage of the modal-step grid) of one reading."""
    i8 = d.values.view(np.int64)
    steps = np.diff(i8)
    ordered = len(steps) > 0 and bool((steps > 0).all())
    regular = ordered and infer_freq(d.values, d.tz) is not None
    pos = steps[steps > 0]
    if not len(pos):
        return ordered, regular, 0.0
    span = float(i8.max() - i8.min()) / float(np.median(pos)) + 1.0
    return ordered, regular, len(i8) / span


def _choose(name: str, first: str, readings: dict[str, Dates]) -> Dates:
    """The reading with a regular frequency (or clearly better grid coverage); a tie is an error."""
    fits = {fmt: _fit(d) for fmt, d in readings.items()}
    ranked = sorted(fits, key=lambda f: fits[f][:2], reverse=True)
    best, second = ranked[0], ranked[1]
    a, b = fits[best], fits[second]
    if a[:2] > b[:2] or (not a[1] and a[2] >= 2 * b[2] > 0):
        return readings[best]
    if not a[1] and b[2] >= 2 * a[2] > 0:
        return readings[second]
    shown = " or ".join(f"{f!r}" for f in readings)
    raise DataError(f"date column {name!r} is ambiguous: every value (e.g. {first!r}) reads as {shown} and "
                    f"neither gives a clearly more regular series: {_HINT}")


def _parse_strings(col: pl.Series, name: str, date_format: str | None, quiet: bool = False) -> Dates | None:
    col = col.str.strip_chars()
    if col.null_count() > 0 or col.len() == 0:
        return None
    values = col.to_pandas()
    if date_format is not None:
        parsed = _read_with(values, date_format)
        if parsed is None and quiet:
            return None
        if parsed is None:
            bad = _first_mismatch(values, date_format)
            raise DataError(f"date column {name!r} does not match date_format {date_format!r} "
                            f"(e.g. {bad!r}): fix the format or the dates")
        return _from_index(parsed, date_format)
    first = str(values.iloc[0])
    readings = {}
    for fmt in _candidates(first):
        parsed = _read_with(values, fmt)
        if parsed is not None:
            readings[fmt] = _from_index(parsed, fmt)
    if len(readings) == 1:
        return next(iter(readings.values()))
    if len(readings) > 1:
        return _choose(name, first, readings)
    try:  # formats pandas does not guess but polars infers
        out = col.str.to_datetime(time_unit="ns", strict=True)
    except pl.exceptions.PolarsError:
        return None
    return _from_index(out.to_pandas()) if out.null_count() == 0 else None


def _first_mismatch(values: pd.Series, fmt: str) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parsed = pd.to_datetime(values, format=fmt, errors="coerce", utc=True)
    bad = values[parsed.isna()]
    return str(bad.iloc[0]) if len(bad) else str(values.iloc[0])


def _parse_epoch(col: pl.Series, name: str, unit: str) -> Dates | None:
    if col.null_count() > 0 or col.len() == 0:
        return None
    if not (col.dtype.is_integer() or col.dtype.is_float()):
        raise DataError(f"date_unit={unit!r} reads epoch numbers, but column {name!r} holds {col.dtype}: "
                        f"drop date_unit or pick the numeric date column with date_col=")
    vals = col.cast(pl.Float64).to_numpy()
    if not np.isfinite(vals).all():
        raise DataError(f"epoch column {name!r} holds NaN/inf: drop those rows")
    try:
        parsed = pd.to_datetime(pd.Series(col.to_numpy()), unit=unit, utc=True)
    except (ValueError, OverflowError):
        raise DataError(f"epoch column {name!r} with date_unit={unit!r} gives dates outside 1677..2262 "
                        f"(e.g. {col[0]!r}): check the unit (s, ms, us, ns)") from None
    return _from_index(parsed)


def parse_dates(col: pl.Series, *, date_format: str | None = None, date_unit: str | None = None,
                quiet: bool = False) -> Dates | None:
    """The column as timestamps, or None when it is not dates. Raises when a string column is ambiguous,
    or (unless ``quiet``, used while searching for the date column) when it does not match ``date_format``.
    """
    name, dtype = col.name, col.dtype
    if date_unit is not None:
        return _parse_epoch(col, name, date_unit)
    if dtype == pl.Date or isinstance(dtype, pl.Datetime):
        if col.null_count() > 0:
            return None
        return _from_index(col.to_pandas())
    if dtype == pl.String:
        return _parse_strings(col, name, date_format, quiet)
    if dtype.is_integer():  # only reached for a named date_col: e.g. 20200101
        return _parse_strings(col.cast(pl.String), name, date_format, quiet)
    return None


def check_date_args(date_format: str | None, date_unit: str | None) -> None:
    if date_unit is not None and date_unit not in DATE_UNITS:
        raise DataError(f"unknown date_unit {date_unit!r}: use one of {', '.join(DATE_UNITS)} (epoch units)")
    if date_format is not None and (not isinstance(date_format, str) or "%" not in date_format):
        raise DataError(f"date_format {date_format!r} has no % directive: give a strftime format such as "
                        f"'%m/%d/%Y' or '%d.%m.%Y %H:%M'")
    if date_format is not None and date_unit is not None:
        raise DataError("date_format reads text dates, date_unit epoch numbers: pass only one of them")


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
                     f"ISO 8601 (2020-01-31 14:00), {_HINT}, or parse it yourself into a datetime column")


_EPOCH = re.compile(r"^(1[0-9]{9}|1[0-9]{12})$")  # 2001..2286 in seconds, or in milliseconds


def _no_date_error(df: pl.DataFrame) -> DataError:
    ints = [c for c in df.columns if df[c].dtype.is_integer()]
    named = [c for c in ints if c.strip().lower() in DATE_NAMES]
    epoch = [c for c in ints if df[c].len() and _EPOCH.match(str(df[c][0]))]
    for c in named + epoch:
        return DataError(f"no date column found: column {c!r} holds integers (e.g. {df[c][0]}): if they are "
                         f"epoch times pass date_unit='s' or 'ms' (CLI: --date-unit s) with date_col={c!r}")
    return DataError(f"no date column found among {list(df.columns)}: add one (ISO 8601 dates) or name it "
                     f"with date_col= / --date-col")


def find_date_column(df: pl.DataFrame, date_col: str | None, *, date_format: str | None = None,
                     date_unit: str | None = None) -> tuple[str, Dates]:
    """The named ``date_col``, else one named date/time/..., else the first temporal or date-string one.

    With ``date_unit`` the date column holds epoch numbers: ``date_col``, else a numeric column named
    date/time/..., else the first integer column.
    """
    check_date_args(date_format, date_unit)
    if date_col is not None:
        if date_col not in df.columns:
            raise DataError(f"date column {date_col!r} not found: columns are {list(df.columns)}")
        ts = parse_dates(df[date_col], date_format=date_format, date_unit=date_unit)
        if ts is None:
            raise _date_error(df, date_col)
        return date_col, ts
    if date_unit is not None:
        nums = [c for c in df.columns if df[c].dtype.is_integer() or df[c].dtype.is_float()]
        ranked = [c for c in nums if c.strip().lower() in DATE_NAMES] + [c for c in nums if
                                                                       df[c].dtype.is_integer()]
        if not ranked:
            raise DataError(f"date_unit={date_unit!r} needs an integer epoch column, none among "
                            f"{list(df.columns)}: name it with date_col=")
        ts = parse_dates(df[ranked[0]], date_unit=date_unit)
        if ts is None:
            raise _date_error(df, ranked[0])
        return ranked[0], ts
    temporal = [c for c in df.columns if df[c].dtype == pl.Date or isinstance(df[c].dtype, pl.Datetime)]
    strings = [c for c in df.columns if df[c].dtype == pl.String]
    named = [c for c in temporal + strings if c.strip().lower() in DATE_NAMES]
    for c in dict.fromkeys(named + temporal + strings):  # ordered, unique
        ts = parse_dates(df[c], date_format=date_format, quiet=c not in named)
        if ts is not None:
            return c, ts
    if named:  # a column called "date" that does not parse: say why
        raise _date_error(df, named[0])
    if date_format is not None and strings:
        raise DataError(f"no column matches date_format {date_format!r} (columns {list(df.columns)}): "
                        f"fix the format or name the date column with date_col=")
    raise _no_date_error(df)
