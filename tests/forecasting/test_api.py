"""Forecaster API: errors, params, frame types, protocols, presets, determinism, early stopping."""

from __future__ import annotations

import numpy as np
import pandas as pd
import polars as pl
import pytest
import torch

from tsmix.errors import TsmixError
from tsmix.forecasting import Forecaster, ForecasterConfig, paper_preset
from tsmix.forecasting.trainer import select_output

ROWS, L, H = 600, 48, 12
FAST = dict(epochs=2, batch_size=32, lr=2e-3, lr_schedule="constant", progress=False, seed=3)
SMALL_PATCH = dict(d_model=16, heads=2, layers=1, d_ff=32, patch_len=8, stride=4, dropout=0.0)


@pytest.fixture(scope="module")
def frame(data_dir) -> pd.DataFrame:
    return pd.read_csv(data_dir / "ETT-small" / "ETTh1.csv", nrows=ROWS, parse_dates=["date"])


@pytest.fixture(scope="module")
def fitted(frame) -> Forecaster:
    return Forecaster("dlinear", lookback=L, horizon=H, **FAST).fit(frame)


def test_errors_before_fit(frame, tmp_path):
    f = Forecaster("dlinear", lookback=L, horizon=H)
    for call in (f.predict, f.evaluate, lambda: f.save(tmp_path / "x"), lambda: f.history):
        with pytest.raises(TsmixError, match="not fitted"):
            call()


def test_bad_frames(fitted, frame):
    with pytest.raises(TsmixError, match=r"missing \['LULL'\]"):
        fitted.predict(frame.drop(columns=["LULL"]))
    reordered = frame[["date", *reversed(frame.columns[1:])]]
    with pytest.raises(TsmixError, match="order"):
        fitted.predict(reordered)
    with pytest.raises(TsmixError, match=f"lookback={L}"):
        fitted.predict(frame.iloc[: L - 1])


def test_bad_params():
    with pytest.raises(TsmixError, match="unknown hyper-parameter"):
        Forecaster("dlinear", learning_rate=0.1)
    with pytest.raises(TsmixError, match="model must be one of"):
        Forecaster("lstm")
    with pytest.raises(TsmixError, match="unknown mixer"):
        Forecaster("patchtst", mixer="no-such-mixer").fit(pd.DataFrame())  # before reading data
    with pytest.raises(TsmixError, match="kernel_size must be odd"):
        ForecasterConfig(model="dlinear", kernel_size=24)


def test_nan_loss_stops_and_names_epoch(frame, fitted):
    before = fitted.predict()
    with pytest.raises(TsmixError, match="epoch 1"):
        fitted.set_params(lr=1e30).fit(frame)  # weights explode in the first steps
    with pytest.raises(TsmixError, match="not fitted"):  # set_params dropped the model, fit left nothing
        fitted.predict()
    fitted.set_params(lr=FAST["lr"]).fit(frame)
    pd.testing.assert_frame_equal(fitted.predict(), before)  # same seed, same fit


def test_callback_exception_leaves_previous_fit(frame, fitted):
    before = fitted.predict()
    seen = []

    def stop(epoch, logs):
        seen.append((epoch, sorted(logs)))
        raise KeyboardInterrupt  # e.g. optuna.TrialPruned: must propagate unchanged

    with pytest.raises(KeyboardInterrupt):
        fitted.fit(frame, callbacks=[stop])
    assert seen == [(1, ["epoch", "lr", "seconds", "train_loss", "train_seconds", "val_loss"])]
    pd.testing.assert_frame_equal(fitted.predict(), before)


def test_get_set_params_and_clone():
    from sklearn.base import clone

    opts = {"bias": False}
    f = Forecaster("patchtst", mixer="softmax", lookback=96, horizon=24, d_model=32, mixer_options=opts)
    p = f.get_params()
    assert p["d_model"] == 32 and p["mixer_options"] == {"bias": False} and p["lr"] is None
    assert set(p) == {fl for fl in ForecasterConfig.__dataclass_fields__}
    g = clone(f)
    assert g is not f and g.get_params() == p
    assert f.set_params(lr=3e-4, horizon=48) is f and f.config.horizon == 48 and f.config.lr == 3e-4
    assert f.config.resolved().batch_size == 128  # the model default fills what was not given


def test_polars_in_polars_out(frame):
    pf = pl.from_pandas(frame)
    f = Forecaster("dlinear", lookback=L, horizon=H, **FAST).fit(pf)
    out = f.predict(pf.tail(L + 3))
    assert isinstance(out, pl.DataFrame) and out.columns == pf.columns and out.height == H
    assert out["date"][0] == frame["date"].iloc[-1] + pd.Timedelta(hours=1)
    assert isinstance(f.predict(), pd.DataFrame)  # default (fitted data) -> pandas


def test_eval_every_window_and_paper_protocol(fitted):
    f = fitted
    fair = f.evaluate("test", protocol="fair")
    paper = f.evaluate("test", protocol="paper")
    ws = f._fitted.prepared.test
    assert fair["windows"] == len(ws) and paper["windows"] == len(ws) // 32 * 32 < len(ws)
    # reference: one window at a time through plain indexing, numpy metrics
    model = f.model_
    with torch.no_grad():
        errs = np.stack([(model(x[None]) - y[None])[0].numpy() for x, y in (ws[i] for i in range(len(ws)))])
    assert fair["mse"] == pytest.approx(float((errs**2).mean()), rel=1e-5)
    assert fair["mae"] == pytest.approx(float(np.abs(errs).mean()), rel=1e-5)
    kept = errs[: paper["windows"]]
    assert paper["mse"] == pytest.approx(float((kept**2).mean()), rel=1e-5)
    ot = fair["per_channel"]["OT"]
    assert ot["mse"] == pytest.approx(float((errs[..., -1] ** 2).mean()), rel=1e-5)
    assert f.metrics_["mse"] == pytest.approx(fair["mse"])  # fit reports the configured (fair) protocol


def test_early_stopping_restores_best(frame):
    f = Forecaster("patchtst", lookback=L, horizon=H, **{**FAST, **SMALL_PATCH, "epochs": 6, "patience": 1,
                                                        "lr": 5e-2})
    f.fit(frame)
    vals = [h["val_loss"] for h in f.history]
    best = int(np.argmin(vals))
    assert f.metrics_["best_epoch"] == best + 1 and f.metrics_["val_mse"] == pytest.approx(min(vals))
    assert len(vals) == 6 or len(vals) == best + 2  # stopped one epoch after the best (patience 1)
    assert f.evaluate("val")["mse"] == pytest.approx(min(vals), rel=1e-6)  # best weights restored


def test_deterministic(frame):
    a = Forecaster("patchtst", lookback=L, horizon=H, **FAST, **{**SMALL_PATCH, "dropout": 0.2}).fit(frame)
    b = Forecaster("patchtst", lookback=L, horizon=H, **FAST, **{**SMALL_PATCH, "dropout": 0.2}).fit(frame)
    assert a.history[-1]["train_loss"] == b.history[-1]["train_loss"]
    pd.testing.assert_frame_equal(a.predict(), b.predict())


@pytest.mark.parametrize("features", ["S", "MS"])
def test_single_target_features(frame, features):
    f = Forecaster("patchtst", lookback=L, horizon=H, features=features, **FAST, **SMALL_PATCH).fit(frame)
    assert list(f.predict().columns) == ["date", "OT"]
    assert list(f.evaluate()["per_channel"]) == ["OT"]
    assert f.n_params > 0


def test_threads_respected(frame):
    old = torch.get_num_threads()
    try:
        Forecaster("dlinear", lookback=L, horizon=H, threads=1, **{**FAST, "epochs": 1}).fit(frame)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(old)


def test_presets_match_the_issue():
    p = paper_preset("patchtst", "ETTh1", 96)
    assert (p["lookback"], p["patch_len"], p["stride"], p["layers"], p["revin"]) == (336, 16, 8, 3, True)
    assert (p["d_model"], p["heads"], p["d_ff"], p["dropout"]) == (16, 4, 128, 0.3)
    assert (p["batch_size"], p["test_batch_size"], p["lr"], p["epochs"], p["lr_schedule"]) == (
        128, 128, 1e-4, 100, "type3")
    assert (p["norm"], p["prenorm"]) == ("batch", False)
    m = paper_preset("patchtst", "ettm2", 336)
    assert (m["d_model"], m["heads"], m["d_ff"], m["dropout"], m["patience"]) == (128, 16, 256, 0.2, 20)
    assert (m["lr_schedule"], m["pct_start"]) == ("onecycle", 0.4)
    w = paper_preset("patchtst", "Weather", 720)
    assert (w["d_model"], w["lr_schedule"], w["patience"]) == (128, "type3", 20)
    dl = {d: paper_preset("dlinear", d, 96) for d in ("ETTh1", "ETTh2", "ETTm1", "ETTm2", "Weather")}
    assert {d: (v["batch_size"], v["lr"]) for d, v in dl.items()} == {
        "ETTh1": (32, 0.005), "ETTh2": (32, 0.05), "ETTm1": (8, 1e-4), "ETTm2": (32, 0.001),
        "Weather": (16, 1e-4)}
    assert paper_preset("dlinear", "ETTm2", 336)["lr"] == paper_preset("dlinear", "ETTm2", 720)["lr"] == 0.01
    assert paper_preset("dlinear", "ETTm2", 192)["lr"] == 0.001
    d = dl["ETTh1"]
    got = (d["lookback"], d["kernel_size"], d["individual"], d["epochs"], d["patience"], d["lr_schedule"])
    assert got == (336, 25, False, 10, 3, "type1")
    assert d["test_batch_size"] == 32
    assert paper_preset("dlinear", "/some/dir/ETTh2.csv", 96)["lr"] == 0.05
    with pytest.raises(TsmixError, match="no paper preset for dataset"):
        paper_preset("dlinear", "Traffic", 96)
    f = Forecaster.from_preset("paper", "patchtst", "ETTh1", 192, mixer="softmax", patience=10)
    c = f.config
    assert (c.horizon, c.patience, c.d_model, c.model) == (192, 10, 16, "patchtst")


def test_ms_selects_target_channel():
    out = torch.arange(2 * 3 * 4.0).reshape(2, 3, 4)
    assert torch.equal(select_output(out, 2), out[..., 2:3])
    assert select_output(out, None) is out


def test_trainer_applies_schedules(frame):
    f = Forecaster("dlinear", lookback=L, horizon=H, **{**FAST, "epochs": 3, "lr": 1e-2, "patience": 5,
                                                        "lr_schedule": "type3", "first_epoch_lr_scale": 0.04})
    assert [h["lr"] for h in f.fit(frame).history] == pytest.approx([4e-4, 1e-2, 1e-2])
    f.set_params(lr_schedule="onecycle", pct_start=0.4).fit(frame)
    steps = len(f._fitted.prepared.train) // 32  # drop_last, as the official loader
    opt = torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=1e-2)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, epochs=3, steps_per_epoch=steps,
                                                pct_start=0.4)
    expected = []
    for _ in range(3):  # lr at the start of each epoch; the scheduler steps once per batch
        expected.append(opt.param_groups[0]["lr"])
        for _ in range(steps):
            opt.step()
            sched.step()
    assert [h["lr"] for h in f.history] == pytest.approx(expected)


def test_paper_protocol_needs_a_full_test_batch(frame):
    f = Forecaster("dlinear", lookback=L, horizon=H, eval_protocol="paper", test_batch_size=500, **FAST)
    with pytest.raises(TsmixError, match="full test batches of 500"):
        f.fit(frame)  # refused before training, not after
    assert not f.is_fitted
