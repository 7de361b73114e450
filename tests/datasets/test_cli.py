"""``tsmix data``: text and JSON summaries; errors are one line on stderr, exit 2, nothing written."""

from __future__ import annotations

import json
import socket

import numpy as np
import pandas as pd
import pytest

from tsmix.cli import main


def test_json_summary_etth1(data_dir, capsys):
    rc = main(["data", "ETTh1", "--lookback", "336", "--horizon", "96", "--data-dir", str(data_dir),
               "--json"])
    out = capsys.readouterr().out
    assert rc == 0 and len(out.strip().splitlines()) == 1
    s = json.loads(out)
    assert (s["rows"], s["channels"], s["freq"]) == (17420, 7, "h")
    assert (s["train_windows"], s["val_windows"], s["test_windows"]) == (8209, 2785, 2785)
    assert s["borders"] == {"train": [0, 8640], "val": [8304, 11520], "test": [11184, 14400]}
    assert s["columns"][-1] == "OT" and s["x_channels"] == s["y_channels"] == 7


def test_text_summary_weather_ms(data_dir, capsys):
    rc = main(["data", "weather", "--lookback", "96", "--horizon", "96", "--features", "MS",
               "--data-dir", str(data_dir)])
    out = capsys.readouterr().out
    assert rc == 0
    for text in ("rows      52696", "freq 10min", "channels  21:", "x 21 -> y 1", "train   [0, 36887)",
                 "36696", "5175", "10444"):
        assert text in out, text


def test_custom_csv_with_options(tmp_path, capsys):
    ts = pd.date_range("2020-01-01", periods=200, freq="D")
    df = pd.DataFrame({"day": ts.strftime("%Y/%m/%d"), "x": np.arange(200.0), "y": np.arange(200.0) ** 0.5})
    df.loc[7, "x"] = np.nan
    df.to_csv(tmp_path / "d.csv", index=False)
    args = ["data", str(tmp_path / "d.csv"), "--lookback", "10", "--horizon", "5", "--json",
            "--target", "x", "--features", "S", "--fill", "ffill", "--calendar"]
    assert main(args) == 0
    s = json.loads(capsys.readouterr().out)
    assert (s["rows"], s["target"], s["freq"], s["kind"]) == (200, "x", "D", "custom")
    assert (s["train_windows"], s["val_windows"], s["test_windows"]) == (126, 16, 36)
    assert s["x_channels"] == 1 + 3 and s["y_channels"] == 1


@pytest.mark.parametrize(
    "content, extra, match",
    [("date,x\n2020-01-01,1\n2020-01-02,nan\n2020-01-03,3\n", [], "missing/NaN/inf values"),
     ("date,x\n2020-01-02,1\n2020-01-01,2\n2020-01-03,3\n", [], "not sorted"),
     ("date,x\n2020-01-01,a\n2020-01-02,b\n2020-01-03,c\n", [], "non-numeric columns 'x'"),
     ("date,x\n2020-01-01,1\n2020-01-02,2\n2020-01-03,3\n", [], "longer than the 2-row training split"),
     ("date,x\n" + "".join(f"2020-01-{d:02d},{d}\n" for d in range(1, 11)), [], "the val split has 4 rows"),
     ("date,x\n2020-01-01,1\n2020-01-02,2\n2020-01-03,3\n", ["--target", "OT"], "unknown target 'OT'")],
)
def test_errors_one_line_exit_2_nothing_written(tmp_path, capsys, monkeypatch, content, extra, match):
    (tmp_path / "bad.csv").write_text(content)
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    rc = main(["data", "bad.csv", "--lookback", "3", "--horizon", "2", *extra])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("tsmix data: error: ") and match in err
    assert "Traceback" not in err and sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize("argv, match", [(["nope.csv", "--lookback", "3", "--horizon", "2"], "not found"),
                                         (["ETTh1", "--lookback", "-1", "--horizon", "2"], "lookback must")])
def test_argument_errors(argv, match, capsys):
    assert main(["data", *argv]) == 2
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1


def test_offline_benchmark_is_one_line(tmp_path, monkeypatch, capsys):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.delenv("TSMIX_DATA_DIR", raising=False)
    monkeypatch.setenv("TSMIX_DATA_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("TSMIX_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["data", "ETTh2", "--lookback", "96", "--horizon", "96"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert "ETT-small/ETTh2.csv" in err and f"127.0.0.1:{port}" in err and "TSMIX_DATA_DIR" in err
    assert list(tmp_path.iterdir()) == []
