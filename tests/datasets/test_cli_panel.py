"""``tsmix data`` on long panels: per-series spans and windows; bad panels are one line, exit 2."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tsmix.cli import main

L, H = 10, 5
# (id, first day, rows): ragged starts and lengths, written out of order
SERIES = [("b", "2021-01-10", 45), ("a", "2021-01-01", 60), ("c", "2021-02-01", 80)]


def long_frame(id_col: str = "unique_id", time_col: str = "ds", target_col: str = "y") -> pd.DataFrame:
    rng = np.random.default_rng(0)
    parts = [pd.DataFrame({id_col: sid, time_col: pd.date_range(day, periods=n, freq="D"),
                           target_col: rng.standard_normal(n)}) for sid, day, n in SERIES]
    return pd.concat(parts, ignore_index=True)


def windows(n: int, val: int, test: int) -> tuple[int, int, int]:
    """Windows of one series of n rows: train rows n - val - test, val/test get L rows of context."""
    return n - val - test - L - H + 1, val - H + 1, test - H + 1


@pytest.fixture
def long_csv(tmp_path):
    path = tmp_path / "shop.csv"
    long_frame().to_csv(path, index=False)
    return path


def test_json_detects_the_id_column(long_csv, capsys):
    assert main(["data", str(long_csv), "--lookback", str(L), "--horizon", str(H), "--json"]) == 0
    out = capsys.readouterr().out
    assert len(out.strip().splitlines()) == 1
    s = json.loads(out)
    assert (s["series"], s["rows"], s["min_length"], s["max_length"]) == (3, 185, 45, 80)
    assert (s["freq"], s["start"], s["end"]) == ("D", "2021-01-01 00:00:00", "2021-04-21 00:00:00")
    assert (s["val_size"], s["test_size"], s["lookback"], s["horizon"]) == (H, H, L, H)
    per = [windows(n, H, H) for _, _, n in SERIES]
    assert [s[f"{k}_windows"] for k in ("train", "val", "test")] == [sum(c) for c in zip(*per)]
    assert s["spans"] == [
        {"id": "a", "start": "2021-01-01 00:00:00", "end": "2021-03-01 00:00:00", "rows": 60},
        {"id": "b", "start": "2021-01-10 00:00:00", "end": "2021-02-23 00:00:00", "rows": 45},
        {"id": "c", "start": "2021-02-01 00:00:00", "end": "2021-04-21 00:00:00", "rows": 80},
    ]


def test_text_with_named_columns_and_split_sizes(tmp_path, capsys):
    path = tmp_path / "named.parquet"
    long_frame("store", "day", "sales").to_parquet(path)
    argv = ["data", str(path), "--lookback", str(L), "--horizon", str(H), "--id-col", "store",
            "--time-col", "day", "--target-col", "sales", "--val-size", "7", "--test-size", "6"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    per = [windows(n, 7, 6) for _, _, n in SERIES]
    train, val, test = (sum(c) for c in zip(*per))
    for text in ("long: store, day, sales", "series    3  (185 rows, lengths 45..80)", "freq D",
                 "val 7 + test 6 steps", f"train   {train}\n", f"val     {val}\n", f"test    {test}\n",
                 "a   2021-01-01 00:00:00  2021-03-01 00:00:00  60",
                 "c   2021-02-01 00:00:00  2021-04-21 00:00:00  80"):
        assert text in out, text
    assert out.rstrip().splitlines()[-4].split() == ["id", "first", "last", "rows"]


def test_id_col_flag_selects_the_panel_on_any_column_name(tmp_path, capsys):
    path = tmp_path / "w.csv"
    long_frame(id_col="series").to_csv(path, index=False)
    assert main(["data", str(path), "--lookback", str(L), "--horizon", str(H), "--id-col", "series",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["series"] == 3


@pytest.mark.parametrize("mutate, extra, match", [
    (lambda df: pd.concat([df, df.iloc[[3]]]), [], "duplicated (id, timestamp)"),
    (lambda df: df, ["--test-size", "0"], "test_size must be an integer >= horizon"),
    (lambda df: df, ["--val-size", "40"], "series too short"),
    (lambda df: df, ["--target", "y"], "--target are for wide files"),
    (lambda df: df.rename(columns={"y": "v"}), [], "missing columns ['y']"),
])
def test_bad_panels_are_one_line_exit_2(tmp_path, capsys, mutate, extra, match):
    path = tmp_path / "bad.csv"
    mutate(long_frame()).to_csv(path, index=False)
    before = sorted(tmp_path.rglob("*"))
    assert main(["data", str(path), "--lookback", str(L), "--horizon", str(H), *extra]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("tsmix data: error: ") and match in err, err
    assert sorted(tmp_path.rglob("*")) == before


def test_panel_flags_on_a_wide_file_are_refused(tmp_path, capsys):
    ts = pd.date_range("2020-01-01", periods=60, freq="D")
    pd.DataFrame({"date": ts, "x": np.arange(60.0)}).to_csv(tmp_path / "wide.csv", index=False)
    assert main(["data", str(tmp_path / "wide.csv"), "--lookback", "5", "--horizon", "2",
                 "--val-size", "4"]) == 2
    err = capsys.readouterr().err
    assert "--val-size are for long panels" in err and len(err.strip().splitlines()) == 1
