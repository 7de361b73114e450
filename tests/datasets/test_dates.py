"""Dates (format inferred from the whole column, zones kept, epoch units) and CSV dialects (issue #16)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import polars as pl
import pytest

from tsmix.cli import main
from tsmix.datasets import DataError, load, prepare


def write(tmp_path, text: str, name: str = "d.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


def monthly_us(n: int = 240) -> tuple[pd.DatetimeIndex, str]:
    ts = pd.date_range("2000-01-01", periods=n, freq="MS")
    return ts, "date,x\n" + "".join(f"{t.strftime('%m/%d/%Y')},{i}\n" for i, t in enumerate(ts))


def test_month_first_monthly_series_is_not_read_day_first(tmp_path):
    ts, text = monthly_us()
    s = load(write(tmp_path, text))
    assert (s.n_rows, s.freq) == (240, "MS")
    np.testing.assert_array_equal(s.timestamps, ts.to_numpy().astype("datetime64[ns]"))
    np.testing.assert_array_equal(s.values[:, 0], np.arange(240, dtype=np.float32))


def test_cli_us_monthly_with_fill_keeps_240_rows(tmp_path, capsys):
    write(tmp_path, monthly_us()[1], "us.csv")
    args = ["data", str(tmp_path / "us.csv"), "--lookback", "24", "--horizon", "6", "--fill", "ffill",
            "--json"]
    assert main(args) == 0
    s = json.loads(capsys.readouterr().out)
    assert (s["rows"], s["freq"]) == (240, "MS")
    assert (s["start"], s["end"]) == ("2000-01-01 00:00:00", "2019-12-01 00:00:00")


def test_day_first_daily_series(tmp_path):
    ts = pd.date_range("2021-01-01", periods=30, freq="D")
    s = load(write(tmp_path, "date,x\n" + "".join(f"{t.strftime('%d/%m/%Y')},1\n" for t in ts)))
    np.testing.assert_array_equal(s.timestamps, ts.to_numpy().astype("datetime64[ns]"))


def test_ambiguous_column_asks_for_date_format_and_date_format_decides(tmp_path, capsys):
    p = write(tmp_path, "date,x\n01/01/2000,1\n02/01/2000,2\n03/01/2000,3\n")  # Jan..Mar or Jan 1..3
    with pytest.raises(DataError, match=r"date column 'date' is ambiguous: .*'%m/%d/%Y' or '%d/%m/%Y'.*"
                                        r"date_format= \(CLI: --date-format\)"):
        load(p)
    assert load(p, date_format="%m/%d/%Y").freq == "MS"
    assert load(p, date_format="%d/%m/%Y").freq == "D"
    argv = ["data", str(p), "--lookback", "1", "--horizon", "1", "--json"]
    assert main(argv) == 2 and "is ambiguous" in capsys.readouterr().err
    assert main([*argv, "--date-format", "%d/%m/%Y"]) == 2  # parsed; 3 rows are too few for the splits
    assert "split has" in capsys.readouterr().err


def test_date_format_mismatch_names_the_value(tmp_path):
    p = write(tmp_path, "date,x\n2020-01-01,1\n2020-01-02,2\n2020/01/03,3\n")
    with pytest.raises(DataError, match=r"does not match date_format '%Y-%m-%d' \(e.g. '2020/01/03'\)"):
        load(p, date_format="%Y-%m-%d")


def test_iso_and_dotted_dates_are_never_ambiguous(tmp_path):
    for fmt in ("%Y-%m-%d", "%d.%m.%Y"):
        ts = pd.date_range("2020-01-01", periods=12, freq="D")  # every day <= 12: both orders would parse
        s = load(write(tmp_path, "date,x\n" + "".join(f"{t.strftime(fmt)},1\n" for t in ts)))
        assert s.freq == "D"
        np.testing.assert_array_equal(s.timestamps, ts.to_numpy().astype("datetime64[ns]"))


def test_offset_in_text_is_kept(tmp_path):
    h = pd.date_range("2016-07-24", periods=48, freq="h", tz="+02:00")
    rows = "".join(f"{t.strftime('%Y-%m-%dT%H:%M')}+02:00,{i}\n" for i, t in enumerate(h))
    p = write(tmp_path, "date,x\n" + rows)
    s = load(p)
    assert s.tz == "+02:00" and s.freq == "h"
    assert str(s.index[-1]) == "2016-07-25 23:00:00+02:00"
    assert str(s.timestamps[-1]) == "2016-07-25T21:00:00.000000000"  # UTC instant
    assert [str(t) for t in s.future(2)] == ["2016-07-26 00:00:00+02:00", "2016-07-26 01:00:00+02:00"]
    out = s.to_pandas()
    assert str(out["date"].iloc[-1]) == "2016-07-25 23:00:00+02:00"
    summary = prepare(p, 4, 2).summary()
    assert (summary["tz"], summary["end"]) == ("+02:00", "2016-07-25 23:00:00+02:00")


def test_named_zone_from_frames_daily_across_dst_and_local_calendar():
    d = pd.date_range("2021-03-20", periods=40, freq="D", tz="Europe/Berlin")  # DST starts 2021-03-28
    polars = pl.DataFrame({"date": pl.Series(d.tz_convert("UTC").tz_localize(None)), "x": range(40)})
    zoned = pl.col("date").dt.replace_time_zone("UTC").dt.convert_time_zone("Europe/Berlin")
    polars = polars.with_columns(zoned)
    for frame in (pd.DataFrame({"date": d, "x": np.arange(40.0)}), polars):
        s = load(frame)
        assert (s.tz, s.freq) == ("Europe/Berlin", "D")
        assert str(s.future(1)[0]) == "2021-04-29 00:00:00+02:00"
    h = pd.date_range("2021-03-27", periods=72, freq="h", tz="Europe/Berlin")
    p = prepare(pd.DataFrame({"date": h, "x": np.arange(72.0)}), 4, 2, calendar=True)
    assert p.series.freq == "h" and p.mark_names[0] == "hour_of_day"
    np.testing.assert_allclose(p.marks[:, 0].numpy(), h.hour / 23.0 - 0.5, atol=1e-6)  # local hours


def test_fixed_offset_pandas_column_with_half_hour():
    d = pd.date_range("2021-01-01", periods=10, freq="h", tz="+05:30")
    s = load(pd.DataFrame({"date": d, "x": np.arange(10.0)}))
    assert s.tz == "+05:30" and str(s.index[0]) == "2021-01-01 00:00:00+05:30"


def test_mixed_offsets_keep_the_instants_in_utc(tmp_path):
    h = pd.date_range("2021-03-27", periods=48, freq="h", tz="Europe/Berlin")  # +01:00 then +02:00
    s = load(write(tmp_path, "date,x\n" + "".join(f"{t.isoformat()},{i}\n" for i, t in enumerate(h))))
    assert s.tz == "UTC" and s.freq == "h"
    np.testing.assert_array_equal(s.index, h.tz_convert("UTC"))


@pytest.mark.parametrize("unit, scale", [("s", 1), ("ms", 1000)])
def test_epoch_integers(tmp_path, unit, scale):
    text = "timestamp,x\n" + "".join(f"{(1467331200 + 3600 * i) * scale},{i}\n" for i in range(30))
    p = write(tmp_path, text)
    with pytest.raises(DataError, match=r"column 'timestamp' holds integers .*date_unit='s' or 'ms' "
                                        r"\(CLI: --date-unit s\)"):
        load(p)
    s = load(p, date_unit=unit)
    assert (s.tz, s.freq, s.date_col, s.columns) == ("UTC", "h", "timestamp", ("x",))
    assert str(s.index[0]) == "2016-07-01 00:00:00+00:00"


def test_cli_date_unit(tmp_path, capsys):
    text = "t,x\n" + "".join(f"{1467331200 + 60 * i},{i}\n" for i in range(100))
    write(tmp_path, text)
    assert main(["data", str(tmp_path / "d.csv"), "--lookback", "4", "--horizon", "2", "--date-unit", "s",
                 "--date-col", "t", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert (s["freq"], s["tz"], s["start"]) == ("min", "UTC", "2016-07-01 00:00:00+00:00")


@pytest.mark.parametrize("sep", [";", "\t", "|"])
def test_separators_and_decimal_commas(tmp_path, sep):
    rows = "".join(f"2020-01-{d:02d}{sep}{d},5{sep}-{d},25e1\n" for d in range(1, 21))
    s = load(write(tmp_path, f"date{sep}HUFL{sep}OT\n" + rows))
    assert s.columns == ("HUFL", "OT")
    np.testing.assert_allclose(s.values[:2], [[1.5, -12.5], [2.5, -22.5]])


def test_semicolon_with_decimal_points_and_quoted_fields(tmp_path):
    rows = "".join(f'2020-01-{d:02d};"{d}.5";7\n' for d in range(1, 21))
    s = load(write(tmp_path, "date;a;b\n" + rows))
    assert s.values[0].tolist() == [1.5, 7.0]


def test_decimal_comma_in_a_comma_file_says_so(tmp_path):
    rows = "".join(f'2020-01-{d:02d},"{d},5"\n' for d in range(1, 21))
    with pytest.raises(DataError, match="look like decimal commas in a comma-separated file"):
        load(write(tmp_path, "date,x\n" + rows))


def test_duplicated_header_names_are_an_error(tmp_path):
    p = write(tmp_path, "date,HUFL,HUFL,OT,OT\n2020-01-01,1,2,3,4\n2020-01-02,1,2,3,4\n")
    with pytest.raises(DataError, match=r"duplicated column names \['HUFL', 'OT'\]"):
        load(p)
    df = pd.DataFrame([[1, 2], [3, 4]], columns=["a", "a"])
    with pytest.raises(DataError, match=r"duplicated column names \['a'\]"):
        load(df)


def test_separator_not_found_is_named(tmp_path):
    p = write(tmp_path, "date;x\n" + "".join(f"2020-01-{d:02d},{d}\n" for d in range(1, 9)))
    with pytest.raises(DataError, match=r"splits into one column 'date;x': no separator among , ; tab \|"):
        load(p)
