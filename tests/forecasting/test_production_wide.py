"""Issue #18, a production fit of wide data: the epoch count picked on validation, then a refit on every
row up to the last timestamp (train_on="all"), no test scored; save/load, CLI, determinism, errors."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from tsmix.cli import main
from tsmix.datasets import prepare
from tsmix.errors import TsmixError
from tsmix.forecasting import Forecaster

L, H, N = 24, 6, 400
TINY = dict(model="dlinear", lookback=L, horizon=H, epochs=3, batch_size=32, progress=False, seed=3)


def _frame(n: int = N, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return pd.DataFrame({
        "date": pd.date_range("2024-01-01", periods=n, freq="h"),
        "a": np.sin(2 * np.pi * t / 24) + 0.1 * rng.standard_normal(n),
        "b": np.cos(2 * np.pi * t / 12) + 0.01 * t + 0.1 * rng.standard_normal(n),
        "OT": 5 + np.sin(2 * np.pi * t / 24 + 1) + 0.1 * rng.standard_normal(n),
    })


def _weights(f: Forecaster) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in f.model_.state_dict().items()}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return _frame()


@pytest.fixture(scope="module")
def prod(frame) -> Forecaster:
    return Forecaster(**TINY, production=True).fit(frame)


def test_production_trains_on_every_window_with_the_selected_epochs(frame, prod):
    m = prod.metrics_
    p = prepare(frame, L, H)
    assert m["production"] is True and m["train_on"] == "all"
    assert m["mse"] is None and m["mae"] is None and m["test_windows"] is None  # nothing held out
    assert m["train_windows"] == N - L - H + 1 > m["selection_train_windows"] == len(p.train)
    assert 1 <= m["best_epoch"] <= m["selection_epochs"] == 3 and m["epochs"] == m["best_epoch"]
    assert np.isfinite(m["val_mse"])  # the selection fit's held-out score
    assert all("val_loss" not in h for h in prod.history) and len(prod.history) == m["epochs"]
    fitted = prod._fitted
    assert fitted.config.train_on == "all" and fitted.config.epochs == m["epochs"]
    # the scaler is fit on every row (nothing is held out), not on the 70% training rows
    np.testing.assert_allclose(fitted.scaler.mean_, frame[["a", "b", "OT"]].to_numpy().mean(axis=0))
    normal = Forecaster(**TINY).fit(frame)
    assert normal.metrics_["production"] is False and normal.metrics_["mse"] is not None
    assert not _same(_weights(prod), _weights(normal))


def test_the_refit_runs_the_best_epoch_count_not_the_maximum(frame):
    f = Forecaster(**{**TINY, "epochs": 6, "lr": 0.5, "patience": 2}, production=True).fit(frame)
    m = f.metrics_
    assert m["epochs"] == m["best_epoch"] == len(f.history) < m["selection_epochs"] == 6


def test_the_last_rows_shape_the_production_model_only(frame, prod):
    """Reordering the last rows (the test part of a normal fit) changes the production model's weights but
    not a normal fit's, which never trains on them: the refit really saw the latest data. A reorder keeps
    every column's mean and spread, so the all-row scaler is the same: only the windows differ."""
    late = frame.copy()
    cols = ["a", "b", "OT"]
    late[cols] = np.concatenate([frame[cols].to_numpy()[:-10], frame[cols].to_numpy()[-10:][::-1]])
    np.testing.assert_allclose(late[cols].mean(), frame[cols].mean())
    assert not _same(_weights(prod), _weights(Forecaster(**TINY, production=True).fit(late)))
    assert _same(_weights(Forecaster(**TINY).fit(frame)), _weights(Forecaster(**TINY).fit(late)))


def test_same_seed_same_numbers_and_test_size_zero_is_production(frame, prod):
    again = Forecaster(**{**TINY}, test_size=0).fit(frame)  # test_size=0 on wide data: a production fit
    assert _same(_weights(prod), _weights(again))
    pd.testing.assert_frame_equal(prod.predict(), again.predict())
    timing = {"train_seconds", "seconds_per_epoch", "fit_seconds", "resumed_cpu_seconds"}
    assert {k: v for k, v in prod.metrics_.items() if k not in timing} == \
        {k: v for k, v in again.metrics_.items() if k not in timing}
    other = Forecaster(**{**TINY, "seed": 4}, production=True).fit(frame)
    assert not _same(_weights(prod), _weights(other))


def test_forecast_starts_after_the_last_timestamp(frame, prod):
    pred = prod.predict()
    assert len(pred) == H and pred["date"].iloc[0] == frame["date"].iloc[-1] + pd.Timedelta(hours=1)
    pd.testing.assert_frame_equal(pred, prod.predict(frame.tail(L)))  # the context is the last L rows
    bands = prod.predict(level=[80])  # conformal radii carried over from the selection fit
    assert (bands["OT-lo-80"] < bands["OT"]).all() and (bands["OT"] < bands["OT-hi-80"]).all()


def test_save_load_round_trip_and_no_test_to_evaluate(frame, tmp_path):
    csv = tmp_path / "wide.csv"
    frame.to_csv(csv, index=False)
    f = Forecaster(**TINY, production=True).fit(csv)
    run = f.save(tmp_path / "run")
    assert (run / "forecast.png").is_file()  # the forecast after the last row (no truth to draw)
    g = Forecaster.load(run)
    pd.testing.assert_frame_equal(f.predict(), g.predict())
    assert g.metrics_["production"] is True and g.metrics_["mse"] is None
    assert g.config.train_on == "all" and g.config.epochs == f.metrics_["epochs"]
    for est in (f, g):
        with pytest.raises(TsmixError, match="nothing was held out to test"):
            est.evaluate("test")
    # other (e.g. newer) data can be scored; it is scaled with the model's own scaler, as predict does
    assert g.evaluate("test", data=csv)["windows"] == len(prepare(frame, L, H).test)
    # the re-read data is scaled with the model's own (all-row) scaler, as at fit time
    assert g.evaluate("train")["mse"] == pytest.approx(f.evaluate("train")["mse"], rel=1e-6)
    # the stored config reproduces the shipped weights: train_on="all" for exactly that many epochs
    assert _same(_weights(f), _weights(Forecaster(**g.get_params()).fit(csv)))


def test_cli_fit_production_then_predict(frame, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    frame.to_csv("wide.csv", index=False)
    assert main(["fit", "--dataset", "wide.csv", "--model", "dlinear", "--lookback", str(L), "--horizon",
                 str(H), "--epochs", "2", "--batch-size", "32", "--no-progress", "--production",
                 "--out", "run"]) == 0
    assert "production fit" in capsys.readouterr().out
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["production"] is True and metrics["mse"] is None and metrics["train_on"] == "all"
    assert metrics["train_windows"] == N - L - H + 1
    assert main(["predict", "--run", "run", "--output", "fc.csv"]) == 0
    fc = pd.read_csv("fc.csv", parse_dates=["date"])
    assert len(fc) == H and fc["date"].iloc[0] == frame["date"].iloc[-1] + pd.Timedelta(hours=1)
    capsys.readouterr()
    assert main(["evaluate", "--run", "run"]) == 2
    assert "nothing was held out" in capsys.readouterr().err


def test_bad_production_requests_are_one_line_errors(frame, tmp_path):
    with pytest.raises(TsmixError, match="nothing is left to test: set test_size=0"):
        Forecaster(**TINY, production=True, test_size=5)
    with pytest.raises(TsmixError, match="drop train_on='train\\+val'"):
        Forecaster(**TINY, production=True, train_on="train+val").fit(frame)
    with pytest.raises(TsmixError, match="test_size apply to long-format panels"):
        Forecaster(**TINY, test_size=5).fit(frame)  # a positive test size is panel-only
    with pytest.raises(TsmixError, match="hist_exog apply to long-format panels"):
        Forecaster(**TINY, production=True, hist_exog=["a"]).fit(frame)
    # 100 rows, H=12: the 10% validation part holds no (L + H)-window to pick the epoch count on
    small = "picks the epoch count on the validation split, which is too small"
    with pytest.raises(TsmixError, match=small) as err:
        Forecaster(**{**TINY, "horizon": 12}, production=True).fit(_frame(100), out=tmp_path / "run")
    assert "\n" not in str(err.value) and not (tmp_path / "run").exists()


def test_cli_fit_production_on_a_panel_reports_no_test(tmp_path, monkeypatch, capsys):
    """The same flag on a long file: the summary line says no test was held out (mse is None)."""
    from tsmix.datasets.panel_synthetic import synthetic_panel

    monkeypatch.chdir(tmp_path)
    synthetic_panel([160, 120, 200], [0, 30, 10], seed=1)[0].to_csv("long.csv", index=False)
    assert main(["fit", "--dataset", "long.csv", "--model", "dlinear", "--lookback", str(L), "--horizon",
                 str(H), "--epochs", "1", "--no-progress", "--production", "--out", "run"]) == 0
    assert "no test held out (production)" in capsys.readouterr().out
