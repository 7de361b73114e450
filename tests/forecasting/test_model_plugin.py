"""A model added as one file, with no other edit: registered by importing it (Python) or through
``$TSMIX_PLUGINS`` (CLI), then fitted, tuned, preset, benchmarked and round-tripped like the
built-in ones. The toy is written to a temporary file and unregistered afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import optuna
import pytest

from tsmix.errors import TsmixError
from tsmix.forecasting import Forecaster, ForecasterConfig, available_models, model_spec, paper_preset
from tsmix.forecasting.benchmark.suites import NO_MIXER, SUITES, expand
from tsmix.forecasting.registry import PLUGINS_ENV, load_plugin, unregister_model
from tsmix.tuning import spaces

NAME = "toy-linear"
TOY = textwrap.dedent('''
    """A tiny plugin model: one shared linear map from the lookback to the horizon."""
    from dataclasses import dataclass

    from torch import nn

    from tsmix.forecasting.registry import TrainDefaults, register_model


    @dataclass(frozen=True, kw_only=True)
    class ToyConfig:
        lookback: int  # L
        horizon: int  # H
        revin: bool = True  # a ForecasterConfig field: taken from the flat config by name
        bias: bool = True  # not a ForecasterConfig field: always this default


    def space(trial):
        return {"lr": trial.suggest_float("lr", 1e-3, 1e-2, log=True)}


    def paper(dataset, horizon):
        return {"lookback": 48, "horizon": horizon, "batch_size": 16}


    @register_model("toy-linear", config=ToyConfig, space=space, presets={"paper": paper},
                    uses_mixer=False, training=TrainDefaults(batch_size=32, lr=5e-3, lr_schedule="constant"))
    class ToyLinear(nn.Module):
        def __init__(self, cfg, channels):
            super().__init__()
            self.cfg = cfg
            self.proj = nn.Linear(cfg.lookback, cfg.horizon, bias=cfg.bias)

        def forward(self, x):  # (B, L, C) -> (B, H, C)
            if self.cfg.revin:
                mean = x.mean(1, keepdim=True)
                return self.proj((x - mean).transpose(1, 2)).transpose(1, 2) + mean
            return self.proj(x.transpose(1, 2)).transpose(1, 2)
''')


@pytest.fixture
def toy_file(tmp_path):
    path = tmp_path / "toy_model.py"
    path.write_text(TOY)
    yield path
    unregister_model(NAME)
    sys.modules.pop("tsmix_plugin_toy_model", None)


def test_toy_model_registers_and_fits_through_the_forecaster(toy_file, etth1_slice, tmp_path, model_check):
    assert NAME not in available_models()
    load_plugin(toy_file)
    assert NAME in available_models() and available_models() == sorted(available_models())
    spec = model_spec(NAME)
    assert not spec.uses_mixer and spec.config.__name__ == "ToyConfig"

    cfg = ForecasterConfig(model=NAME, lookback=48, horizon=12).resolved()
    assert (cfg.batch_size, cfg.lr, cfg.lr_schedule, cfg.d_model) == (32, 5e-3, "constant", None)
    assert spec.make_config(cfg.to_dict()).bias is True

    f = model_check(NAME, "softmax", etth1_slice, tmp_path)  # fit, predict, save/load round trip
    assert f.n_params == 48 * 12 + 12

    params = spaces.suggest(optuna.create_study().ask(), NAME, ["softmax"])  # its own space, no mixer
    assert set(params) == {"lr"}
    assert paper_preset(NAME, "etth1", 24) == {"lookback": 48, "horizon": 24, "batch_size": 16}
    runs = expand(SUITES["smoke"], models=[NAME])
    assert [(r.model, r.mixer, r.lookback) for r in runs] == [(NAME, NO_MIXER, 96)]

    unregister_model(NAME)
    with pytest.raises(TsmixError, match="model must be one of"):
        Forecaster.load(tmp_path / "run")


def test_toy_model_through_the_cli(toy_file, data_dir, tmp_path):
    import pandas as pd

    csv = tmp_path / "slice.csv"
    pd.read_csv(data_dir / "ETT-small" / "ETTh1.csv", nrows=400).to_csv(csv, index=False)
    env = {**os.environ, PLUGINS_ENV: str(toy_file), "OMP_NUM_THREADS": "1"}
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "tsmix.cli", "fit", "--dataset", str(csv), "--model", NAME, "--lookback",
           "48", "--horizon", "12", "--epochs", "1", "--no-progress", "--out", str(run)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "test mse" in done.stdout
    cfg = json.loads((run / "config.json").read_text())["config"]
    assert (cfg["model"], cfg["batch_size"], cfg["lr"]) == (NAME, 32, 5e-3)
    out = tmp_path / "pred.csv"
    done = subprocess.run([sys.executable, "-m", "tsmix.cli", "predict", "--run", str(run), "--output",
                           str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert np.isfinite(pd.read_csv(out).iloc[:, 1:].to_numpy()).all()

    no_plugin = {k: v for k, v in env.items() if k != PLUGINS_ENV}
    done = subprocess.run(cmd, env=no_plugin, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "invalid choice: 'toy-linear'" in done.stderr


def test_bad_plugin_is_a_clear_error(tmp_path):
    with pytest.raises(TsmixError, match="does not exist"):
        load_plugin(tmp_path / "missing.py")
    with pytest.raises(TsmixError, match="cannot import plugin module"):
        load_plugin("no_such_module_xyz")
    broken = tmp_path / "broken_model.py"
    broken.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(TsmixError, match=r"broken_model.py failed to import: RuntimeError: boom"):
        load_plugin(broken)
    assert "tsmix_plugin_broken_model" not in sys.modules
