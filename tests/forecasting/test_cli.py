"""``tsmix fit / evaluate / predict`` end to end through tsmix.cli.main on a tiny config."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tsmix.cli import build_parser, main
from tsmix.forecasting import Forecaster
from tsmix.forecasting.cli import build_forecaster


@pytest.fixture(scope="module")
def csv_slice(data_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "etth1_slice.csv"
    pd.read_csv(data_dir / "ETT-small" / "ETTh1.csv", nrows=400).to_csv(path, index=False)
    return path


TINY = ["--model", "patchtst", "--lookback", "48", "--horizon", "12", "--epochs", "2", "--d-model", "16",
        "--heads", "2", "--layers", "1", "--d-ff", "32", "--patch-len", "8", "--stride", "4",
        "--batch-size", "32", "--lr", "2e-3", "--no-progress", "--mixer-option", "bias=false"]


def test_fit_evaluate_predict(csv_slice, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["fit", "--dataset", str(csv_slice), *TINY, "--out", str(run), "--seed", "5"]) == 0
    out = capsys.readouterr().out
    assert "test mse" in out and str(run) in out
    files = {p.name for p in run.iterdir()}
    assert {"config.json", "model.safetensors", "metrics.json", "forecast.png"} <= files
    metrics = json.loads((run / "metrics.json").read_text())
    assert {"mse", "mae", "val_mse", "epochs", "train_seconds", "params"} <= set(metrics)
    cfg = json.loads((run / "config.json").read_text())["config"]
    got = (cfg["seed"], cfg["d_model"], cfg["mixer_options"], cfg["progress"])
    assert got == (5, 16, {"bias": False}, False)

    assert main(["evaluate", "--run", str(run)]) == 0
    ev = capsys.readouterr().out
    assert f"mse {metrics['mse']:.4f}" in ev and "OT" in ev  # same number as at fit time
    assert main(["evaluate", "--run", str(run), "--eval-protocol", "paper", "--json"]) == 0
    paper = json.loads(capsys.readouterr().out)
    assert paper["protocol"] == "paper" and paper["windows"] % 32 == 0

    pred_file = tmp_path / "pred.csv"
    assert main(["predict", "--run", str(run), "--input", str(csv_slice), "--output", str(pred_file)]) == 0
    pred = pd.read_csv(pred_file, parse_dates=["date"])
    expected = Forecaster.load(run).predict(pd.read_csv(csv_slice, parse_dates=["date"]))
    assert pred.shape == (12, 8)
    pd.testing.assert_frame_equal(pred, expected, check_dtype=False, rtol=1e-12)


def test_user_errors_exit_2(csv_slice, tmp_path, capsys):
    assert main(["fit", "--dataset", str(csv_slice), *TINY, "--mixer", "no-such-mixer"]) == 2
    err = capsys.readouterr().err
    assert "unknown mixer" in err and err.count("\n") == 1
    assert main(["evaluate", "--run", str(tmp_path / "missing")]) == 2


def test_flags_map_onto_config_and_preset():
    parser = build_parser()
    args = parser.parse_args(["fit", "--dataset", "ETTh2", "--preset", "paper", "--model", "dlinear",
                              "--horizon", "336", "--lookback", "96", "--eval-protocol", "paper"])
    c = build_forecaster(args).config
    assert (c.batch_size, c.lr, c.epochs, c.patience, c.lr_schedule) == (32, 0.05, 10, 3, "type1")  # preset
    assert (c.lookback, c.horizon, c.eval_protocol) == (96, 336, "paper")  # explicit flags win
    args = parser.parse_args(["fit", "--dataset", "x.csv", "--model", "itransformer", "--prenorm",
                              "--grad-clip", "none", "--target", "HUFL", "--features", "MS"])
    c = build_forecaster(args).config
    assert (c.prenorm, c.grad_clip, c.target, c.features, c.lr) == (True, None, "HUFL", "MS", None)
