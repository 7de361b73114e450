"""benchmarks/anchors/run.py: the RLinear member's settings replayed from the committed trials CSV."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("anchors_run", ROOT / "benchmarks" / "anchors" / "run.py")
run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run)

HEADER = ("study,trial,state,val_mse,best,param_batch_size,param_dropout,param_individual,param_lr,"
          "param_revin_affine,param_lookback\n")


def test_best_finished_trial_is_replayed_with_its_types(tmp_path):
    path = tmp_path / "studies.csv"
    path.write_text(HEADER
                    + "rlinear-ETTh1-336,0,COMPLETE,1.20,False,32,0.5,True,0.001,True,\n"
                    + "rlinear-ETTh1-336,1,COMPLETE,1.10,True,16,0.25,False,0.002,False,\n"
                    # pruned: never the best, however low its value
                    + "rlinear-ETTh1-336,2,PRUNED,0.50,False,64,0.1,False,0.003,False,\n"
                    + "rlinear-ETTh2-336,0,COMPLETE,0.30,True,64,0.1,False,0.004,True,\n")
    rl = run.rlinear_params_csv(str(path), "rlinear-ETTh1-336")
    assert rl == {"lr": 0.002, "batch_size": 16, "dropout": 0.25, "revin_affine": False, "individual": False}
    assert type(rl["batch_size"]) is int and type(rl["individual"]) is bool


def test_the_committed_trials_give_the_committed_members_settings():
    """The ETTh rows of results.csv were fitted from the Optuna storage; the CSV replays the same."""
    import csv

    trials = str(ROOT / "benchmarks" / "anchors" / "studies.csv")
    with open(ROOT / "benchmarks" / "anchors" / "results.csv", newline="") as fh:
        used = {(r["dataset"], r["rlinear_params"]) for r in csv.DictReader(fh)
                if r["candidate"] == "rlinear" and r["dataset"] in ("ETTh1", "ETTh2")}
    assert used, "no ETTh rlinear rows committed"
    for dataset, params in used:
        assert repr(run.rlinear_params_csv(trials, f"rlinear-{dataset}-336")) == params


def test_a_parameter_the_study_held_fixed_or_a_missing_study_is_a_clear_error(tmp_path):
    path = tmp_path / "studies.csv"
    path.write_text(HEADER + "rlinear-ETTm1-336,0,COMPLETE,0.6,True,16,0.07,,0.0004,False,\n")
    with pytest.raises(SystemExit, match="individual.*--rlinear-study"):
        run.rlinear_params_csv(str(path), "rlinear-ETTm1-336")
    with pytest.raises(SystemExit, match="no finished trial of study 'rlinear-X'"):
        run.rlinear_params_csv(str(path), "rlinear-X")
    with pytest.raises(SystemExit, match="no such file"):
        run.rlinear_params_csv(str(tmp_path / "none.csv"), "rlinear-ETTm1-336")


def test_a_last_centred_rlinear_needs_its_own_label(capsys):
    """Rows and saved fits are keyed by the member's label: a last-centred RLinear under the plain
    label would be skipped as done (or clash with the mean-centred fit), so it is refused."""
    with pytest.raises(SystemExit):
        run.main(["--members", "rlinear", "--rlinear-center", "last",
                  "--rlinear-trials", str(ROOT / "benchmarks" / "anchors" / "studies.csv")])
    assert "--rlinear-label rlinear-last" in capsys.readouterr().err
