"""The panel estimator: long ETTh1 against the wide Forecaster, covariates end to end, production fits,
save/load, and the bad-input catalogue (one line, nothing written)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import polars as pl
import pytest
import torch

from tsmix.datasets import load, split_borders
from tsmix.datasets.panel_split import PanelSplit
from tsmix.datasets.panel_synthetic import synthetic_panel
from tsmix.errors import TsmixError
from tsmix.forecasting import Forecaster
from tsmix.forecasting.backtest import cross_validation
from tsmix.forecasting.panel_fit import PanelForecaster

L, H = 24, 6
TINY = dict(epochs=2, batch_size=32, lr=5e-3, lr_schedule="constant", progress=False, seed=3)


def future_frame(df: pd.DataFrame, steps: int = H, promo: float = 1.0) -> pd.DataFrame:
    last = df.groupby("unique_id")["ds"].max()
    return pd.concat([pd.DataFrame({"unique_id": s, "ds": pd.date_range(t, periods=steps + 1, freq="h")[1:],
                                    "promo": promo}) for s, t in last.items()], ignore_index=True)


@pytest.fixture(scope="module")
def panel_data():
    return synthetic_panel([160, 120, 200], [0, 30, 10], seed=1)


# --- ETTh1 long = wide ------------------------------------------------------------------------------

def test_etth1_long_scores_the_wide_models_weights_identically(data_dir):
    """Same seed, DLinear (shared): the two fits see different batches (the wide path batches 32 time
    windows x 7 channels, the panel path 32 single-series windows), so their weights differ; the SAME
    weights score identically through both paths, overall and per series (to float32 rounding: the wide
    model runs 7 channels through one matmul, the panel model one, so BLAS may sum in another order)."""
    lb, hz = 96, 24
    s = load("ETTh1", data_dir=data_dir)
    long = s.to_pandas().melt(id_vars="date", var_name="unique_id", value_name="y")
    long = long.rename(columns={"date": "ds"})
    hp = dict(lookback=lb, horizon=hz, individual=False, epochs=1, progress=False, seed=5)
    wide = Forecaster("dlinear", **hp).fit("ETTh1", data_dir=data_dir)
    ett_borders = PanelSplit(borders=split_borders(s.n_rows, lb, "etth"))
    panel = PanelForecaster("dlinear", **hp).fit(long, split=ett_borders)
    assert panel.metrics_["test_windows"] == wide.metrics_["test_windows"] * s.n_channels
    assert panel.metrics_["mse"] != wide.metrics_["mse"]  # different batches -> different weights

    for src, dst in ((wide.model_, panel.model_.base), (panel.model_.base, wide.model_)):
        dst.load_state_dict(src.state_dict())
        w, p = wide.evaluate("test"), panel.evaluate("test")
        assert p["mse"] == pytest.approx(w["mse"], rel=1e-7) and p["mae"] == pytest.approx(w["mae"], rel=1e-7)
        for sid, m in p["per_series"].items():
            assert m["mse"] == pytest.approx(w["per_channel"][sid]["mse"], rel=1e-7)
    # the forecasts themselves: the wide model's next 24 steps = the panel's, per series (original units)
    pw = wide.predict()
    pp = panel.predict().pivot(index="ds", columns="unique_id", values="y_hat")
    np.testing.assert_allclose(pp[list(s.columns)].to_numpy(), pw[list(s.columns)].to_numpy(), rtol=1e-5)


# --- fit / predict / save / load with every covariate kind ------------------------------------------

def test_fit_predict_save_load_with_covariates(panel_data, tmp_path):
    df, static = panel_data
    f = PanelForecaster("patchtst", lookback=L, horizon=H, d_model=16, heads=2, layers=1, d_ff=32,
                        patch_len=8, stride=4, dropout=0.0, hist_exog=["load"], futr_exog=["promo"], **TINY)
    f.fit(df, static)
    m = f.metrics_
    assert np.isfinite(m["mse"]) and set(m["per_series"]) == {"s00000", "s00001", "s00002"}
    assert m["test_windows"] == 3 * (H - H + 1) and m["best_epoch"] >= 1
    fut = future_frame(df)
    p = f.predict(futr_df=fut)
    assert list(p.columns) == ["unique_id", "ds", "y_hat"] and len(p) == 3 * H
    last = df.groupby("unique_id")["ds"].max()
    assert (p.groupby("unique_id")["ds"].min() == last + pd.Timedelta("1h")).all()
    assert (p.groupby("unique_id")["y_hat"].mean() - df.groupby("unique_id")["y"].mean()).abs().max() < 50
    p3 = f.predict(futr_df=fut, h=3)
    pd.testing.assert_frame_equal(p3, p[p.groupby("unique_id").cumcount() < 3].reset_index(drop=True))
    assert isinstance(f.predict(pl.from_pandas(df), futr_df=fut, static_df=static), pl.DataFrame)
    changed = f.predict(futr_df=future_frame(df, promo=0.0))  # the future covariate reaches the forecast
    assert not np.allclose(changed["y_hat"], p["y_hat"])

    run = f.save(tmp_path / "run")
    assert {"config.json", "model.safetensors", "metrics.json", "history.parquet", "static.parquet"} <= \
        {q.name for q in run.iterdir()}
    from tsmix.forecasting.panel_fit_io import is_panel_run

    assert is_panel_run(run) and not is_panel_run(tmp_path)
    g = PanelForecaster.load(run)
    pd.testing.assert_frame_equal(g.predict(futr_df=fut), p)
    tail = df.groupby("unique_id").tail(L + 5)
    pd.testing.assert_frame_equal(g.predict(tail, futr_df=fut, static_df=static),
                                  f.predict(tail, futr_df=fut, static_df=static))
    assert g.evaluate(df=df, static_df=static)["mse"] == pytest.approx(m["mse"], rel=1e-12)
    f.save(run)  # an earlier run directory is replaced in place
    assert PanelForecaster.load(run).metrics_["mse"] == m["mse"]


def test_production_refits_on_every_row_for_the_best_epoch(panel_data):
    df, _ = panel_data
    hp = dict(lookback=L, horizon=H, val_size=12, **{**TINY, "epochs": 3})
    sel = PanelForecaster("dlinear", test_size=0, **hp).fit(df)
    assert sel.metrics_["mse"] is None and np.isfinite(sel.metrics_["val_mse"])
    with pytest.raises(TsmixError, match="test_size=0"):
        sel.evaluate()
    prod = PanelForecaster("dlinear", production=True, **hp).fit(df)
    assert prod.metrics_["epochs"] == sel.metrics_["best_epoch"] == prod.metrics_["best_epoch"]
    assert prod.metrics_["val_mse"] == sel.metrics_["val_mse"]
    means = df.groupby("unique_id")["y"].mean()  # scaling fit on every row: the model saw the latest data
    np.testing.assert_allclose(prod.schema_.y_mean, means.to_numpy(), rtol=1e-6)
    assert not np.allclose(sel.schema_.y_mean, means.to_numpy(), rtol=1e-6)
    assert (prod.predict().groupby("unique_id")["ds"].min() == df.groupby("unique_id")["ds"].max()
            + pd.Timedelta("1h")).all()
    with pytest.raises(TsmixError, match="nothing is left to test"):
        PanelForecaster("dlinear", production=True, test_size=6)


# --- bad input: one line, nothing written -----------------------------------------------------------

def _fails(call, match: str, out) -> None:
    with pytest.raises(TsmixError, match=match) as info:
        call()
    assert "\n" not in str(info.value)
    assert not out.exists()


def test_bad_inputs_are_one_line_errors_and_write_nothing(panel_data, tmp_path):
    df, static = panel_data
    out = tmp_path / "run"

    def est(**kw):
        return PanelForecaster("dlinear", lookback=L, horizon=H, **{**TINY, "epochs": 1}, **kw)

    _fails(lambda: est().fit(pd.concat([df, df.iloc[:1]]), out=out), "duplicated", out)
    mixed = df.copy()
    s1 = mixed.unique_id == "s00001"
    mixed.loc[s1, "ds"] = pd.date_range("2020-01-01", periods=int(s1.sum()), freq="30min")
    _fails(lambda: est().fit(mixed, out=out), "mixed frequencies", out)
    _fails(lambda: est().fit(df, static[static.unique_id != "s00002"], out=out), "no row for series", out)
    f = est(futr_exog=["promo"]).fit(df, static)
    new_static = static.assign(region="mars")
    _fails(lambda: f.predict(df, futr_df=future_frame(df), static_df=new_static), "unseen in training", out)
    _fails(lambda: f.predict(futr_df=future_frame(df, steps=H - 2)), "does not cover the horizon", out)
    _fails(lambda: f.predict(futr_df=future_frame(df), h=H + 1), "h must be", out)
    _fails(lambda: cross_validation(est(), df, n_windows=40, step=3), "n_windows=40", out)
    _fails(lambda: est(hist_exog="load"), "list of column names", out)


def test_training_is_deterministic_and_dispatch_helper(panel_data):
    from tsmix.forecasting.panel_fit import is_long_frame

    df, _ = panel_data
    a = PanelForecaster("dlinear", lookback=L, horizon=H, **TINY).fit(df)
    b = PanelForecaster("dlinear", lookback=L, horizon=H, **TINY).fit(df)
    for x, y in zip(a.model_.state_dict().values(), b.model_.state_dict().values()):
        assert torch.equal(x, y)
    assert is_long_frame(df) and not is_long_frame(df.drop(columns="unique_id"))
    assert not is_long_frame("ETTh1")
