"""Tuning a user can trust (#17): --set really fixes what trains, trials never log test
metrics, the parent run and the registered version describe the study, reruns report the
champion, fresh folders survive concurrent workers, bad storage creates nothing, user spaces."""

from __future__ import annotations

import json
import subprocess
import sys

import optuna
import pytest

from tsmix.cli import main
from tsmix.errors import TsmixError
from tsmix.tuning.study import make_search, run_study

TINY = dict(model="dlinear", epochs=2, lookback=48, horizon=12, threads=1)


@pytest.fixture(scope="module")
def fixed_study(mini_csv, tmp_path_factory):
    """Two trials with batch_size and kernel_size fixed, registered; then a rerun (nothing new)."""
    root = tmp_path_factory.mktemp("trust")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    kw = dict(TINY, storage=f"journal:{root / 'sub' / 'dir' / 's.log'}", study="s", tracking_uri=uri,
              register_as="trusty", out_dir=root / "runs", batch_size=64, kernel_size=13, verbose=True)
    first = run_study(str(mini_csv), trials=2, **kw)
    again = run_study(str(mini_csv), trials=2, **kw)
    return root, uri, first, again


def test_fixed_values_leave_the_space_and_are_what_trains(fixed_study, capsys):
    from mlflow import MlflowClient

    from tsmix.tuning.storage import open_storage

    root, uri, first, _ = fixed_study
    store = open_storage(f"journal:{root / 'sub/dir/s.log'}")
    study = optuna.load_study(study_name="s", storage=store.optuna)
    client = MlflowClient(tracking_uri=uri)
    for t in study.trials:
        assert "batch_size" not in t.distributions and "kernel_size" not in t.distributions
        params = client.get_run(t.user_attrs["mlflow_run_id"]).data.params
        assert (params["batch_size"], params["kernel_size"]) == ("64", "13")  # what trained
    assert first.best_params["batch_size"] == 64 and first.best_params["kernel_size"] == 13
    refit = client.get_run(first.refit.run_id).data.params
    assert (refit["batch_size"], refit["kernel_size"]) == ("64", "13")


def test_trials_log_validation_only_clean_params_config_and_lineage(fixed_study):
    from mlflow import MlflowClient

    root, uri, first, _ = fixed_study
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("s")
    runs = client.search_runs([exp.experiment_id], "tags.`optuna.trial` != ''")
    trials = [r for r in runs if "tsmix.refit" not in r.data.tags]
    assert len(trials) == 2
    for r in trials:
        assert "val_mse" in r.data.metrics and "best_epoch" in r.data.metrics
        assert not [k for k in r.data.metrics if k.startswith(("test_", "per_channel."))]
        assert not {"progress", "threads", "mixer", "mixer_options"} & set(r.data.params)  # dlinear: no mixer
        assert {a.path for a in client.list_artifacts(r.info.run_id)} >= {"config.json"}
        (inp,) = r.inputs.dataset_inputs
        assert inp.dataset.name == "mini" and inp.dataset.digest
        assert {t.key for t in inp.tags} >= {"train_windows", "val_windows", "test_windows"}
    parent = client.get_run(first.parent_run_id)
    p = parent.data.params
    assert p["dataset"] == "mini" and p["pruner"] == "median" and p["seed"] == "2021"
    assert json.loads(p["fixed"]) == {"batch_size": 64, "kernel_size": 13, "threads": 1}
    assert parent.data.tags["trials"] == "2"
    path = client.download_artifacts(first.parent_run_id, "search_space.json", str(root))
    space = json.loads(open(path).read())
    assert set(space["space"]) == {"lr", "individual"}  # the fixed names are gone


def test_registered_version_is_described_and_a_rerun_names_the_champion(fixed_study):
    from mlflow import MlflowClient

    _, uri, first, again = fixed_study
    client = MlflowClient(tracking_uri=uri)
    v = client.get_model_version_by_alias("trusty", "champion")
    for key in ("dataset", "horizon", "lookback", "val_mse", "test_mse", "commit", "tsmix_version"):
        assert key in v.tags, key
    assert v.tags["horizon"] == "12" and "test MSE" in v.description
    assert again.refit is None and again.ran == ()  # nothing new to do...
    assert again.model_uri == first.refit.model_uri and again.registered_version == "1"  # ...but it says what


def test_champion_trains_on_train_and_val_for_the_best_epoch(fixed_study, mini_csv):
    """#17.2: the registered model is the best trial's settings refit on train+val windows for exactly
    the trial's best epoch count (no early stopping), scaler still from train rows, test scored once."""
    import math

    from mlflow import MlflowClient

    from tsmix.datasets import prepare
    from tsmix.forecasting import Forecaster
    from tsmix.tuning.storage import open_storage

    root, uri, first, _ = fixed_study
    store = open_storage(f"journal:{root / 'sub/dir/s.log'}")
    study = optuna.load_study(study_name="s", storage=store.optuna)
    best = study.best_trial
    champion = Forecaster.load(first.refit.out_dir)
    assert champion.config.train_on == "train+val"
    assert champion.config.epochs == best.user_attrs["best_epoch"] == len(champion.history) >= 1
    assert all("val_loss" not in h for h in champion.history)  # nothing held out, nothing selected
    p = prepare(str(mini_csv), TINY["lookback"], TINY["horizon"])
    m = champion.metrics_
    span = p.borders["val"][1] - p.borders["train"][0] - TINY["lookback"] - TINY["horizon"] + 1
    assert m["train_windows"] == span > len(p.train) + len(p.val)  # every train and val window
    assert math.isnan(m["val_mse"]) and m["test_windows"] == len(p.test)
    assert champion.evaluate("test")["mse"] == pytest.approx(m["mse"], rel=1e-6)
    scaler = champion._fitted.scaler  # fit on the training rows only
    assert scaler.mean_ == pytest.approx(p.scaler.mean_)
    v = MlflowClient(tracking_uri=uri).get_model_version_by_alias("trusty", "champion")
    assert v.tags["val_mse"] == f"{best.value:.6g}"  # the selection score, not an in-sample one
    assert f"val MSE {best.value:.4g}," in v.description and "nan" not in v.description.lower()


def test_trials_never_score_test_and_tune_reads_with_fill(mini_csv, tmp_path, monkeypatch, capsys,
                                                          trial_forecasters):
    """#17: a trial fits with evaluate_test=False (no test metric is even computed), and
    ``tsmix tune --fill ffill`` reads data with a NaN in every place a fit reads it (the lineage too)."""
    lines = mini_csv.read_text().splitlines()
    cells = lines[100].split(",")
    cells[2] = ""  # one missing value in the training rows
    lines[100] = ",".join(cells)
    holey = tmp_path / "holey.csv"
    holey.write_text("\n".join(lines) + "\n")
    monkeypatch.chdir(tmp_path)
    argv = ["tune", "--dataset", str(holey), "--model", "dlinear", "--trials", "1", "--epochs", "1",
            "--lookback", "48", "--horizon", "12", "--no-refit", "--quiet", "--set", "threads=1"]
    assert main(argv) == 2  # NaNs are refused unless a fill is asked for...
    assert "missing/NaN/inf values in columns ['HULL']" in capsys.readouterr().err
    assert main([*argv, "--fill", "ffill", "--study", "filled"]) == 0  # ...and read with one
    assert "1 complete" in capsys.readouterr().out
    (trial,) = trial_forecasters[-1:]
    assert trial.config.fill == "ffill" and trial.metrics_["best_epoch"] == 1
    assert not {"mse", "mae", "test_windows", "per_channel"} & set(trial.metrics_)  # test never scored


def test_trial_log_lines_show_epochs(mini_csv, tmp_path, capsys):
    run_study(str(mini_csv), trials=1, storage=f"sqlite:///{tmp_path / 'o.db'}", study="e",
              tracking_uri=f"sqlite:///{tmp_path / 'm.db'}", refit=False, verbose=True,
              pruner=optuna.pruners.ThresholdPruner(upper=1e-12), **{**TINY, "epochs": 1})
    out = capsys.readouterr().out
    # a pruner that prunes everything still never stops a trial at its final epoch
    assert "trial 0 COMPLETE" in out and "(1 epochs, best 1)" in out and "test_mse" not in out


def test_bad_storage_creates_nothing(mini_csv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for storage in ("mysql://u@h/db", "postgresql+psycopg2://postgres@127.0.0.1:9/test"):
        rc = main(["tune", "--dataset", str(mini_csv), "--model", "dlinear", "--trials", "1", "--epochs", "1",
                   "--lookback", "48", "--horizon", "12", "--storage", storage])
        assert rc == 2
        assert list(tmp_path.iterdir()) == [], storage  # no mlflow.db, no optuna.db
    assert "storage" in capsys.readouterr().err


def test_two_workers_start_together_in_a_fresh_folder(mini_csv, tmp_path, svc):
    cmd = [sys.executable, "-m", "tsmix.cli", "tune", "--dataset", str(mini_csv), "--model", "dlinear",
           "--trials", "2", "--epochs", "1", "--lookback", "48", "--horizon", "12", "--study", "fresh",
           "--no-refit", "--quiet", "--set", "threads=1"]
    procs = [subprocess.Popen(cmd, cwd=tmp_path, env=svc.child_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert "already exists" not in "".join(outs)
    assert (tmp_path / "mlflow.db").is_file() and (tmp_path / "optuna.db").is_file()


def test_space_file_and_show_space(tmp_path, capsys):
    space = tmp_path / "space.yaml"
    space.write_text("lr: {type: float, low: 0.001, high: 0.002, log: true}\n"
                     "weight_decay: {type: float, low: 0.0, high: 0.1}\n")
    rc = main(["tune", "--model", "dlinear", "--space", str(space), "--set", "batch_size=64", "--show-space"])
    assert rc == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["fixed"] == {"batch_size": 64}
    assert shown["space"]["lr"] == {"type": "float", "low": 0.001, "high": 0.002, "log": True}
    assert set(shown["space"]) == {"lr", "individual", "kernel_size", "weight_decay"}
    trial = optuna.create_study().ask()
    params = make_search("dlinear", ("softmax",), {"batch_size": 64}, str(space)).suggest(trial)
    assert 0.001 <= params["lr"] <= 0.002 and params["batch_size"] == 64 and "weight_decay" in params
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"lr_typo": {"type": "float", "low": 1, "high": 2}}))
    with pytest.raises(TsmixError, match="lr_typo.*neither"):
        make_search("dlinear", ("softmax",), {}, str(bad))
    with pytest.raises(TsmixError, match="needs a type"):
        make_search("dlinear", ("softmax",), {}, {"lr": {"low": 1}})


def test_python_space_callable():
    def space(trial):
        return {"lr": trial.suggest_float("lr", 1e-3, 1e-2, log=True), "kernel_size": 13}

    search = make_search("dlinear", ("softmax",), {"lr": 0.005}, space)
    trial = optuna.create_study().ask()
    assert search.suggest(trial) == {"lr": 0.005, "kernel_size": 13} and trial.distributions == {}


def test_tune_help_states_every_default(capsys):
    with pytest.raises(SystemExit):
        main(["tune", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for flag in ("--epochs", "--lookback", "--horizon", "--features", "--pruner", "--trials", "--seed"):
        after = text.split(flag, 2)[-1][:400]
        assert "default" in after, flag
