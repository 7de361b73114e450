"""Property-based fuzzing of the data path: random frames/CSV files -> ``prepare``.

Each example either raises a TsmixError, or gives a dataset that keeps every input row at its instant
with its value (as float32; missing cells only when ``fill`` is set, then filled by the rule), and
whose windows equal plain numpy slices of the train-scaled values. Any other exception fails.
"""

from __future__ import annotations

import csv
import io
import math
import re
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl
import sklearn.preprocessing  # noqa: F401  (the scaler's lazy import, done here instead of in a timed example)
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tsmix.datasets import prepare
from tsmix.datasets.io import NULL_TOKENS
from tsmix.errors import TsmixError

FREQS = ("h", "15min", "D", "MS", "W-SUN")
ZONES = (None, None, "UTC", "+05:30", "Europe/Berlin")
STARTS = ("2020-01-06", "2021-03-26 22:00", "2021-10-30", "1999-12-31 23:00")
TEXT_FORMATS = ("%Y-%m-%d %H:%M:%S", "%m/%d/%Y %H:%M", "%d/%m/%Y %H:%M", "%Y-%m-%dT%H:%M", "%d.%m.%Y %H:%M")
SPECIAL = (0.0, -0.0, 1e-300, -1e-300, 1e300, 3e38, -3.4e38, 1e39, 12345.678, float("nan"), float("inf"),
           -float("inf"))
TEXT_CELLS = ("1,5", "-0,25", "abc", "", "NA", "null", " 2.5 ", "1e3", "nan", "inf", "-7")
NAMES = ("a", "b", "OT", "x y", "Ünï")
F32_MAX = float(np.finfo(np.float32).max)
_COMMA = re.compile(r"^[-+]?\d*,\d+([eE][-+]?\d+)?$")


@st.composite
def cases(draw):
    # Most examples are meant to load (so the value/window checks run); each defect is drawn rarely.
    rare = lambda k=6: draw(st.integers(0, k)) == 0  # noqa: E731
    n = draw(st.one_of(st.integers(0, 8), st.integers(20, 60)))
    freq, tz = draw(st.sampled_from(FREQS)), draw(st.sampled_from(ZONES))
    ts = pd.date_range(draw(st.sampled_from(STARTS)), periods=n, freq=freq, tz=tz)
    order = list(range(n))
    if n > 3 and rare(3):  # drop a few rows (missing timestamps)
        drop = set(draw(st.lists(st.integers(1, n - 2), max_size=3)))
        order = [i for i in order if i not in drop]
    if len(order) > 2 and rare():  # swap two rows
        i, j = draw(st.integers(0, len(order) - 1)), draw(st.integers(0, len(order) - 1))
        order[i], order[j] = order[j], order[i]
    if order and rare():  # duplicate a row
        order.insert(draw(st.integers(0, len(order))), draw(st.sampled_from(order)))
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True))
    if rare():
        names.append(names[0])
    columns = []
    finite = st.floats(-1e6, 1e6, allow_nan=False, width=64)
    for _ in names:
        kind = draw(st.sampled_from(("float", "float", "float", "int", "bool", "text")))
        dirty = rare(2)
        if kind == "float":
            cell = st.one_of(finite, finite, finite, st.sampled_from(SPECIAL)) if dirty else finite
        elif kind == "int":
            cell = st.integers(-(10**9), 10**9)
        elif kind == "bool":
            cell = st.booleans()
        else:
            junk = st.one_of(st.sampled_from(TEXT_CELLS), st.none())
            cell = st.one_of(finite.map(repr), finite.map(repr), junk) if dirty else finite.map(repr)
        columns.append((kind, draw(st.lists(cell, min_size=len(order), max_size=len(order)))))
    return dict(
        stamps=ts[order] if n else ts, names=names, columns=columns, tz=tz,
        route=draw(st.sampled_from(("pandas", "polars", "csv", "csv"))), sep=draw(st.sampled_from(",;\t|")),
        fmt=draw(st.sampled_from(TEXT_FORMATS)), as_text=draw(st.booleans()),
        fill=draw(st.sampled_from((None, None, "ffill", "zero", "interpolate"))),
        lookback=draw(st.integers(1, 4)), horizon=draw(st.integers(1, 3)),
    )


def _stamp_text(t: pd.Timestamp, fmt: str) -> str:
    return t.isoformat() if t.tz is not None else t.strftime(fmt)


def build(c: dict, folder: Path):
    """The source (frame or file path) and, per column, the cells as the reader will see them."""
    stamps, names = c["stamps"], c["names"]
    if c["route"] == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, delimiter=c["sep"], lineterminator="\n")
        w.writerow(["date", *names])
        for r in range(len(stamps)):
            row = [_stamp_text(stamps[r], c["fmt"])]
            for kind, cells in c["columns"]:
                v = cells[r]
                row.append("" if v is None else (repr(float(v)) if kind == "float" else str(v)))
            w.writerow(row)
        path = folder / "f.csv"
        path.write_text(buf.getvalue())
        return path
    date = [_stamp_text(t, c["fmt"]) for t in stamps] if c["as_text"] else stamps
    df = pd.DataFrame({"date": date})
    for i, (name, (kind, cells)) in enumerate(zip(names, c["columns"])):
        col = pd.Series(cells, dtype=object if kind == "text" else None)
        df.insert(i + 1, name, col, allow_duplicates=True)
    if c["route"] == "polars":
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # pandas deprecations inside polars' conversion
                return pl.from_pandas(df)
        except Exception:  # duplicated names or odd objects: polars itself refuses, nothing to test
            return None
    return df


def expected_column(kind: str, cells: list, route: str, sep: str) -> list[float | None] | None:
    """Per row the value the reader must produce, None for a missing cell; None overall: must fail."""
    if kind == "bool" or (kind != "text" and route != "csv"):  # a CSV of True/False reads as booleans
        return [None if not math.isfinite(float(v)) else float(v) for v in cells]
    text = [None if v is None else (repr(float(v)) if kind == "float" else str(v)) for v in cells]
    if route == "csv":
        text = [None if t is None or t in NULL_TOKENS else t for t in text]
        present = [t.strip() for t in text if t is not None]
        if sep != "," and present and all(_COMMA.match(t) for t in present):
            text = [None if t is None else t.strip().replace(",", ".") for t in text]
    out = []
    for t in text:
        if t is None:
            out.append(None)
            continue
        try:
            v = float(t.strip())
        except ValueError:
            return None  # text that is no number: the load must fail
        out.append(v if math.isfinite(v) else None)
    return out


def check_success(c: dict, prep) -> None:
    s = prep.series
    stamps = c["stamps"]
    instants = (stamps.tz_convert("UTC").tz_localize(None) if stamps.tz is not None else stamps)
    instants = instants.as_unit("ns").asi8
    got = s.timestamps.view(np.int64)
    assert (np.diff(got) > 0).all()
    assert (s.tz is None) == (c["tz"] is None), (s.tz, c["tz"])
    rows = np.searchsorted(got, instants)
    assert (rows < len(got)).all() and (got[np.minimum(rows, len(got) - 1)] == instants).all(), "stamp moved"
    assert len(set(rows.tolist())) == len(rows)
    for j, (kind, cells) in enumerate(c["columns"]):
        exp = expected_column(kind, cells, c["route"], c["sep"])
        assert exp is not None, f"text column {c['names'][j]!r} loaded as numbers"
        col = s.values[:, j]
        known = np.full(len(got), np.nan)
        for r, v in zip(rows, exp):
            if v is not None:
                assert abs(v) <= F32_MAX, "float32 overflow not reported"
                assert col[r] == np.float32(v), (c["names"][j], v, col[r])
                known[r] = v
        missing = np.isnan(known)
        assert not missing.any() or c["fill"] is not None, "missing values without fill"
        assert np.isfinite(col).all()
        if c["fill"] == "zero":
            assert (col[missing] == 0).all()
        elif c["fill"] == "ffill":
            ref = pd.Series(known).ffill().bfill().to_numpy().astype(np.float32)
            np.testing.assert_array_equal(col, ref)
        elif c["fill"] == "interpolate" and missing.any():
            lo, hi = np.nanmin(known), np.nanmax(known)
            assert ((col[missing] >= np.float32(lo)) & (col[missing] <= np.float32(hi))).all()
    check_windows(prep)


def check_windows(prep) -> None:
    """Every window equals numpy slices of the values scaled with train-row statistics (float64)."""
    v = prep.series.values.astype(np.float64)
    a, b = prep.borders["train"]
    mean, std = v[a:b].mean(axis=0), v[a:b].std(axis=0)
    std[std == 0] = 1.0  # sklearn keeps constant channels unscaled
    ref = ((v - mean) / std).astype(np.float32)
    L, H = prep.lookback, prep.horizon
    for split in ("train", "val", "test"):
        ws = prep.split(split)
        a, b = prep.borders[split]
        assert len(ws) == b - a - L - H + 1
        for i in range(len(ws)):
            x, y = ws[i]
            tol = dict(rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(x.numpy(), ref[a + i : a + i + L], **tol)
            np.testing.assert_allclose(y.numpy(), ref[a + i + L : a + i + L + H], **tol)
        xs, ys = ws.gather(torch.arange(len(ws)))  # the batched path agrees with the per-window one
        np.testing.assert_array_equal(xs[-1].numpy(), ws[len(ws) - 1][0].numpy())
        np.testing.assert_array_equal(ys[0].numpy(), ws[0][1].numpy())


# Bounded for one busy core: ~30 s for the whole file; a generous deadline for a loaded CI machine.
@settings(max_examples=150, deadline=5000, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases())
def test_data_path_is_valid_or_a_tsmix_error(c):
    with tempfile.TemporaryDirectory() as tmp:
        source = build(c, Path(tmp))
        if source is None:
            return
        try:
            prep = prepare(source, c["lookback"], c["horizon"], fill=c["fill"])
        except TsmixError as exc:
            assert "\n" not in str(exc)
            event(f"error: {str(exc).split(':')[0][:40]}")
            return
        event(f"loaded ({c['route']})")
        check_success(c, prep)
