"""Backtests: rolling origins equal the fitted model's own scoring, refits equal separate fits, the wide
Forecaster works through its public API, and the metrics are the documented ones."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tsmix.errors import TsmixError
from tsmix.forecasting import Forecaster
from tsmix.forecasting.backtest import cross_validation, season_length, smape
from tsmix.forecasting.panel_fit import PanelForecaster

ROWS, L, H = 700, 48, 12
HP = dict(lookback=L, horizon=H, epochs=2, batch_size=32, lr=5e-3, lr_schedule="constant", progress=False,
          seed=4)


@pytest.fixture(scope="module")
def ett(data_dir):
    wide = pd.read_csv(data_dir / "ETT-small" / "ETTh1.csv", nrows=ROWS, parse_dates=["date"])
    long = wide.melt(id_vars="date", var_name="unique_id", value_name="y").rename(columns={"date": "ds"})
    return wide, long


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(["unique_id", "cutoff", "ds"]).reset_index(drop=True)


def test_refit_false_equals_the_fitted_models_test_scoring(ett):
    _, long = ett
    test_size = 36
    n_windows = test_size - H + 1  # every test window, stride 1
    f = PanelForecaster("dlinear", val_size=48, test_size=test_size, **HP).fit(long)
    bt = cross_validation(PanelForecaster("dlinear", val_size=48, **HP), long, n_windows=n_windows, step=1)
    cv, own = _sorted(bt.frame), _sorted(f.forecast_windows("test"))
    assert len(cv) == 7 * n_windows * H and bt.frame["cutoff"].nunique() == n_windows
    keys = ["unique_id", "ds", "cutoff", "y"]
    pd.testing.assert_frame_equal(cv[keys], own[keys])
    np.testing.assert_allclose(cv["y_hat"], own["y_hat"], rtol=1e-6, atol=1e-6)
    # scaled per series with the fitted statistics, the backtest's errors are the model's test MSE/MAE
    idx = cv["unique_id"].map({s: i for i, s in enumerate(f.schema_.ids)}).to_numpy()
    err = (cv["y_hat"] - cv["y"]).to_numpy() / f.schema_.y_scale[idx]
    assert np.mean(err ** 2) == pytest.approx(f.metrics_["mse"], rel=1e-5)
    assert np.mean(np.abs(err)) == pytest.approx(f.metrics_["mae"], rel=1e-5)


def test_refit_true_equals_separate_fits_at_each_cutoff(ett):
    _, long = ett
    est = PanelForecaster("dlinear", **HP)
    bt = cross_validation(est, long, n_windows=2, step=H, refit=True)
    assert not est.is_fitted  # the estimator passed in is left as it was
    g = long.sort_values(["unique_id", "ds"])
    pos = g.groupby("unique_id").cumcount()
    for cut in (ROWS - 2 * H, ROWS - H):
        sep = PanelForecaster("dlinear", test_size=0, **HP).fit(g[pos < cut])
        pred = sep.predict(g[pos < cut])
        part = bt.frame[bt.frame["cutoff"] == g["ds"].iloc[cut - 1]]
        pd.testing.assert_frame_equal(part[["unique_id", "ds", "y_hat"]].reset_index(drop=True), pred)
    once = cross_validation(est, long, n_windows=2, step=H, refit=False)
    first = once.frame["cutoff"] == once.frame["cutoff"].min()
    # the first window is fitted alike either way
    np.testing.assert_array_equal(once.frame[first]["y_hat"], bt.frame[first]["y_hat"])
    assert not np.array_equal(once.frame[~first]["y_hat"].to_numpy(), bt.frame[~first]["y_hat"].to_numpy())


def test_wide_forecaster_backtests_through_its_public_api(ett, tmp_path):
    wide, _ = ett
    hp = dict(HP)
    bt = cross_validation(lambda: Forecaster("dlinear", **hp), wide, n_windows=2, step=H)
    cols = list(wide.columns[1:])
    assert len(bt.frame) == len(cols) * 2 * H and set(bt.frame["unique_id"]) == set(cols)
    cut = ROWS - 2 * H
    first = bt.frame[bt.frame["cutoff"] == wide["date"].iloc[cut - 1]]
    own = Forecaster("dlinear", **hp).fit(wide.iloc[:cut]).predict(wide.iloc[:cut])
    for c in cols:
        rows = first[first["unique_id"] == c]
        np.testing.assert_array_equal(rows["y_hat"], own[c].to_numpy())
        np.testing.assert_allclose(rows["y"], wide[c].iloc[cut : cut + H].to_numpy(), rtol=1e-6)
    # the documented metrics, by hand: MASE over each series' rows before the first cutoff, season 24
    f = bt.frame
    assert bt.season_length == 24
    assert bt.metrics["mse"] == pytest.approx(np.mean((f["y"] - f["y_hat"]) ** 2))
    ratio = 2 * np.abs(f["y"] - f["y_hat"]) / (np.abs(f["y"]) + np.abs(f["y_hat"]))
    assert bt.metrics["smape"] == pytest.approx(100 * ratio.mean())
    def naive_mae(v: np.ndarray) -> float:
        return float(np.mean(np.abs(v[24:] - v[:-24])))

    mase = [np.mean(np.abs(g["y"] - g["y_hat"])) / naive_mae(wide[c].to_numpy()[:cut])
            for c, g in f.groupby("unique_id")]
    assert bt.metrics["mase"] == pytest.approx(np.mean(mase), rel=1e-6)
    assert list(bt.per_cutoff["rows"]) == [len(cols) * H] * 2
    png = bt.plot(tmp_path / "bt.png", series=["OT", "HUFL"])
    assert png.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(TsmixError, match="not in the backtest"):
        bt.plot(tmp_path / "x.png", series=["nope"])


def test_season_lengths_and_smape_edges():
    assert [season_length(f) for f in ("h", "15min", "10min", "D", "B", "W-SUN", "MS", "QS", "YS", "7h")] == \
        [24, 96, 144, 7, 5, 52, 12, 4, 1, 1]
    assert smape(np.array([0.0, 1.0]), np.array([0.0, 1.0])) == 0.0
    assert smape(np.array([1.0]), np.array([-1.0])) == 200.0


def test_bad_backtest_arguments(ett):
    _, long = ett
    est = PanelForecaster("dlinear", **HP)
    for kw, match in ((dict(n_windows=0), "n_windows must be"), (dict(step=0), "step must be"),
                      (dict(refit=-1), "refit must be"), (dict(n_windows=65, step=10), "n_windows=65")):
        with pytest.raises(TsmixError, match=match):
            cross_validation(est, long, **kw)
    with pytest.raises(TsmixError, match="PanelForecaster, a Forecaster"):
        cross_validation(object(), long)


def test_backtest_command(tmp_path, capsys):
    import argparse

    from tsmix.datasets.panel_synthetic import synthetic_panel
    from tsmix.forecasting.backtest_cli import add_backtest_command

    df, static = synthetic_panel([120, 150], seed=2)
    df.to_csv(tmp_path / "long.csv", index=False)
    static.to_csv(tmp_path / "static.csv", index=False)
    parser = argparse.ArgumentParser()
    add_backtest_command(parser.add_subparsers())
    argv = ["backtest", "--data", str(tmp_path / "long.csv"), "--static", str(tmp_path / "static.csv"),
            "--futr-exog", "promo", "--model", "dlinear", "--lookback", "24", "--horizon", "6",
            "--epochs", "1", "--no-progress", "--n-windows", "2", "--output", str(tmp_path / "cv.csv"),
            "--plot", str(tmp_path / "cv.png")]
    args = parser.parse_args(argv)
    assert args.func(args) == 0
    assert "backtest 2 window(s), 24 forecast rows" in capsys.readouterr().out
    cv = pd.read_csv(tmp_path / "cv.csv")
    assert list(cv.columns) == ["unique_id", "ds", "cutoff", "y", "y_hat"] and len(cv) == 24
    assert (tmp_path / "cv.png").read_bytes()[:4] == b"\x89PNG"
    bad = parser.parse_args([*argv[:-4], "--refit", "sometimes"])
    with pytest.raises(TsmixError, match="--refit must be"):
        bad.func(bad)


def test_backtest_command_level_adds_interval_columns(tmp_path, capsys):
    import argparse

    from tsmix.forecasting.backtest_cli import add_backtest_command

    t = np.arange(400)
    noise = np.random.default_rng(0).normal(0, 0.1, len(t))
    pd.DataFrame({"date": pd.date_range("2020", periods=len(t), freq="h"),
                  "a": np.sin(t / 8) + noise}).to_csv(tmp_path / "wide.csv", index=False)
    parser = argparse.ArgumentParser()
    add_backtest_command(parser.add_subparsers())
    args = parser.parse_args(["backtest", "--data", str(tmp_path / "wide.csv"), "--model", "dlinear",
                              "--lookback", "24", "--horizon", "6", "--epochs", "1", "--no-progress",
                              "--n-windows", "2", "--level", "80", "95",
                              "--output", str(tmp_path / "cv.csv")])
    assert args.func(args) == 0
    assert "coverage-80" in capsys.readouterr().out
    cv = pd.read_csv(tmp_path / "cv.csv")
    assert list(cv.columns)[4:] == ["y_hat", "y_hat-lo-80", "y_hat-hi-80", "y_hat-lo-95", "y_hat-hi-95"]
    assert (cv["y_hat-lo-95"] <= cv["y_hat-lo-80"]).all() and (cv["y_hat-hi-80"] <= cv["y_hat-hi-95"]).all()
