"""The forecast plot draws the model's intervals: the head's own or a point model's conformal ones."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tsmix.forecasting import Forecaster, plotting

from .conftest import HORIZON, LOOKBACK, TINY


def _spy(monkeypatch) -> list[dict]:
    calls, draw = [], plotting.plot_window

    def spy(*args, **kw):
        calls.append({"forecast": args[5], **kw})
        return draw(*args, **kw)

    monkeypatch.setattr(plotting, "plot_window", spy)
    return calls


@pytest.mark.parametrize("loss, level, method", [("mse", None, "split-conformal (scaled)"),
                                                 ("quantile", [50, 90], "quantile+conformal (scaled)")])
def test_forecast_plot_draws_bands(etth1_slice: pd.DataFrame, tmp_path, monkeypatch, loss, level, method):
    f = Forecaster("dlinear", lookback=LOOKBACK, horizon=HORIZON, loss=loss, level=level, **TINY)
    f.fit(etth1_slice)
    calls = _spy(monkeypatch)
    png = f.plot_forecast(tmp_path / "f.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (call,) = calls
    bands = call["bands"]
    assert sorted(bands) == (level or [80.0, 95.0]) and call["band_label"] == method
    inner, outer = (bands[k] for k in sorted(bands))
    assert np.all(outer[0] <= inner[0] + 1e-9) and np.all(inner[1] <= outer[1] + 1e-9)  # nested
    if loss == "mse":  # conformal bands sit around the point forecast
        assert np.all(inner[0] < call["forecast"]) and np.all(call["forecast"] < inner[1])


def test_point_model_without_calibration_plots_no_bands(etth1_slice, tmp_path, monkeypatch):
    f = Forecaster("dlinear", lookback=LOOKBACK, horizon=HORIZON, train_on="train+val", **TINY)
    f.fit(etth1_slice)
    calls = _spy(monkeypatch)
    f.plot_forecast(tmp_path / "f.png")
    assert calls[0]["bands"] == {}


def test_panel_forecast_plot_draws_a_series_with_its_bands(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    df = pd.concat([pd.DataFrame({"unique_id": f"s{i}", "ds": pd.date_range("2020", periods=n, freq="h"),
                                  "y": np.sin(np.arange(n) / 6 + i) + 0.1 * rng.normal(size=n)})
                    for i, n in enumerate([300, 400, 350])])
    f = Forecaster("dlinear", lookback=24, horizon=6, val_size=60, **TINY).fit(df)
    calls = _spy(monkeypatch)
    assert f.plot_forecast(tmp_path / "p.png", channel="s1").read_bytes()[:4] == b"\x89PNG"
    (call,) = calls
    assert sorted(call["bands"]) == [80.0, 95.0] and "split-conformal" in call["band_label"]
    np.testing.assert_allclose(call["forecast"], f.predict().query("unique_id == 's1'")["y_hat"])
    with pytest.raises(Exception, match="not in the fitted panel"):
        f.plot_forecast(tmp_path / "q.png", channel="nope")
