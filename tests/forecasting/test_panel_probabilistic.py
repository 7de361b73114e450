"""Probabilistic panel models: heads through the covariate wrapper, per-series scaling undone for
locations and scales, per-series split conformal (coverage, pooled fallback, save/load), output columns,
backtests with intervals, and the one-line errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tsmix.datasets.panel_synthetic import synthetic_panel
from tsmix.errors import TsmixError
from tsmix.forecasting import Forecaster
from tsmix.forecasting.backtest import cross_validation
from tsmix.forecasting.panel_fit import PanelForecaster

L, H = 24, 6
TINY = dict(epochs=2, batch_size=32, lr=5e-3, lr_schedule="constant", progress=False, seed=3)


def dlinear(**kw) -> PanelForecaster:
    return PanelForecaster("dlinear", lookback=L, horizon=H, **{**TINY, **kw})


def future_frame(df: pd.DataFrame, promo: float = 1.0) -> pd.DataFrame:
    last = df.groupby("unique_id")["ds"].max()
    return pd.concat([pd.DataFrame({"unique_id": s, "ds": pd.date_range(t, periods=H + 1, freq="h")[1:],
                                    "promo": promo}) for s, t in last.items()], ignore_index=True)


@pytest.fixture(scope="module")
def panel_data():
    return synthetic_panel([160, 120, 200], [0, 30, 10], seed=1)


@pytest.fixture(scope="module")
def scaled_copies() -> pd.DataFrame:
    """Series b = 100 a + 5000: the same series after per-series scaling, so any model forecasts the same
    scaled values for both and b's bands must be exactly 100x a's around their own locations."""
    rng = np.random.default_rng(0)
    t = np.arange(300)
    a = np.sin(2 * np.pi * t / 12) + 0.3 * rng.standard_normal(len(t))
    ds = pd.date_range("2021-01-01", periods=len(t), freq="h")
    return pd.DataFrame({"unique_id": np.repeat(["a", "b"], len(t)), "ds": np.tile(ds, 2),
                         "y": np.concatenate([a, 100 * a + 5000])})


# --- heads: columns, non-crossing, scale undone ------------------------------------------------------

def test_quantile_panel_model_columns_and_non_crossing(panel_data):
    df, static = panel_data
    f = dlinear(loss="quantile", level=[80, 95], quantiles=[0.3], futr_exog=["promo"]).fit(df, static)
    assert f.model_.head.name == "quantile"
    trained = list(f.model_.head.levels)
    assert trained == [0.025, 0.1, 0.3, 0.5, 0.9, 0.975]
    p = f.predict(futr_df=future_frame(df), level=[80, 95], quantiles=trained)
    qcols = [f"y_hat-q{q:g}" for q in trained]
    assert list(p.columns) == ["unique_id", "ds", "y_hat", "y_hat-lo-80", "y_hat-hi-80", "y_hat-lo-95",
                               "y_hat-hi-95", *qcols]
    assert p.attrs["interval_method"] == "quantile" and len(p) == 3 * H
    q = p[qcols].to_numpy()
    assert (np.diff(q, axis=1) >= 0).all() and (np.diff(q, axis=1) > 0).any()  # sorted, not collapsed
    np.testing.assert_allclose(p["y_hat"], p["y_hat-q0.5"])
    np.testing.assert_allclose(p["y_hat-lo-80"], p["y_hat-q0.1"])
    np.testing.assert_allclose(p["y_hat-hi-95"], p["y_hat-q0.975"])
    # the point forecast without level/quantiles is the same y_hat, and h cuts every column
    plain = f.predict(futr_df=future_frame(df))
    pd.testing.assert_frame_equal(plain, p[["unique_id", "ds", "y_hat"]])
    short = f.predict(futr_df=future_frame(df), level=[80], h=2)
    assert len(short) == 3 * 2 and short.attrs["interval_method"] == "quantile"
    # the future covariate shifts every quantile by the same amount (a location shift keeps the order)
    p0 = f.predict(futr_df=future_frame(df, promo=0.0), quantiles=trained)
    shift = p[qcols].to_numpy() - p0[qcols].to_numpy()
    assert np.abs(shift).max() > 1e-6
    np.testing.assert_allclose(shift, np.repeat(shift[:, :1], len(qcols), axis=1), atol=1e-6)
    m = f.metrics_
    assert m["loss"] == "quantile" and np.isfinite(m["val_loss"]) and np.isfinite(m["val_mse"])
    prob = m["probabilistic"]
    assert prob["levels"] == ["80", "95"] and prob["crps"] > 0 and prob["pinball"] > 0
    assert set(prob["coverage"]) == {"80", "95"} and prob["width"]["95"] > prob["width"]["80"] > 0


@pytest.mark.parametrize("loss", ["normal", "quantile", "mse"])
def test_per_series_scaling_is_undone_for_locations_and_scales(scaled_copies, loss):
    qs = [0.25, 0.5, 0.75]
    trained = dict(quantiles=qs, level=[80]) if loss == "quantile" else {}
    f = dlinear(loss=loss, val_size=40, **trained).fit(scaled_copies)
    p = f.predict(level=[80], quantiles=qs if loss != "mse" else None)
    a, b = (p[p.unique_id == s].drop(columns=["unique_id", "ds"]).reset_index(drop=True) for s in "ab")
    sa, sb = f.schema_.y_scale
    ma, mb = f.schema_.y_mean
    assert sb / sa == pytest.approx(100, rel=1e-5)  # (values are stored in float32)
    # every location (point, bounds, quantiles) maps through its own series' mean and scale
    np.testing.assert_allclose((b - mb) / sb, (a - ma) / sa, rtol=1e-3, atol=1e-3)
    width_a, width_b = a["y_hat-hi-80"] - a["y_hat-lo-80"], b["y_hat-hi-80"] - b["y_hat-lo-80"]
    assert (width_a > 0).all()
    np.testing.assert_allclose(width_b, 100 * width_a, rtol=1e-3)


# --- conformal --------------------------------------------------------------------------------------

def test_conformal_per_series_coverage_on_iid_noise_panel():
    """Three i.i.d.-noise series that differ after scaling (a predictable sine under small noise, pure
    noise, in between): per-series radii cover each at the nominal rate, within sampling error; a radius
    pooled over the series (what per-series conformal fixes) over-covers the calm series."""
    rng = np.random.default_rng(7)
    n, val, test = 1200, 300, 300
    t = np.arange(n)
    sine = np.sin(2 * np.pi * t / 12)
    ys = {"calm": 3 * sine + 0.2 * rng.standard_normal(n), "mid": sine + rng.standard_normal(n),
          "noisy": 5 + 2 * rng.standard_normal(n)}
    ds = pd.date_range("2022-01-01", periods=n, freq="h")
    df = pd.concat([pd.DataFrame({"unique_id": k, "ds": ds, "y": v}) for k, v in ys.items()],
                   ignore_index=True)
    f = dlinear(val_size=val, test_size=test, epochs=3).fit(df)
    cal = f._fitted.calibration
    n_cal = val - H + 1
    assert cal is not None and cal.windows.tolist() == [n_cal] * 3
    w = f.forecast_windows("test", level=[80, 95])
    n_test = test - H + 1  # overlapping windows: about n_test independent time points per series
    for lv in (80, 95):
        p = lv / 100
        tol = 3 * np.sqrt(p * (1 - p) * (1 / n_cal + 1 / n_test))  # calibration + test sampling error
        inside = (w[f"y_hat-lo-{lv}"] <= w.y) & (w.y <= w[f"y_hat-hi-{lv}"])
        per = inside.groupby(w.unique_id).mean()
        assert (per - p).abs().max() < tol, (lv, per.to_dict(), tol)
    ev = f.evaluate(level=[80, 95])["probabilistic"]
    assert ev["interval_method"] == "split-conformal (per series)"
    assert abs(ev["coverage"]["80"] - 0.8) < 0.05 and ev["crps"] > 0
    # the pooled radius (a series unseen in training gets it) over-covers the calm series
    pooled = cal.calibration(["unseen"], [80]).radius(80)[:, 0]  # (H,) scaled units
    calm = w[w.unique_id == "calm"]
    sd = f.schema_.y_scale[0]
    err = (calm.y - calm.y_hat).abs().to_numpy().reshape(-1, H) / sd
    assert (err <= pooled).mean() > 0.9  # far above 0.8: pooled conformal is not per-series coverage


def test_pooled_fallback_is_labelled_and_strict_levels_name_val_size(panel_data):
    df, _ = panel_data
    f = dlinear(val_size=H + 5).fit(df)  # 6 windows per series: 80% per series (needs 4), 95% not (19)
    cal = f._fitted.calibration
    assert cal.windows.tolist() == [6, 6, 6]
    assert f.predict(level=[80]).attrs["interval_method"] == "split-conformal (per series)"
    assert f.predict(level=[90]).attrs["interval_method"] == "split-conformal (pooled)"  # 9 > 6, 18 pooled
    assert "pooled for 1 of 2" in cal.calibration(["s00000", "unseen"], [80]).method
    with pytest.raises(TsmixError, match="needs at least 19 validation windows.*val_size") as info:
        f.predict(level=[95])  # 18 pooled windows are too few as well
    assert "\n" not in str(info.value)
    # the radii come from fit_conformal: per series at 80, pooled at 90
    from tsmix.forecasting.probabilistic import fit_conformal

    own = fit_conformal(cal.scores[cal.series == 1][:, :, None], [80]).radii[0, :, 0]
    np.testing.assert_array_equal(cal.calibration(["s00001"], [80]).radius(80)[:, 0], own)
    pooled = fit_conformal(cal.scores[:, :, None], [90]).radii[0, :, 0]
    np.testing.assert_array_equal(cal.calibration(["s00001"], [90]).radius(90)[:, 0], pooled)


def test_calibration_save_load_round_trip(panel_data, tmp_path):
    df, static = panel_data
    f = dlinear(val_size=30, futr_exog=["promo"]).fit(df, static)
    fut = future_frame(df)
    p = f.predict(futr_df=fut, level=[80, 90], quantiles=[0.1, 0.5, 0.9])
    assert p.attrs["interval_method"].startswith("split-conformal")
    assert (p["y_hat-lo-80"] < p["y_hat"]).all() and (p["y_hat-hi-90"] > p["y_hat-hi-80"]).all()
    run = f.save(tmp_path / "run")
    assert (run / "conformal.safetensors").is_file()
    g = PanelForecaster.load(run)
    a, b = f._fitted.calibration, g._fitted.calibration
    np.testing.assert_array_equal(a.scores, b.scores)
    np.testing.assert_array_equal(a.series, b.series)
    q = g.predict(futr_df=fut, level=[80, 90], quantiles=[0.1, 0.5, 0.9])
    pd.testing.assert_frame_equal(q, p)
    assert q.attrs == p.attrs
    assert g.evaluate(df=df, static_df=static) == f.evaluate(df=df, static_df=static)
    assert f.metrics_["calibration"]["windows"] == 3 * (30 - H + 1)
    (run / "conformal.safetensors").unlink()
    with pytest.raises(TsmixError, match="conformal.safetensors is missing or damaged") as info:
        PanelForecaster.load(run)
    assert "\n" not in str(info.value)


def test_production_keeps_the_selection_models_calibration_in_the_refits_units(panel_data):
    df, _ = panel_data
    sel = dlinear(val_size=30, test_size=0).fit(df)
    prod = dlinear(val_size=30, production=True).fit(df)
    a, b = sel._fitted.calibration, prod._fitted.calibration
    ratio = sel.schema_.y_scale / prod.schema_.y_scale  # the refit scales on every row
    np.testing.assert_allclose(b.scores, a.scores * ratio[a.series, None], rtol=1e-6)
    assert prod.predict(level=[80]).notna().all().all()


# --- errors ------------------------------------------------------------------------------------------

def _one_line(call, match: str) -> None:
    with pytest.raises(TsmixError, match=match) as info:
        call()
    assert "\n" not in str(info.value)


def test_bad_requests_are_one_line_errors(panel_data):
    df, _ = panel_data
    point = dlinear(val_size=0, test_size=0, epochs=1).fit(df)  # no validation: no calibration
    assert point._fitted.calibration is None
    _one_line(lambda: point.predict(level=[80]), r"level=\[80.0\] need intervals.*val_size")
    _one_line(lambda: point.predict(quantiles=[0.1]), r"quantiles=\[0.1\] need intervals")
    _one_line(lambda: point.forecast_windows("test", level=[80]), "need intervals")
    calibrated = dlinear(val_size=20, epochs=1).fit(df)
    _one_line(lambda: calibrated.predict(level=[100]), "strictly between 0 and 100")
    _one_line(lambda: calibrated.predict(level=[0]), "strictly between 0 and 100")
    _one_line(lambda: calibrated.predict(quantiles=[0.2, 0.2]), "duplicated")
    _one_line(lambda: calibrated.predict(quantiles=[1.5]), "strictly between 0 and 1")
    _one_line(lambda: dlinear(loss="quantile", quantiles=[0.1, 1.2]), "strictly between 0 and 1")
    _one_line(lambda: dlinear(loss="pinball"), "loss must be one of")
    _one_line(lambda: dlinear(loss="normal", quantiles=[0.1]), "only apply to loss='quantile'")
    q = dlinear(loss="quantile", level=[80], epochs=1).fit(df)
    _one_line(lambda: q.predict(quantiles=[0.3]), "quantile 0.3 was not trained")
    _one_line(lambda: q.predict(level=[95]), "was not trained")


# --- backtests and the Forecaster facade --------------------------------------------------------------

def test_cross_validation_with_level_gives_interval_columns(panel_data, tmp_path):
    df, _ = panel_data
    bt = cross_validation(dlinear(val_size=20, epochs=1), df, n_windows=2, step=3, level=[80],
                          quantiles=[0.1, 0.9])
    f = bt.frame
    assert list(f.columns) == ["unique_id", "ds", "cutoff", "y", "y_hat", "y_hat-lo-80", "y_hat-hi-80",
                               "y_hat-q0.1", "y_hat-q0.9"]
    assert (f["y_hat-lo-80"] <= f.y_hat).all() and (f.y_hat <= f["y_hat-hi-80"]).all()
    np.testing.assert_allclose(f["y_hat-q0.1"], f["y_hat-lo-80"])
    inside = ((f["y_hat-lo-80"] <= f.y) & (f.y <= f["y_hat-hi-80"])).mean()
    assert bt.metrics["coverage-80"] == pytest.approx(inside)
    assert bt.metrics["width-80"] > 0 and {"coverage-80", "width-80"} <= set(bt.per_cutoff.columns)
    assert bt.plot(tmp_path / "bt.png").stat().st_size > 0  # bands drawn
    plain = cross_validation(dlinear(val_size=20, epochs=1), df, n_windows=2, step=3)
    pd.testing.assert_frame_equal(plain.frame, f[list(plain.frame.columns)])  # same forecasts
    assert "coverage-80" not in plain.metrics


def test_wide_cross_validation_with_level_maps_the_wide_band_columns():
    rng = np.random.default_rng(3)
    n = 400
    wide = pd.DataFrame({"date": pd.date_range("2023-01-01", periods=n, freq="h"),
                         "a": np.sin(np.arange(n) / 3) + 0.1 * rng.standard_normal(n),
                         "b": rng.standard_normal(n)})
    est = Forecaster("dlinear", lookback=L, horizon=H, features="M", **{**TINY, "epochs": 1})
    bt = cross_validation(est, wide, n_windows=2, level=[80])
    f = bt.frame
    assert {"y_hat-lo-80", "y_hat-hi-80"} <= set(f.columns) and set(f.unique_id) == {"a", "b"}
    assert (f["y_hat-lo-80"] <= f.y_hat).all() and (f.y_hat <= f["y_hat-hi-80"]).all()


def test_forecaster_facade_passes_the_loss_to_the_panel_path(panel_data):
    df, _ = panel_data
    f = Forecaster("dlinear", lookback=L, horizon=H, loss="normal", **{**TINY, "epochs": 1}).fit(df)
    assert f.panel_ is not None and f.panel_.model_.head.name == "normal"
    assert f.metrics_["probabilistic"]["crps_method"] == "closed-form normal"
    p = f.panel_.predict(level=[80])
    assert p.attrs["interval_method"] == "normal" and (p["y_hat-hi-80"] > p["y_hat-lo-80"]).all()
