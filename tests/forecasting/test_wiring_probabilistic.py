"""The output heads wired through the Forecaster: config fields, build_model, training loss, conformal
calibration, predict / evaluate with intervals and quantiles, run directories (format 2 and the older 1)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl
import pytest
import torch
from safetensors.torch import load_file, save_file

from tsmix.cli import main
from tsmix.errors import TsmixError
from tsmix.forecasting import Forecaster, ForecasterConfig, build_model, model_spec
from tsmix.forecasting.config import field_names

from .conftest import HORIZON, LOOKBACK, TINY

NEW_FIELDS = ("precision", "compile", "grad_accum", "loss", "quantiles", "level")


def _fit(frame: pd.DataFrame, model: str = "dlinear", **kw) -> Forecaster:
    return Forecaster(model, lookback=LOOKBACK, horizon=HORIZON, **{**TINY, **kw}).fit(frame)


def _values(frame: pd.DataFrame) -> np.ndarray:
    return frame.iloc[:, 1:].to_numpy()


def test_config_fields_normalized_and_old_configs_load():
    c = ForecasterConfig(loss="quantile", quantiles=[0.9, 0.1, 0.5], level=[95, 80])
    assert c.quantiles == (0.1, 0.5, 0.9) and c.level == (80.0, 95.0)  # JSON lists -> sorted tuples
    assert ForecasterConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    old = {k: v for k, v in ForecasterConfig().to_dict().items() if k not in NEW_FIELDS}
    assert ForecasterConfig.from_dict(old) == ForecasterConfig()  # a config.json written before: defaults
    assert set(NEW_FIELDS) <= set(field_names())
    with pytest.raises(TsmixError, match="grad_accum must be a positive int"):
        ForecasterConfig(grad_accum=0)
    with pytest.raises(TsmixError, match="precision must be one of 32, bf16-mixed"):
        ForecasterConfig(precision="16")


def test_engine_knobs_reach_the_engine(etth1_slice):
    from tsmix.forecasting.trainer import engine_config

    eng = engine_config(ForecasterConfig(precision="bf16-mixed", compile=True, grad_accum=4).resolved())
    assert (eng.precision, eng.compile, eng.grad_accum) == ("bf16-mixed", True, 4)
    fp32, bf16 = _fit(etth1_slice).metrics_, _fit(etth1_slice, precision="bf16-mixed").metrics_
    assert bf16["mse"] != fp32["mse"] and bf16["mse"] == pytest.approx(fp32["mse"], rel=0.05)


@pytest.mark.parametrize("model", ["patchtst", "itransformer", "dlinear"])
def test_build_model_with_mse_head_is_the_registered_network(model):
    cfg = ForecasterConfig(model=model, lookback=48, horizon=12, d_model=16, heads=2, layers=1, d_ff=32,
                           patch_len=8, stride=4, dropout=0.0).resolved()
    spec = model_spec(model)
    torch.manual_seed(0)
    wrapped = build_model(cfg, 3)
    torch.manual_seed(0)
    bare = spec.build(spec.make_config(cfg.to_dict()), 3)
    x = 5.0 + 2.0 * torch.randn(4, 48, 3)
    assert torch.equal(wrapped.eval()(x), bare.eval()(x))


def test_point_model_gets_conformal_intervals(etth1_slice, tmp_path):
    f = _fit(etth1_slice)
    cal = f._fitted.calibration
    assert cal is not None and cal.radii.shape[1:] == (HORIZON, etth1_slice.shape[1] - 1)
    plain = f.predict()
    assert list(plain.columns) == list(etth1_slice.columns)  # no level, no quantiles: today's frame
    p = f.predict(level=[95, 80], quantiles=[0.1, 0.5])
    assert p.attrs["interval_method"] == "split-conformal (scaled)" and cal.scaled
    assert list(p.columns[:7]) == ["date", "HUFL", "HUFL-lo-80", "HUFL-hi-80", "HUFL-lo-95", "HUFL-hi-95",
                                   "HUFL-q0.1"]
    cols = list(etth1_slice.columns[1:])
    np.testing.assert_array_equal(p[cols].to_numpy(), _values(plain))
    scale = np.asarray(f._fitted.scaler.scale_, dtype=np.float64)
    window = (etth1_slice[cols].to_numpy()[-LOOKBACK:] - f._fitted.scaler.mean_) / scale  # scaled units
    spread = np.sqrt(window.var(axis=0) + 1e-5)  # the forecast window's own scale s(x), per channel
    for lv in (80, 95):  # radius x s(x) -> original units: only the scale, never the mean (float32 bands)
        hi, lo = (p[[f"{c}-{side}-{lv}" for c in cols]].to_numpy() for side in ("hi", "lo"))
        np.testing.assert_allclose((hi - lo) / 2, cal.radius(lv) * spread * scale, rtol=1e-5)
    np.testing.assert_array_equal(p[[f"{c}-q0.1" for c in cols]].to_numpy(),
                                  p[[f"{c}-lo-80" for c in cols]].to_numpy())
    np.testing.assert_array_equal(p[[f"{c}-q0.5" for c in cols]].to_numpy(), _values(plain))

    first = f.predict(level=[80], h=5)
    assert len(first) == 5 and first.equals(f.predict(level=[80]).iloc[:5])
    with pytest.raises(TsmixError, match=f"h={HORIZON + 1} is longer than the {HORIZON} steps"):
        f.predict(h=HORIZON + 1)
    as_polars = f.predict(pl.from_pandas(etth1_slice), level=[80])
    assert isinstance(as_polars, pl.DataFrame) and "OT-hi-80" in as_polars.columns

    val = f.evaluate("val")["probabilistic"]  # the calibration split: coverage >= level by construction
    assert val["interval_method"] == "split-conformal (scaled)" and val["levels"] == ["80", "95"]
    assert val["coverage"]["80"] >= 0.8 and val["coverage"]["95"] >= 0.95
    assert f.metrics_["probabilistic"]["crps_method"].startswith("conformal quantile grid")

    run = f.save(tmp_path / "run")
    assert json.loads((run / "config.json").read_text())["format_version"] == 2
    g = Forecaster.load(run)
    assert g._fitted.calibration is not None
    pd.testing.assert_frame_equal(g.predict(level=[80, 95]), f.predict(level=[80, 95]))


@pytest.mark.parametrize("loss", ["quantile", "normal"])
@pytest.mark.parametrize("conformal", [False, True])
def test_probabilistic_heads_train_predict_and_evaluate(loss, conformal, etth1_slice, tmp_path):
    kw = dict(quantiles=[0.1, 0.5, 0.9]) if loss == "quantile" else {}
    f = _fit(etth1_slice, "patchtst", loss=loss, level=[80], conformal=conformal, **kw)
    m = f.metrics_
    cal = f._fitted.calibration
    method = f"{loss}+conformal (scaled)" if conformal else loss  # CQR of the head's bounds, or raw
    assert m["loss"] == loss and (cal is None) == (not conformal)
    if conformal:
        assert cal.adjusts_head and cal.levels == (80.0,) and cal.method == method
    best = f.history[m["best_epoch"] - 1]
    assert m["val_loss"] == best["val_loss"] and m["val_mse"] > 0  # stopped on the head's loss; MSE measured
    prob = m["probabilistic"]
    assert prob["interval_method"] == method and prob["levels"] == ["80"] and np.isfinite(prob["crps"])
    p = f.predict(level=[80])
    assert p.attrs["interval_method"] == method
    lo, point, hi = p["OT-lo-80"].to_numpy(), p["OT"].to_numpy(), p["OT-hi-80"].to_numpy()
    assert (lo <= point).all() and (point <= hi).all() and (hi > lo).any()
    run = f.save(tmp_path / "run")
    assert (run / "calibration.json").exists() == conformal
    pd.testing.assert_frame_equal(Forecaster.load(run).predict(quantiles=[0.1, 0.9], level=[80]),
                                  f.predict(quantiles=[0.1, 0.9], level=[80]))
    both = f.predict(quantiles=[0.1, 0.9], level=[80])  # the quantile columns are the band's bounds
    np.testing.assert_array_equal(both["OT-q0.1"].to_numpy(), both["OT-lo-80"].to_numpy())
    np.testing.assert_array_equal(both["OT-q0.9"].to_numpy(), both["OT-hi-80"].to_numpy())
    if loss == "quantile":
        with pytest.raises(TsmixError, match="quantile 0.3 was not trained"):
            f.predict(quantiles=[0.3])
    val = f.evaluate("val")["probabilistic"]  # conformalized on these windows: coverage >= level
    if conformal:
        assert val["coverage"]["80"] >= 0.8


@pytest.mark.parametrize("command", ["fit", "predict"])
def test_help_lists_the_new_flags(command, capsys):
    with pytest.raises(SystemExit) as stop:
        main([command, "--help"])  # a "%" in a help text must not break argparse's formatting
    text = capsys.readouterr().out
    assert stop.value.code == 0 and "--level" in text and "--quantiles" in text
    if command == "fit":
        assert all(flag in text for flag in ("--resume", "--checkpoint-dir", "--precision", "--grad-accum",
                                             "--compile", "--loss"))


def test_cli_quantile_fit_and_predict(etth1_slice, tmp_path, capsys):
    data = tmp_path / "s.csv"
    etth1_slice.to_csv(data, index=False)
    run, out = tmp_path / "run", tmp_path / "p.csv"
    argv = ["fit", "--dataset", str(data), "--model", "dlinear", "--lookback", str(LOOKBACK), "--horizon",
            str(HORIZON), "--epochs", "1", "--no-progress", "--loss", "quantile", "--quantiles",
            "0.1,0.5,0.9", "--level", "50", "80", "--out", str(run)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "intervals (quantile+conformal (scaled)):  coverage 50% " in printed
    cfg = json.loads((run / "config.json").read_text())["config"]
    assert cfg["quantiles"] == [0.1, 0.5, 0.9] and cfg["level"] == [50.0, 80.0]
    assert main(["predict", "--run", str(run), "--output", str(out), "--level", "80", "--quantiles",
                 "0.5"]) == 0
    assert "(intervals: quantile+conformal (scaled))" in capsys.readouterr().out
    assert list(pd.read_csv(out).columns[:5]) == ["date", "HUFL", "HUFL-lo-80", "HUFL-hi-80", "HUFL-q0.5"]


def _as_format_1(run: Path) -> None:
    """Rewrite a saved mse run as the code before the output heads wrote it."""
    weights = load_file(str(run / "model.safetensors"))
    save_file({k.removeprefix("base."): v.contiguous() for k, v in weights.items()},
              str(run / "model.safetensors"))
    doc = json.loads((run / "config.json").read_text())
    doc["format_version"] = 1
    doc["config"] = {k: v for k, v in doc["config"].items() if k not in NEW_FIELDS}
    (run / "config.json").write_text(json.dumps(doc))
    (run / "calibration.json").unlink()


def test_format_1_runs_still_load(etth1_slice, tmp_path):
    f = _fit(etth1_slice, "patchtst", revin_affine=True)
    run = f.save(tmp_path / "run")
    _as_format_1(run)
    keys = set(load_file(str(run / "model.safetensors")))
    assert "revin.weight" in keys and not any(k.startswith("base.") for k in keys)  # the encoder's layout
    g = Forecaster.load(run)
    np.testing.assert_array_equal(_values(g.predict()), _values(f.predict()))
    with pytest.raises(TsmixError, match="has no conformal calibration"):
        g.predict(level=[80])
    assert "probabilistic" not in g.evaluate("test", data=etth1_slice)
    doc = json.loads((run / "config.json").read_text())
    doc["format_version"] = 3
    (run / "config.json").write_text(json.dumps(doc))
    with pytest.raises(TsmixError, match="format version 3, newer than this tsmix reads"):
        Forecaster.load(run)


def test_refit_on_train_and_val_is_not_calibrated(etth1_slice):
    f = _fit(etth1_slice, train_on="train+val")
    assert f._fitted.calibration is None and "probabilistic" not in f.metrics_
    with pytest.raises(TsmixError, match="no conformal calibration"):
        f.predict(level=[80])
