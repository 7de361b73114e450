"""`Forecaster` takes long-format panels: the fit dispatches to the panel estimator, and predict,
evaluate, save/load and cross_validation go through the same object as for wide data."""

from __future__ import annotations

import pandas as pd
import pytest

from tsmix.datasets.panel_synthetic import synthetic_panel
from tsmix.errors import TsmixError
from tsmix.forecasting import Forecaster
from tsmix.forecasting.panel_fit import PanelForecaster

L, H = 24, 6
TINY = dict(epochs=2, batch_size=32, lr=5e-3, lr_schedule="constant", progress=False, seed=3)


@pytest.fixture(scope="module")
def panel():
    df, static = synthetic_panel([160, 120, 200], [0, 30, 10], seed=1)
    return df[["unique_id", "ds", "y"]], static


def test_long_frame_fits_the_panel_estimator_like_panel_forecaster(panel, tmp_path):
    df, _ = panel
    f = Forecaster("dlinear", lookback=L, horizon=H, **TINY).fit(df)
    direct = PanelForecaster("dlinear", lookback=L, horizon=H, **TINY).fit(df)
    assert f.panel_ is not None and f.is_fitted
    assert f.metrics_["mse"] == direct.metrics_["mse"]  # same seed, same estimator underneath
    assert f.evaluate("test")["mse"] == pytest.approx(direct.evaluate("test")["mse"], rel=1e-12)
    out = f.predict(h=4)
    assert list(out.columns[:3]) == ["unique_id", "ds", "y_hat"]
    assert out.groupby("unique_id").size().tolist() == [4, 4, 4]
    pd.testing.assert_frame_equal(out, direct.predict(h=4))
    # intervals go through the facade to the panel estimator (50%: few validation windows suffice)
    pd.testing.assert_frame_equal(f.predict(level=[50], h=4), direct.predict(level=[50], h=4))
    run = f.save(tmp_path / "run")
    g = Forecaster.load(run)
    assert g.panel_ is not None
    pd.testing.assert_frame_equal(g.predict(h=4), out)


def test_long_csv_path_and_cross_validation(panel, tmp_path):
    df, _ = panel
    path = tmp_path / "long.csv"
    df.to_csv(path, index=False)
    f = Forecaster("dlinear", lookback=L, horizon=H, **TINY)
    assert f.fit(str(path)).panel_ is not None
    bt = Forecaster("dlinear", lookback=L, horizon=H, **TINY).cross_validation(df, n_windows=2)
    assert {"unique_id", "ds", "cutoff", "y", "y_hat"} <= set(bt.frame.columns)
    assert bt.frame["cutoff"].nunique() >= 2 and bt.metrics["mse"] > 0


def test_panel_options_pass_through_and_are_checked():
    with pytest.raises(TsmixError, match="hist_exog must be a list"):
        Forecaster("dlinear", lookback=L, horizon=H, hist_exog="load")
    f = Forecaster("dlinear", lookback=L, horizon=H, id_col="series", **TINY)
    assert f._is_panel(pd.DataFrame({"series": ["a"], "ds": [pd.Timestamp(0)], "y": [1.0]}))


def test_cli_fit_evaluate_predict_on_a_long_file(panel, tmp_path, capsys):
    from tsmix.cli import main

    df, _ = panel
    path = tmp_path / "long.csv"
    df.to_csv(path, index=False)
    run = tmp_path / "run"
    assert main(["fit", "--dataset", str(path), "--model", "dlinear", "--lookback", str(L),
                 "--horizon", str(H),
                 "--epochs", "1", "--no-progress", "--out", str(run)]) == 0
    assert "3 series" in capsys.readouterr().out
    assert main(["evaluate", "--run", str(run)]) == 2
    assert "--data FILE" in capsys.readouterr().err
    assert main(["evaluate", "--run", str(run), "--data", str(path)]) == 0
    out = tmp_path / "fc.csv"
    assert main(["predict", "--run", str(run), "--output", str(out), "--steps", "3"]) == 0
    fc = pd.read_csv(out)
    assert list(fc.columns) == ["unique_id", "ds", "y_hat"] and len(fc) == 9
    assert main(["predict", "--run", str(run), "--output", str(tmp_path / "x.csv"), "--steps", "9"]) == 2
    assert not (tmp_path / "x.csv").exists()


def test_panel_options_on_wide_data_are_refused_before_reading(tmp_path):
    f = Forecaster("dlinear", lookback=L, horizon=H, hist_exog=("x",), val_size=5, **TINY)
    with pytest.raises(TsmixError, match="hist_exog, val_size apply to long-format panels"):
        f.fit("ETTh1", out=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_get_params_keeps_panel_options_for_clones():
    f = Forecaster("dlinear", lookback=L, horizon=H, production=True, test_size=0, hist_exog=["x"], **TINY)
    params = f.get_params()
    assert params["production"] is True and params["hist_exog"] == ("x",) and params["test_size"] == 0
    assert "id_col" not in params  # options left at their defaults stay out
    assert Forecaster(**params).get_params() == params  # what sklearn's clone does
    assert "production" not in Forecaster("dlinear").get_params()
    f.set_params(production=False, test_size=None, lr=1e-3)
    assert "production" not in f.get_params() and f.get_params()["lr"] == 1e-3
    with pytest.raises(TsmixError, match="production=True refits on every row"):
        f.set_params(production=True, test_size=5)
