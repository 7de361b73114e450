"""Logging a run's dataset input when another worker logs the same new dataset at the same moment."""

from __future__ import annotations

import mlflow
import pytest
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from tsmix.tuning import lineage as lineage_mod
from tsmix.tuning.lineage import data_lineage, log_lineage
from tsmix.tuning.tracking import using_tracking

# What the tracking server answered the losing worker (CI, stop 27), shortened.
RACE = ("BAD_REQUEST: (sqlite3.IntegrityError) UNIQUE constraint failed: datasets.experiment_id, "
        "datasets.name, datasets.digest")


@pytest.fixture
def tracked(tmp_path, mini_csv):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    lin = data_lineage(str(mini_csv), lookback=48, horizon=12, features="M")
    with using_tracking(uri):
        exp = mlflow.create_experiment("lineage", artifact_location=str(tmp_path / "art"))
        yield uri, exp, lin


def lose_the_race_once(monkeypatch, message: str, times: int = 1) -> list[int]:
    """``mlflow.log_input`` fails ``times`` times with ``message`` (the other worker inserted the
    dataset first), then behaves; the list counts the calls."""
    real, calls = mlflow.log_input, []

    def log_input(dataset, **kw):
        calls.append(1)
        if len(calls) <= times:
            with using_tracking(mlflow.get_tracking_uri()), mlflow.start_run(
                    experiment_id=mlflow.active_run().info.experiment_id, nested=True):
                real(dataset, **kw)  # the winner's insert: the dataset now exists
            raise MlflowException(message)
        return real(dataset, **kw)

    monkeypatch.setattr(mlflow, "log_input", log_input)
    return calls


def inputs_of(uri: str, run_id: str) -> list:
    return MlflowClient(tracking_uri=uri).get_run(run_id).inputs.dataset_inputs


def test_a_lost_insert_race_is_retried_and_the_input_is_logged(tracked, monkeypatch):
    uri, exp, lin = tracked
    calls = lose_the_race_once(monkeypatch, RACE)
    with mlflow.start_run(experiment_id=exp) as run:
        log_lineage(lin, "tuning")
    assert len(calls) == 2
    (got,) = inputs_of(uri, run.info.run_id)
    assert (got.dataset.name, got.dataset.digest) == (lin.name, lin.digest)
    tags = {t.key: t.value for t in got.tags}
    assert tags["mlflow.data.context"] == "tuning"
    assert tags["train_windows"] == str(lin.splits["train_windows"])


@pytest.mark.parametrize("message", ["duplicate key value violates unique constraint \"datasets_pk\"",
                                     "Duplicate entry 'x' for key 'datasets.uniq'"])
def test_postgres_and_mysql_wordings_are_the_same_race(tracked, monkeypatch, message):
    uri, exp, lin = tracked
    calls = lose_the_race_once(monkeypatch, message)
    with mlflow.start_run(experiment_id=exp) as run:
        log_lineage(lin, "training")
    assert len(calls) == 2 and len(inputs_of(uri, run.info.run_id)) == 1


def test_other_errors_and_a_second_failure_are_raised(tracked, monkeypatch):
    uri, exp, lin = tracked
    calls = lose_the_race_once(monkeypatch, "RESOURCE_DOES_NOT_EXIST: no such experiment")
    with mlflow.start_run(experiment_id=exp), pytest.raises(MlflowException, match="RESOURCE_DOES_NOT_EXIST"):
        log_lineage(lin, "tuning")
    assert len(calls) == 1  # not a race: not retried
    calls = lose_the_race_once(monkeypatch, RACE, times=2)
    with mlflow.start_run(experiment_id=exp), pytest.raises(MlflowException, match="UNIQUE constraint"):
        log_lineage(lin, "tuning")
    assert len(calls) == 2  # retried once, then raised


def test_the_race_words_match_the_installed_store():
    """The store's unique key is what the retry relies on: (experiment, name, digest)."""
    from mlflow.store.tracking.dbmodels.models import SqlDataset

    keys = {tuple(c.name for c in con.columns) for con in SqlDataset.__table__.constraints
            if con.__class__.__name__ in ("UniqueConstraint", "PrimaryKeyConstraint")}
    assert ("experiment_id", "name", "digest") in keys
    assert all(w == w.lower() for w in lineage_mod._RACE_WORDS)
