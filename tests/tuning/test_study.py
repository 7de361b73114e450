"""Studies in one process against a real MLflow server: sqlite and journal storages resume,
trials are nested runs under the study's run, the refit reproduces the best trial, pruning
from the fit callback, stale-trial failing on the journal, and storage URL handling."""

from __future__ import annotations

import time

import optuna
import pytest
from optuna.trial import TrialState

from tsmix.errors import TsmixError
from tsmix.tuning.storage import HEARTBEAT_ATTR, open_storage, pg_driver, resolve_storage_url
from tsmix.tuning.study import REFIT_ATTR, run_study

pytestmark = pytest.mark.services
TINY = dict(model="dlinear", epochs=1, lookback=48, horizon=12, threads=1, verbose=False)


def runs_of(uri: str, study: str) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(study)
    return client.search_runs([exp.experiment_id], max_results=100)


def test_sqlite_study_resumes_nests_runs_and_refits_the_best(mlflow_server, mini_csv, tmp_path, study_name):
    from mlflow import MlflowClient

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    kw = dict(TINY, storage=storage, study=study_name, tracking_uri=mlflow_server)
    first = run_study(str(mini_csv), trials=2, refit=False, **kw)
    assert first.ran == (0, 1) and first.complete == 2 and first.refit is None
    again = run_study(str(mini_csv), trials=3, refit=True, out_dir=tmp_path / "runs", **kw)
    assert again.ran == (2,)  # continued the study, did not restart it
    assert again.complete + again.pruned == 3 and again.failed == 0
    assert again.parent_run_id == first.parent_run_id

    study = optuna.load_study(study_name=study_name, storage=storage)
    assert again.best_trial == study.best_trial.number and again.best_value == study.best_value
    assert study.user_attrs[REFIT_ATTR]["run_id"] == again.refit.run_id
    runs = runs_of(mlflow_server, study_name)
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == first.parent_run_id]
    trial_tags = sorted(r.data.tags["optuna.trial"] for r in children if "tsmix.refit" not in r.data.tags)
    assert trial_tags == ["0", "1", "2"]  # one nested run per trial
    parent = MlflowClient(tracking_uri=mlflow_server).get_run(first.parent_run_id)
    assert parent.info.status == "FINISHED" and parent.data.tags["best_trial"] == str(again.best_trial)
    # The champion: the best trial's settings on train+val for its best epoch count, tagged with the
    # validation MSE that selected it (it has no held-out score of its own).
    refit = MlflowClient(tracking_uri=mlflow_server).get_run(again.refit.run_id)
    assert refit.data.params["train_on"] == "train+val"
    assert refit.data.params["epochs"] == str(study.best_trial.user_attrs["best_epoch"])
    assert refit.data.tags["tsmix.selection_val_mse"] == f"{again.best_value:.6g}"
    assert "val_mse" not in refit.data.metrics  # NaN: nothing held out, nothing logged
    assert (again.refit.out_dir / "config.json").is_file()

    with pytest.raises(TsmixError, match="created for another search.*lookback"):
        run_study(str(mini_csv), trials=4, **{**kw, "lookback": 96})


def test_journal_study_resumes_and_prunes_from_the_fit_callback(mlflow_server, mini_csv, tmp_path,
                                                               study_name):
    journal = tmp_path / "study.log"
    kw = dict(TINY, epochs=2, storage=f"journal:{journal}", study=study_name, tracking_uri=mlflow_server,
              refit=False)
    first = run_study(str(mini_csv), trials=1, **kw)
    # A pruner that prunes whatever it sees: the fit stops after epoch 1 and the trial counts.
    again = run_study(str(mini_csv), trials=2, pruner=optuna.pruners.ThresholdPruner(upper=1e-12), **kw)
    assert first.ran == (0,) and again.ran == (1,) and journal.is_file()
    study = optuna.load_study(study_name=study_name, storage=open_storage(f"journal:{journal}").optuna)
    states = [t.state for t in study.trials]
    assert states == [TrialState.COMPLETE, TrialState.PRUNED]
    assert list(study.trials[1].intermediate_values) == [1]  # reported after epoch 1, then stopped
    pruned_run = [r for r in runs_of(mlflow_server, study_name) if r.data.tags.get("optuna.trial") == "1"]
    assert len(pruned_run) == 1 and pruned_run[0].data.tags["optuna.state"] == "PRUNED"


@pytest.mark.parametrize("retry", [False, True])
def test_journal_stale_trial_is_failed_by_the_next_worker(tmp_path, retry):
    on_stale = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1) if retry else None
    store = open_storage(f"journal:{tmp_path / 'j.log'}", heartbeat=1, grace=2, on_stale=on_stale)
    study = optuna.create_study(study_name="s", storage=store.optuna)
    alive, dead = study.ask(), study.ask()
    dead.suggest_float("lr", 1e-4, 1e-2, log=True)
    store.beat(store.trial_id("s", alive.number))
    # The dead worker's last heartbeat is older than the grace period.
    store.optuna.set_trial_system_attr(store.trial_id("s", dead.number), HEARTBEAT_ATTR, time.time() - 10)
    assert store.fail_stale(study) == [dead.number]
    assert study.trials[alive.number].state == TrialState.RUNNING
    assert study.trials[dead.number].state == TrialState.FAIL
    waiting = study.get_trials(states=(TrialState.WAITING,))
    if retry:  # re-queued with the same parameters, picked up by the next ask
        assert [t.params for t in waiting] == [study.trials[dead.number].params]
        assert study.ask().params == study.trials[dead.number].params
    else:
        assert waiting == []


def test_claim_lock_is_exclusive_across_handles(tmp_path):
    import threading

    a = open_storage(f"journal:{tmp_path / 'j.log'}")
    b = open_storage(f"journal:{tmp_path / 'j.log'}")
    order = []

    def take() -> None:
        with b.lock("s"):
            order.append("b")

    with a.lock("s"):
        t = threading.Thread(target=take)
        t.start()
        t.join(0.5)
        order.append("a released")
    t.join(10)
    assert order == ["a released", "b"]


def test_storage_urls(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = tmp_path.resolve()
    assert resolve_storage_url(None) == ("sqlite", f"sqlite:///{root / 'optuna.db'}", str(root / "optuna.db"))
    assert resolve_storage_url("journal:s.log")[::2] == ("journal", str(root / "s.log"))
    assert resolve_storage_url(f"journal:///{root}/s.log")[2] == str(root / "s.log")
    assert resolve_storage_url("runs/s.jsonl")[0] == "journal"
    kind, url, shown = resolve_storage_url("postgres://u:secret@db:5432/x")
    assert kind == "postgresql" and url.startswith(f"postgresql+{pg_driver()}://") and "secret" not in shown
    # no driver named: the installed one (SQLAlchemy 2.1 would pick psycopg 3, which may be missing)
    assert resolve_storage_url("postgresql://u@db/x")[1] == f"postgresql+{pg_driver()}://u@db/x"
    assert resolve_storage_url("postgresql+psycopg2://u@db/x")[1] == "postgresql+psycopg2://u@db/x"
    for bad, msg in [("mysql://u@h/db", "unsupported storage scheme"), ("study.db", "not a URL"),
                     ("sqlite:///nowhere/x.db", "does not exist"), ("sqlite:///:memory:", "in-memory")]:
        with pytest.raises(TsmixError, match=msg):
            resolve_storage_url(bad)


def test_bare_postgresql_url_opens_with_the_installed_driver(pg_url):
    store = open_storage("postgresql://" + pg_url.split("://", 1)[1])  # as a user types it
    try:
        assert store.kind == "postgresql"
        optuna.get_all_study_summaries(store.optuna)  # the driver loaded and the tables answer
    finally:
        store.close()


def test_unreachable_postgres_is_a_clear_error(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(TsmixError, match="cannot open the study storage .*fix --storage"):
        open_storage(f"postgresql+psycopg2://postgres@127.0.0.1:{port}/test")


def test_pruner_choices():
    from tsmix.tuning.study import make_pruner

    median = make_pruner("median", 10)
    assert isinstance(median, optuna.pruners.MedianPruner)
    # waits for half the epochs: early losses rank trials badly (see make_pruner)
    assert median._n_warmup_steps == 5 and make_pruner("median", 1)._n_warmup_steps == 1
    hb = make_pruner("hyperband", 5)
    assert isinstance(hb, optuna.pruners.HyperbandPruner) and hb._max_resource == 5
    assert isinstance(make_pruner("none", 5), optuna.pruners.NopPruner)
    with pytest.raises(TsmixError, match="pruner must be one of median, hyperband, none"):
        make_pruner("asha", 5)


def test_every_tune_flag_states_its_default(capsys):
    import re

    from tsmix.cli import main

    with pytest.raises(SystemExit):
        main(["tune", "--help"])
    text = capsys.readouterr().out.split("\noptions:", 1)[1]
    blocks = re.split(r"\n  (?=--?\w)", text)  # one block per option: flag line and wrapped help
    flags = {b.split()[0].rstrip(","): " ".join(b.split()) for b in blocks if b.strip().startswith("-")}
    assert len(flags) > 25 and "--storage" in flags and "--alias" in flags
    missing = [f for f, b in flags.items() if f not in ("-h", "--help", "--dataset") and "default" not in b]
    assert missing == []
    assert "required" in flags["--dataset"]
