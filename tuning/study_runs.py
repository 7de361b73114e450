"""The study's MLflow runs: the parent run all workers share, closing a dead worker's trial run,
and the summary written on the parent when the study is finished."""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Mapping
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tsmix.tuning.storage import StudyStorage

PARENTS_ATTR = "tsmix.mlflow_parents"  # study user attr: {tracking uri: parent run id}


def parent_run(study: optuna.Study, uri: str, experiment_id: str, storage: StudyStorage, *,
               params: Mapping[str, Any] | None = None, space: Mapping[str, Any] | None = None) -> str:
    """The study's MLflow run (created once per tracking URI, shared by all workers), with the
    study's settings as params and the effective search space as ``search_space.json``."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = MlflowClient(tracking_uri=uri)
    parents = dict(study.user_attrs.get(PARENTS_ATTR, {}))
    run_id = parents.get(uri)
    if run_id is not None:
        try:
            client.get_run(run_id)
            return run_id
        except MlflowException:
            pass  # deleted or another server under the same URI: start a new one
    run = client.create_run(
        experiment_id, run_name=study.study_name,
        tags={"optuna.study": study.study_name, "optuna.storage": storage.target},
    )
    if params:
        from mlflow.entities import Param

        client.log_batch(run.info.run_id, params=[Param(k, str(v)[:6000]) for k, v in params.items()])
    if space is not None:
        client.log_dict(run.info.run_id, dict(space), "search_space.json")
    parents[uri] = run.info.run_id
    study.set_user_attr(PARENTS_ATTR, parents)
    return run.info.run_id


def set_budget(uri: str, parent_run_id: str, trials: int) -> None:
    """The trial budget as a tag: a rerun may raise it, and params cannot change."""
    from mlflow import MlflowClient

    MlflowClient(tracking_uri=uri).set_tag(parent_run_id, "trials", str(trials))


def mark_stale_run(uri: str) -> Any:
    """Heartbeat-stale callback: close the dead worker's MLflow run as FAILED."""

    def callback(study: optuna.Study, trial: FrozenTrial) -> None:
        run_id = trial.user_attrs.get("mlflow_run_id")
        if run_id:
            from mlflow import MlflowClient

            try:
                client = MlflowClient(tracking_uri=uri)
                client.set_tag(run_id, "optuna.state", "FAIL (stale heartbeat)")
                client.set_terminated(run_id, status="FAILED")
            except Exception as exc:  # tracking trouble must not stop the study
                warnings.warn(f"could not close MLflow run {run_id}: {exc}", stacklevel=1)

    return callback


def experiment_name(uri: str, experiment_id: str) -> str:
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri).get_experiment(experiment_id).name


def close_parent(study: optuna.Study, uri: str, parent_run_id: str, best: FrozenTrial | None) -> None:
    """Summarize the study on its MLflow run and mark it FINISHED."""
    import mlflow.entities as me
    from mlflow import MlflowClient

    counts = {s.name.lower(): 0 for s in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)}
    for t in study.get_trials(deepcopy=False):
        if t.state.name.lower() in counts:
            counts[t.state.name.lower()] += 1
    now = int(time.time() * 1000)
    metrics = [me.Metric(f"trials_{k}", float(v), now, 0) for k, v in counts.items()]
    tags = []
    if best is not None:
        metrics.append(me.Metric("best_val_mse", float(best.value), now, 0))
        tags = [me.RunTag("best_trial", str(best.number)),
                me.RunTag("best_params", json.dumps(best.params, sort_keys=True)[:5000])]
    client = MlflowClient(tracking_uri=uri)
    client.log_batch(parent_run_id, metrics=metrics, tags=tags)
    client.set_terminated(parent_run_id, status="FINISHED")
