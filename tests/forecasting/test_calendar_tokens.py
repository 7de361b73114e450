"""``calendar=True`` on wide data: the official iTransformer's timestamp tokens (calendar features of the
lookback as extra variate tokens, RevIN on the series only, the series' outputs only), end to end through
fit / predict / evaluate / save / load, and the same option on panels (formerly a panel option)."""

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
from tsmix.forecasting.config import ForecasterConfig
from tsmix.forecasting.panel_fit import PanelForecaster
from tsmix.forecasting.probabilistic.conformal import window_scale
from tsmix.forecasting.registry import build_model

L, H, N = 48, 12, 700
TINY = dict(model="itransformer", mixer="softmax", lookback=L, horizon=H, epochs=2, d_model=16, d_ff=16,
            layers=1, heads=2, dropout=0.0, batch_size=32, progress=False, seed=4)
HOURLY = ("hour_of_day", "day_of_week", "day_of_month", "day_of_year")


def _frame(n: int = N, freq: str = "h", seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return pd.DataFrame({
        "date": pd.date_range("2024-01-01", periods=n, freq=freq),
        "a": np.sin(2 * np.pi * t / 24) + 0.1 * rng.standard_normal(n),
        "OT": 3 + np.cos(2 * np.pi * t / 24) + 0.1 * rng.standard_normal(n),
    })


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return _frame()


@pytest.fixture(scope="module")
def fitted(frame) -> Forecaster:
    return Forecaster(**TINY, calendar=True).fit(frame)


# --- the network -------------------------------------------------------------------------------------

def _net(seed: int = 0, channels: int = 3, marks: int = 4) -> torch.nn.Module:
    torch.manual_seed(seed)
    cfg = ForecasterConfig(**{k: v for k, v in TINY.items() if k != "progress"}, calendar=True)
    return build_model(cfg, channels, marks).double().eval()


def test_marks_skip_revin_and_only_the_series_outputs_reach_the_head():
    net = _net()
    x = torch.randn(5, L, 3, dtype=torch.float64) * 4 + 2  # (B, L, C) series
    marks = torch.rand(5, L, 4, dtype=torch.float64) - 0.5  # (B, L, K) calendar positions
    out = net(torch.cat([x, marks], dim=-1))
    assert out.shape == (5, H, 3)  # the series only, not C + K
    # by hand: RevIN over the series, the marks as they are, the base over C + K, the series' outputs
    mu, sd = x.mean(1, keepdim=True), torch.sqrt(x.var(1, keepdim=True, unbiased=False) + net.revin.eps)
    raw = net.base(torch.cat([(x - mu) / sd, marks], dim=-1))[..., :3]
    torch.testing.assert_close(out, raw * sd + mu)
    # RevIN's equivariance holds for the series with the calendar fixed (up to its eps) ...
    torch.testing.assert_close(net(torch.cat([3 * x - 1, marks], dim=-1)), 3 * out - 1, rtol=1e-4, atol=1e-4)
    # ... and a shifted calendar is a different input (normalizing the marks would erase the shift)
    assert not torch.allclose(net(torch.cat([x, marks + 0.25], dim=-1)), out)


def test_without_marks_the_network_is_the_one_it_always_was():
    torch.manual_seed(0)
    cfg = ForecasterConfig(**{k: v for k, v in TINY.items() if k != "progress"})
    plain = build_model(cfg, 3).double().eval()
    torch.manual_seed(0)
    same = build_model(cfg, 3, 0).double().eval()
    x = torch.randn(2, L, 3, dtype=torch.float64)
    assert torch.equal(plain(x), same(x))
    with pytest.raises(TsmixError, match="expected 3 series \\+ 4 calendar features"):
        _net()(x)


def test_window_scale_keeps_the_series_channels():
    x = torch.randn(4, L, 5)
    full = window_scale(x)
    assert torch.equal(window_scale(x, None, 3), full[:, :3])
    assert torch.equal(window_scale(x, 1, 3), full[:, 1:2])  # MS: the forecast channel wins


# --- the Forecaster ----------------------------------------------------------------------------------

def test_fit_reads_the_calendar_and_scores_the_series(frame, fitted):
    m = fitted.metrics_
    assert m["calendar"] == list(HOURLY) and set(m["per_channel"]) == {"a", "OT"}
    assert np.isfinite(m["mse"]) and np.isfinite(m["val_mse"])
    assert fitted.model_.marks == 4 and fitted.model_.channels == 2
    p = prepare(frame, L, H, calendar=True)
    assert m["test_windows"] == len(p.test)


def test_same_seed_same_numbers_and_the_calendar_changes_the_fit(frame, fitted):
    again = Forecaster(**TINY, calendar=True).fit(frame)
    assert again.metrics_["mse"] == fitted.metrics_["mse"]
    plain = Forecaster(**TINY).fit(frame)
    assert plain.metrics_["calendar"] == [] and plain.metrics_["mse"] != fitted.metrics_["mse"]


def test_predict_reads_the_window_stamps(frame, fitted):
    a = fitted.predict(frame)
    later = frame.assign(date=frame["date"] + pd.Timedelta("5h"))  # same values, other hours of the day
    b = fitted.predict(later)
    assert not np.allclose(a[["a", "OT"]].to_numpy(), b[["a", "OT"]].to_numpy())
    assert b["date"].iloc[0] == later["date"].iloc[-1] + pd.Timedelta("1h")
    # predict = the network on [scaled series, calendar] of the last L rows, by hand
    f = fitted._fitted
    x = f.scaler.transform(frame[["a", "OT"]].to_numpy()[-L:])
    feats = prepare(frame, L, H, calendar=True).marks[-L:]
    with torch.no_grad():
        out = fitted.model_(torch.cat([torch.as_tensor(x, dtype=torch.float32), feats], 1)[None])[0]
    want = f.scaler.inverse_transform(out.double().numpy())
    np.testing.assert_allclose(a[["a", "OT"]].to_numpy(), want, rtol=1e-5, atol=1e-5)


def test_save_load_keeps_the_calendar(frame, fitted, tmp_path):
    run = fitted.save(tmp_path / "run")
    meta = json.loads((run / "config.json").read_text())
    assert meta["config"]["calendar"] is True and meta["data"]["calendar"] == list(HOURLY)
    g = Forecaster.load(run)
    assert g.config.calendar and g.metrics_["calendar"] == list(HOURLY)
    pd.testing.assert_frame_equal(g.predict(frame, level=[80]), fitted.predict(frame, level=[80]))
    assert g.evaluate(data=frame)["mse"] == pytest.approx(fitted.metrics_["mse"], rel=1e-6)
    meta["data"]["calendar"] = []  # a config saying calendar=True without features is damaged
    (run / "config.json").write_text(json.dumps(meta))
    with pytest.raises(TsmixError, match="is damaged"):
        Forecaster.load(run)


def test_data_at_another_step_is_refused(fitted):
    daily = _frame(400, freq="D")
    with pytest.raises(TsmixError, match="sampled every D"):
        fitted.predict(daily)
    with pytest.raises(TsmixError, match="calendar features"):
        fitted.evaluate(data=daily)


def test_production_and_ms_fits_take_the_calendar(frame, tmp_path):
    prod = Forecaster(**TINY, calendar=True, production=True).fit(frame)
    assert prod.metrics_["calendar"] == list(HOURLY) and prod.metrics_["mse"] is None
    assert len(prod.predict(level=[80])) == H
    run = prod.save(tmp_path / "prod")  # its plot forecasts after the last row: the kept context's stamps
    assert (run / "forecast.png").is_file()
    pd.testing.assert_frame_equal(Forecaster.load(run).predict(), prod.predict())
    ms = Forecaster(**TINY, calendar=True, features="MS").fit(frame)
    assert set(ms.metrics_["per_channel"]) == {"OT"} and ms.model_.channels == 2
    assert list(ms.predict(level=[80]).columns) == ["date", "OT", "OT-lo-80", "OT-hi-80"]


def test_a_channel_independent_model_refuses_the_calendar(frame):
    for model in ("patchtst", "dlinear"):
        with pytest.raises(TsmixError, match="use a model that mixes variates"):
            Forecaster(model, lookback=L, horizon=H, calendar=True, progress=False).fit(frame)


def test_cli_fit_with_calendar(frame, tmp_path, capsys):
    path = tmp_path / "hourly.csv"
    frame.to_csv(path, index=False)
    args = ["fit", "--model", "itransformer", "--dataset", str(path), "--lookback", str(L),
            "--horizon", str(H), "--epochs", "1", "--d-model", "16", "--d-ff", "16", "--layers", "1",
            "--heads", "2", "--calendar", "--out", str(tmp_path / "run"), "--no-progress"]
    assert main(args) == 0
    meta = json.loads((tmp_path / "run" / "config.json").read_text())
    assert meta["config"]["calendar"] is True and meta["data"]["calendar"] == list(HOURLY)


# --- panels: the same option (it was a panel option before) -----------------------------------------

def test_panel_calendar_joins_the_future_covariates_and_old_runs_load(tmp_path):
    from tsmix.datasets.panel_synthetic import synthetic_panel

    df, _ = synthetic_panel([160, 120], [0, 30], seed=1)
    df = df.drop(columns=["promo", "load"], errors="ignore")
    f = PanelForecaster("dlinear", lookback=24, horizon=6, epochs=1, progress=False, seed=3, calendar=True)
    f.fit(df)
    assert f.schema_.calendar == HOURLY and f.model_.layout.futr == 4  # calendar = future covariates
    run = f.save(tmp_path / "run")
    meta = json.loads((run / "config.json").read_text())
    assert meta["config"]["calendar"] is True and "calendar" not in meta["panel"]
    meta["panel"]["calendar"] = meta["config"].pop("calendar")  # as runs saved before the move
    (run / "config.json").write_text(json.dumps(meta))
    g = PanelForecaster.load(run)
    assert g.config.calendar and g.schema_.calendar == HOURLY


def test_an_unknown_calendar_feature_name_is_a_data_error():
    from tsmix.datasets.errors import DataError
    from tsmix.datasets.timefeatures import named_features

    stamps = pd.date_range("2024-01-01", periods=3, freq="h")
    assert named_features(stamps, ("hour_of_day",)).shape == (3, 1)
    with pytest.raises(DataError, match="unknown calendar features \\['hour_of_decade'\\]"):
        named_features(stamps, ("hour_of_decade",))
