"""``tsmix tune --preset``: every trial starts from the preset's hyper-parameters, the space's
samples replace the preset's values, ``--set`` wins over both, and the study records the preset."""

from __future__ import annotations

import json

import optuna
import pytest

from tsmix.cli import main
from tsmix.errors import TsmixError
from tsmix.forecasting.presets import preset_params
from tsmix.tuning.study import SETUP_ATTR, run_study, study_base


def test_study_base_takes_the_preset_under_explicit_settings():
    paper = preset_params("paper", "itransformer", "ETTm1", 192)
    base = study_base("itransformer", "ETTm1", 192, preset="paper")
    assert {k: base[k] for k in paper} == paper  # lookback 96 and epochs 10 are the preset's
    assert base["lookback"] == 96 and base["lr_schedule"] == "type1" and base["d_model"] == 128
    base = study_base("itransformer", "ETTm1", 192, lookback=192, epochs=3, preset="paper",
                      fixed={"d_model": 64})
    assert base["lookback"] == 192 and base["epochs"] == 3 and base["d_model"] == 64
    assert base["heads"] == paper["heads"]
    plain = study_base("itransformer", "ETTm1", 192)
    assert plain["lookback"] == 336 and plain["epochs"] == 10 and "lr_schedule" not in plain


def test_preset_errors_name_the_fix(tmp_path):
    with pytest.raises(TsmixError, match="no paper preset for dataset.*drop --preset"):
        study_base("dlinear", str(tmp_path / "mine.csv"), 96, preset="paper")
    with pytest.raises(TsmixError, match="per benchmark dataset"):
        study_base("dlinear", object(), 96, preset="paper")  # a DataFrame has no preset
    with pytest.raises(TsmixError, match="no paper preset for model 'rlinear'"):
        study_base("rlinear", "ETTh1", 96, preset="paper")
    with pytest.raises(TsmixError, match="unknown preset 'papr'"):
        study_base("dlinear", "ETTh1", 96, preset="papr")


def test_show_space_lists_the_preset_values(data_dir, capsys):
    rc = main(["tune", "--model", "patchtst", "--dataset", "ETTh1", "--preset", "paper", "--set", "lr=0.001",
               "--show-space"])
    assert rc == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["preset"] == "paper" and shown["fixed"] == {"lr": 0.001}
    assert shown["base"] == preset_params("paper", "patchtst", "ETTh1", 96)
    assert "lr" not in shown["space"] and "dropout" in shown["space"]  # fixed leaves, searched stays
    assert main(["tune", "--model", "patchtst", "--preset", "paper", "--show-space"]) == 2
    assert "give --dataset" in capsys.readouterr().err


@pytest.mark.services
def test_trials_train_the_preset_and_the_study_records_it(data_dir, tmp_path, trial_forecasters):
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    kw = dict(model="dlinear", trials=1, epochs=1, storage=storage, study="p", refit=False, verbose=False,
              tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", data_dir=data_dir, threads=1)
    result = run_study("ETTh1", preset="paper", kernel_size=13, **kw)
    assert result.complete == 1
    (trial,) = trial_forecasters
    c, paper = trial.config, preset_params("paper", "dlinear", "ETTh1", 96)
    # the preset's training recipe (the Forecaster defaults differ: no schedule, no patience)
    assert (c.lr_schedule, c.patience, c.lookback) == (paper["lr_schedule"], paper["patience"], 336)
    assert c.kernel_size == 13 and c.epochs == 1  # --set and explicit epochs win
    sampled = optuna.load_study(study_name="p", storage=storage).trials[0].params
    assert c.lr == sampled["lr"] and c.batch_size == sampled["batch_size"]  # searched: the space's
    setup = optuna.load_study(study_name="p", storage=storage).user_attrs[SETUP_ATTR]
    assert setup["lr_schedule"] == "type1" and setup["patience"] == 3
    with pytest.raises(TsmixError, match="created for another search.*lr_schedule"):
        run_study("ETTh1", kernel_size=13, **{**kw, "trials": 2})  # the same study without the preset
