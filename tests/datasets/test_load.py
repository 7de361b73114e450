"""load/prepare on user data: formats, frames, parquet, and one clear DataError per bad input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import polars as pl
import pytest

from tsmix.datasets import DataError, infer_freq, load, prepare

N = 120


def frame(n: int = N, freq: str = "h", **cols) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    data = {"date": pd.date_range("2020-01-01", periods=n, freq=freq)}
    data.update(cols or {"a": rng.normal(size=n), "b": rng.normal(size=n), "OT": rng.normal(size=n)})
    return pd.DataFrame(data)


def write_csv(tmp_path, text: str, name: str = "d.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_csv_with_slash_dates_and_crlf(tmp_path):
    rows = "".join(f"1990/1/{1 + h // 24} {h % 24}:00,{h},{2 * h}\r\n" for h in range(60))
    p = write_csv(tmp_path, "when,x,y\r\n" + rows)
    s = load(p)
    assert s.date_col == "when" and s.columns == ("x", "y") and s.target == "y" and s.freq == "h"
    assert str(s.timestamps[25]) == "1990-01-02T01:00:00.000000000"
    np.testing.assert_array_equal(s.values[:, 0], np.arange(60, dtype=np.float32))


@pytest.mark.parametrize(
    "fmt, freq",
    [("%Y-%m-%dT%H:%M:%S", "15min"), ("%d.%m.%Y %H:%M", "15min"), ("%Y%m%d", "D"), ("%m/%d/%Y", "D")],
)
def test_other_date_formats(tmp_path, fmt, freq):
    ts = pd.date_range("2021-03-01", periods=40, freq=freq)
    text = "stamp,v\n" + "".join(f"{t.strftime(fmt)},{i}\n" for i, t in enumerate(ts))
    s = load(write_csv(tmp_path, text), date_col="stamp" if fmt == "%Y%m%d" else None)
    assert s.freq == freq
    np.testing.assert_array_equal(s.timestamps, ts.to_numpy().astype("datetime64[ns]"))


def test_late_floats_and_text_in_long_csv(tmp_path):
    # Schema inference looks at the first rows; values that only differ later must still be read.
    stamps = [f"2020-01-01 {m // 60:02d}:{m % 60:02d}" for m in range(400)]
    ints = "".join(f"{t},{i}\n" for i, t in enumerate(stamps[:300]))
    s = load(write_csv(tmp_path, "date,x\n" + ints + "".join(f"{t},{i + 0.5}\n" for i, t in
                                                             enumerate(stamps[300:], 300))))
    assert s.values[-1, 0] == 399.5 and s.freq == "min"
    with pytest.raises(DataError, match="non-numeric columns 'x' \\(e.g. 'abc'\\)"):
        load(write_csv(tmp_path, "date,x\n" + ints + "".join(f"{t},abc\n" for t in stamps[300:])))


def test_tsv_file(tmp_path):
    text = "date\tv\n" + "".join(f"2020-01-{d:02d}\t{d}\n" for d in range(1, 9))
    s = load(write_csv(tmp_path, text, "d.tsv"))
    assert s.columns == ("v",) and s.n_rows == 8


def test_date_column_is_detected_when_not_first_and_not_named(tmp_path):
    text = "id_code,when_measured,v\n" + "".join(f"x{i},2020-01-{i + 1:02d},{i}\n" for i in range(20))
    with pytest.raises(DataError, match="non-numeric columns 'id_code'"):
        load(write_csv(tmp_path, text))
    s = load(write_csv(tmp_path, text), columns=["v"])
    assert s.date_col == "when_measured" and s.freq == "D"


def test_pandas_polars_frames_and_parquet_agree(tmp_path):
    df = frame()
    pq = tmp_path / "d.parquet"
    pl.from_pandas(df).write_parquet(pq)
    indexed = df.set_index("date")  # a DatetimeIndex counts as the date column
    loaded = [load(df), load(pl.from_pandas(df)), load(pq), load(indexed)]
    for s in loaded:
        assert s.columns == ("a", "b", "OT") and s.target == "OT" and s.freq == "h"
        np.testing.assert_array_equal(s.values, loaded[0].values)
        np.testing.assert_array_equal(s.timestamps, loaded[0].timestamps)
    p = prepare(pl.from_pandas(df), 12, 4, "S", target="a")
    assert p.series.target == "a" and p.target_idx == 0 and p.borders["test"] == (96 - 12, N)


def test_polars_date_and_zoned_datetime_columns():
    days = pl.date_range(pl.date(2021, 1, 1), pl.date(2021, 1, 20), eager=True)
    s = load(pl.DataFrame({"d": days, "v": range(20)}))
    assert s.date_col == "d" and s.freq == "D" and str(s.timestamps[1]) == "2021-01-02T00:00:00.000000000"
    zoned = pl.datetime_range(pl.datetime(2021, 6, 1), pl.datetime(2021, 6, 1, 9), "1h", eager=True,
                              time_zone="America/New_York")
    s = load(pl.DataFrame({"t": zoned, "v": range(10)}))
    assert str(s.timestamps[0]) == "2021-06-01T04:00:00.000000000"


def test_timezone_aware_dates_become_utc():
    df = frame()
    df["date"] = df["date"].dt.tz_localize("Europe/Berlin")
    s = load(df)
    assert str(s.timestamps[0]) == "2019-12-31T23:00:00.000000000"


def test_infer_freq_aliases():
    for f in ("h", "15min", "10min", "D", "MS", "W-SUN", "B"):
        assert infer_freq(pd.date_range("2020-01-06", periods=30, freq=f).to_numpy()) == f


@pytest.mark.parametrize("fill", ["ffill", "interpolate", "zero"])
def test_nan_and_inf_fill(fill):
    df = frame()
    df.loc[0, "a"] = np.nan  # leading gap: ffill takes the first finite value
    df.loc[[5, 6], "a"] = [np.nan, np.inf]
    with pytest.raises(DataError, match=r"3 missing/NaN/inf values in columns \['a'\] \(first at row 0"):
        load(df)
    s = load(df, fill=fill)
    a = df["a"].to_numpy()
    expected = {"ffill": [a[1], a[4], a[4]], "zero": [0, 0, 0],
                "interpolate": [a[1], a[4] + (a[7] - a[4]) / 3, a[4] + 2 * (a[7] - a[4]) / 3]}[fill]
    np.testing.assert_allclose(s.values[[0, 5, 6], 0], expected, rtol=1e-6)
    assert np.isfinite(s.values).all()


def test_missing_cells_in_csv_are_nan(tmp_path):
    cell = {3: "", 4: "NA"}
    text = "date,x\n" + "".join(f"2020-01-{d:02d},{cell.get(d, d)}\n" for d in range(1, 21))
    with pytest.raises(DataError, match="2 missing/NaN/inf values"):
        load(write_csv(tmp_path, text))
    assert load(write_csv(tmp_path, text), fill="ffill").values[2:4, 0].tolist() == [2.0, 2.0]


def test_missing_timestamps_error_and_fill():
    df = frame().drop(index=[10, 11, 50]).reset_index(drop=True)
    with pytest.raises(DataError, match=r"3 missing timestamp\(s\) in 2 gap\(s\) of the h grid, first after "
                                        r"2020-01-01 09:00:00"):
        load(df)
    s = load(df, fill="interpolate")
    assert s.n_rows == N and s.freq == "h"
    np.testing.assert_array_equal(s.timestamps, frame()["date"].to_numpy().astype("datetime64[ns]"))
    full = frame()["a"].to_numpy()
    np.testing.assert_allclose(s.values[10:12, 0], full[9] + (full[12] - full[9]) * np.array([1, 2]) / 3,
                               rtol=1e-6)


@pytest.mark.parametrize(
    "mutate, match",
    [(lambda d: d.iloc[[1, 0, *range(2, N)]], r"not sorted: row 1 \(2020-01-01 00:00:00\) comes after row 0"),
     (lambda d: pd.concat([d.iloc[:5], d.iloc[4:]]),
      r"1 duplicated timestamp\(s\), first 2020-01-01 04:00:00 at rows 4 and 5"),
     (lambda d: d.assign(date=d["date"] + pd.to_timedelta(np.r_[0, 17, np.zeros(N - 2)], "min")),
      "irregular timestamps"),
     (lambda d: d.assign(b=["x"] * N), r"non-numeric columns 'b' \(e.g. 'x'\)"),
     (lambda d: d.drop(columns=["a", "b", "OT"]), "no value columns"),
     (lambda d: d.rename(columns={"date": "a1"}).assign(a1=np.arange(N)), "no date column found"),
     (lambda d: d.iloc[:0], "no rows"),
     (lambda d: d.assign(date=d["date"].astype(str).where(d.index != 7, None)),
      r"date column 'date' has 1 missing value\(s\), first at row 7"),
     (lambda d: d.assign(date=d["date"].astype(str).where(d.index != 9, "2020-13-45 99:00:00")),
      "date column 'date' does not parse as dates \\(e.g. '2020-13-45 99:00:00'\\)"),
     (lambda d: d.iloc[:1], "needs at least 2 timestamps"),
     (lambda d: d.assign(a=1e39), "overflow float32")],
)
def test_bad_frames(mutate, match):
    with pytest.raises(DataError, match=match):
        load(mutate(frame()))


@pytest.mark.parametrize(
    "kwargs, match",
    [(dict(target="nope"), r"unknown target 'nope': choose one of the value columns \['a', 'b', 'OT'\]"),
     (dict(date_col="nope"), "date column 'nope' not found"),
     (dict(date_col="a"), "date column 'a' does not parse as dates"),
     (dict(fill="mean"), "unknown fill 'mean'"),
     (dict(columns=["a", "zz"]), r"unknown value columns \['zz'\]")],
)
def test_bad_load_arguments(kwargs, match):
    with pytest.raises(DataError, match=match):
        load(frame(), **kwargs)


@pytest.mark.parametrize(
    "args, kwargs, match",
    [((0, 4), {}, "lookback must be a positive integer, got 0"),
     ((8, 0), {}, "horizon must be a positive integer, got 0"),
     ((8, 4.5), {}, "horizon must be a positive integer"),
     ((8, 4), dict(features="SM"), "unknown features mode 'SM'"),
     # 120 rows: val = rows 84-12-ish; 12 val rows + lookback 8 < 8 + 16
     ((8, 16), {}, r"the val split has 20 rows \(rows 76..96\), fewer than lookback \+ horizon = 8 \+ 16"),
     ((90, 4), {}, "lookback 90 is longer than the 84-row training split")],
)
def test_bad_prepare_arguments(args, kwargs, match):
    with pytest.raises(DataError, match=match):
        prepare(frame(), *args, **kwargs)


def test_file_errors(tmp_path):
    with pytest.raises(DataError, match="file .*nope.csv' not found"):
        load(tmp_path / "nope.csv")
    with pytest.raises(DataError, match="dataset 'ETTx9' not found: give a benchmark name"):
        load("ETTx9")
    with pytest.raises(DataError, match="unsupported file type 'd.xlsx'"):
        load(write_csv(tmp_path, "date,x\n", name="d.xlsx"))
    with pytest.raises(DataError, match="cannot read .*empty.csv"):
        load(write_csv(tmp_path, "", name="empty.csv"))
    with pytest.raises(DataError, match="is a folder"):
        load(tmp_path)
    with pytest.raises(DataError, match="unsupported data source of type list"):
        load([1, 2, 3])
    with pytest.raises(DataError, match="the ETTH borders need 14400 rows but the series has 40"):
        text = "date,OT\n" + "".join(f"2020-01-{1 + h // 24:02d} {h % 24}:00,{h}\n" for h in range(40))
        prepare(write_csv(tmp_path, text, name="ETTh1.csv"), 4, 2)


def test_errors_are_one_line():
    for bad in (lambda: load(frame().assign(a=np.nan)), lambda: prepare(frame(), 8, 16)):
        with pytest.raises(DataError) as exc:
            bad()
        assert "\n" not in str(exc.value)
