"""Optuna studies over Forecaster configs, tracked in MLflow: ``run_study(...)`` / ``tsmix tune``.

One call is one *worker*: start as many as you like (processes or machines) on the same
``storage`` and ``study``; together they finish exactly ``trials`` COMPLETE or PRUNED
trials. Each worker loops:

    fail stale trials (heartbeat) -> [lock] count, ask -> fit with pruning -> tell

and, once the study has its count, one worker refits the best trial with full tracking
(model logged, optionally registered and aliased). Every trial is a nested MLflow run under
the study's parent run, whose id is kept in the study so all workers and reruns share it.
Re-running a finished study with a larger ``trials`` continues it.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import FrozenTrial, TrialState

from tsmix.errors import TsmixError
from tsmix.tuning import spaces
from tsmix.tuning.storage import StudyStorage, open_storage
from tsmix.tuning.tracking import (
    DEFAULT_ALIAS,
    DEFAULT_OUT,
    EpochLogger,
    TrackedRun,
    check_tracking,
    config_params,
    fit_metrics,
    track_fit,
    using_tracking,
)

DONE = (TrialState.COMPLETE, TrialState.PRUNED)  # what counts towards ``trials``
ACTIVE = (TrialState.RUNNING, TrialState.WAITING)  # may still count
PRUNERS = ("median", "hyperband", "none")
SETUP_ATTR = "tsmix.setup"  # what the study searches; a rerun must match it
PARENTS_ATTR = "tsmix.mlflow_parents"  # {tracking uri: parent run id}
REFIT_ATTR = "tsmix.refit"  # {"trial": n, "run_id": ..., "version": ...} of the last refit
CLOSED_ATTR = "tsmix.finished"  # [parent run, trials, best trial] the study was last finished at
POLL_SECONDS = 1.0  # how often a worker waiting for other workers' trials looks again


@dataclass(frozen=True)
class StudyResult:
    study: str  # study name
    storage: str  # where it lives (password-free)
    trials: int  # the study's target count of COMPLETE + PRUNED trials
    complete: int
    pruned: int
    failed: int
    ran: tuple[int, ...]  # trial numbers this worker ran
    best_trial: int | None  # number of the best COMPLETE trial (lowest val_mse)
    best_value: float | None  # its validation MSE
    best_params: dict[str, Any] = field(default_factory=dict)  # its Forecaster keyword arguments
    parent_run_id: str | None = None  # the study's MLflow run
    refit: TrackedRun | None = None  # the best trial refit by this worker, if it did


def make_pruner(name: str | optuna.pruners.BasePruner, epochs: int) -> optuna.pruners.BasePruner:
    """Median (prune below the running median of earlier trials at the same epoch),
    Hyperband (successive halving over epochs), none, or any Optuna pruner object."""
    if isinstance(name, optuna.pruners.BasePruner):
        return name
    if name == "median":
        return optuna.pruners.MedianPruner()
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=1, max_resource=max(int(epochs), 1))
    if name == "none":
        return optuna.pruners.NopPruner()
    raise TsmixError(f"pruner must be one of {', '.join(PRUNERS)}, got {name!r}")


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _count(study: optuna.Study) -> tuple[int, int, int, int]:
    """(done, active, waiting, total) trial counts."""
    trials = study.get_trials(deepcopy=False)
    done = sum(t.state in DONE for t in trials)
    active = sum(t.state in ACTIVE for t in trials)
    waiting = sum(t.state == TrialState.WAITING for t in trials)
    return done, active, waiting, len(trials)


class _Worker:
    """The state one ``run_study`` call works with (kept together, passed to helpers)."""

    def __init__(self, storage: StudyStorage, study: optuna.Study, base: dict[str, Any], *,
                 model: str, mixers: tuple[str, ...], data: Any, data_dir: Any, date_col: str | None,
                 tracking_uri: str, experiment_id: str, parent_run_id: str, seed: int,
                 verbose: bool) -> None:
        self.storage, self.study, self.base = storage, study, base
        self.model, self.mixers = model, mixers
        self.data, self.data_dir, self.date_col = data, data_dir, date_col
        self.uri, self.experiment_id, self.parent = tracking_uri, experiment_id, parent_run_id
        self.seed, self.verbose = seed, verbose
        self.name = worker_id()

    def say(self, msg: str) -> None:
        if self.verbose:
            print(f"[{self.study.study_name} {self.name}] {msg}", flush=True)

    def forecaster(self, params: dict[str, Any]) -> Any:
        from tsmix.forecasting import Forecaster

        return Forecaster(**{**self.base, **params})

    # ---- one trial -------------------------------------------------------------------
    def run_trial(self, trial: optuna.Trial) -> tuple[TrialState, float | None, str]:
        """Fit the trial's config; (state, value, message). Exceptions are the trial's."""
        import mlflow

        params = spaces.suggest(trial, self.model, self.mixers)
        forecaster = self.forecaster(params)
        trial.set_user_attr("worker", self.name)

        def prune(epoch: int, logs: dict) -> None:
            value = float(logs["val_loss"])
            if not math.isfinite(value):  # a diverged fit is a failed trial, not a pruned one
                raise TsmixError(f"val_loss is {value} at epoch {epoch}")
            trial.report(value, int(epoch))
            if trial.should_prune():
                raise optuna.TrialPruned(f"pruned at epoch {epoch} (val_loss {value:.4g})")

        tags = {"optuna.study": self.study.study_name, "optuna.trial": str(trial.number),
                "tsmix.worker": self.name}
        with using_tracking(self.uri):
            run = mlflow.start_run(experiment_id=self.experiment_id, run_name=f"trial-{trial.number}",
                                   parent_run_id=self.parent, nested=True, tags=tags)
            trial.set_user_attr("mlflow_run_id", run.info.run_id)
            status, state = "FAILED", TrialState.FAIL
            try:
                mlflow.log_params(config_params(forecaster))
                live = EpochLogger()
                try:
                    forecaster.fit(self.data, data_dir=self.data_dir, date_col=self.date_col,
                                   callbacks=(live, prune))
                except optuna.TrialPruned as exc:
                    mlflow.set_tag("optuna.state", "PRUNED")
                    status, state = "FINISHED", TrialState.PRUNED
                    return state, None, str(exc)
                live.flush(forecaster.history)
                metrics = fit_metrics(forecaster)
                mlflow.log_metrics(metrics)
                mlflow.set_tag("optuna.state", "COMPLETE")
                for key in ("test_mse", "test_mae"):
                    trial.set_user_attr(key, metrics[key])
                status, state = "FINISHED", TrialState.COMPLETE
                value = float(forecaster.metrics_["val_mse"])
                return state, value, f"val_mse={value:.5g} test_mse={metrics['test_mse']:.5g}"
            finally:
                mlflow.end_run(status=status)

    def tell(self, trial: optuna.Trial, state: TrialState, value: float | None) -> bool:
        try:
            if state == TrialState.COMPLETE:
                self.study.tell(trial, value)
            else:
                self.study.tell(trial, state=state)
            return True
        except UpdateFinishedTrialError:
            self.say(f"trial {trial.number} was marked failed by another worker (missed heartbeats)")
            return False

    # ---- the loop ----------------------------------------------------------------------
    def optimize(self, n_trials: int, timeout: float | None, max_failures: int) -> list[int]:
        start, ran, failures = time.monotonic(), [], 0
        while True:
            if timeout is not None and time.monotonic() - start > timeout:
                self.say(f"timeout of {timeout:g} s reached")
                break
            for number in self.storage.fail_stale(self.study):
                self.say(f"trial {number} marked FAIL: its worker stopped sending heartbeats")
            with self.storage.lock(self.study.study_name):
                done, active, waiting, total = _count(self.study)
                if done >= n_trials:
                    break
                trial = None
                if done + active < n_trials or waiting:  # a free slot, or a retry to pick up
                    # Seed by trial number: distinct across workers, reproducible for one worker.
                    self.study.sampler = optuna.samplers.TPESampler(seed=self.seed + total)
                    with warnings.catch_warnings():
                        warnings.filterwarnings("ignore", message="Heartbeat of storage")
                        trial = self.study.ask()
                    self.storage.beat(trial._trial_id)  # stale-detectable from the first moment
            if trial is None:  # every remaining slot is running elsewhere: wait for them
                time.sleep(POLL_SECONDS)
                continue
            t0 = time.monotonic()
            with self.storage.heartbeat_thread(trial._trial_id):
                try:
                    state, value, msg = self.run_trial(trial)
                except Exception as exc:  # a bad config or a diverged fit fails this trial only
                    state, value, msg = TrialState.FAIL, None, f"{type(exc).__name__}: {exc}"
                    trial.set_user_attr("error", msg[:2000])
                except KeyboardInterrupt:  # leave no trial running behind
                    self.tell(trial, TrialState.FAIL, None)
                    raise
            if self.tell(trial, state, value):
                ran.append(trial.number)
            self.say(f"trial {trial.number} {state.name} in {time.monotonic() - t0:.1f} s: {msg}")
            failures = failures + 1 if state == TrialState.FAIL else 0
            if failures >= max_failures:
                raise TsmixError(
                    f"{failures} trials in a row failed in this worker, the last with: {msg}; "
                    f"fix the configuration (see the trials' 'error' attribute)"
                )
        return ran


# ------------------------------------------------------------------------- the study
RUNTIME_FIELDS = ("progress", "threads", "device")  # how a worker runs, not what the study searches


def _setup(dataset: Any, model: str, mixers: tuple[str, ...], config: dict[str, Any]) -> dict[str, Any]:
    """What makes trials comparable: data, model, mixers and the fixed (defaulted) config."""
    uses_mixer = spaces.model_space(model).uses_mixer
    fixed = {k: v for k, v in config.items() if k not in RUNTIME_FIELDS and k != "mixer_options"}
    if not uses_mixer:
        fixed.pop("mixer", None)
    return json.loads(json.dumps({
        "dataset": str(dataset), "mixers": list(mixers) if uses_mixer else [], **fixed,
    }, default=str))


def _check_setup(study: optuna.Study, setup: dict[str, Any]) -> None:
    stored = study.user_attrs.get(SETUP_ATTR)
    if stored is None:
        study.set_user_attr(SETUP_ATTR, setup)
        return
    diff = sorted(k for k in set(stored) | set(setup) if stored.get(k) != setup.get(k))
    if diff:
        detail = "; ".join(f"{k}: study has {stored.get(k)!r}, given {setup.get(k)!r}" for k in diff)
        raise TsmixError(
            f"study {study.study_name!r} was created for another search ({detail}); "
            f"pass the same settings to continue it, or a new --study name"
        )


def _parent_run(study: optuna.Study, uri: str, experiment_id: str, storage: StudyStorage) -> str:
    """The study's MLflow run (created once per tracking URI, shared by all workers)."""
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
    parents[uri] = run.info.run_id
    study.set_user_attr(PARENTS_ATTR, parents)
    return run.info.run_id


def _mark_stale_run(uri: str) -> Any:
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


def run_study(
    dataset: Any,
    *,
    model: str = "patchtst",
    mixers: Sequence[str] = ("softmax",),
    trials: int = 20,
    timeout: float | None = None,
    epochs: int = 10,
    lookback: int = 336,
    horizon: int = 96,
    storage: str | None = None,
    study: str = "tsmix",
    tracking_uri: str | None = None,
    experiment: str | None = None,
    register_as: str | None = None,
    alias: str = DEFAULT_ALIAS,
    seed: int = 2021,
    pruner: str | optuna.pruners.BasePruner = "median",
    heartbeat: int = 60,
    grace: int | None = None,
    retry_stale: int = 0,
    data_dir: str | Path | None = None,
    date_col: str | None = None,
    refit: bool = True,
    out_dir: str | Path | None = None,
    max_failures: int = 3,
    verbose: bool = True,
    **fixed: Any,
) -> StudyResult:
    """Tune ``model`` (and the mixer among ``mixers``) on ``dataset``: one worker of the study.

    ``trials`` is the study's total of COMPLETE + PRUNED trials over all workers; ``timeout``
    (seconds) stops this worker from starting new trials. ``storage``: ``sqlite:///file.db``
    (default ``sqlite:///optuna.db``), ``journal:PATH`` or ``postgresql+psycopg2://...``.
    ``heartbeat``/``grace``: a running trial without heartbeat for ``grace`` seconds (default
    twice the heartbeat) is failed by the next worker; ``retry_stale`` > 0 re-queues it (that
    many times) with the same parameters. ``fixed``: Forecaster keyword arguments held fixed
    (e.g. ``features="S"``, ``batch_size=64``); they override what the spaces suggest.
    The objective is the validation MSE (selection never looks at the test split).
    """
    if not isinstance(trials, int) or trials <= 0:
        raise TsmixError(f"trials must be a positive int, got {trials!r}")
    if timeout is not None and not timeout > 0:
        raise TsmixError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if not study or not study.strip():
        raise TsmixError("the study needs a name (--study NAME)")
    if retry_stale < 0:
        raise TsmixError(f"retry_stale must be >= 0, got {retry_stale!r}")
    from tsmix.forecasting import Forecaster

    mixers = spaces.check_mixers(mixers)
    spaces.model_space(model)
    base = {"model": model, "lookback": lookback, "horizon": horizon, "epochs": epochs,
            "progress": False, **fixed}
    if not spaces.model_space(model).uses_mixer:
        base.setdefault("mixer", mixers[0])  # recorded, unused by the model
    config = Forecaster(**base).get_params()  # invalid fixed settings fail here, before anything
    setup = _setup(dataset, model, mixers, config)
    make_pruner(pruner, epochs)

    # Tracking first: an unreachable server is reported before any study or training exists.
    uri, experiment_id = check_tracking(tracking_uri, experiment or study)
    on_stale = _mark_stale_run(uri)
    if retry_stale:
        retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=retry_stale)
        mark = on_stale

        def on_stale(study_: optuna.Study, trial: FrozenTrial) -> None:
            mark(study_, trial)
            retry(study_, trial)

    store = open_storage(storage, heartbeat=heartbeat, grace=grace, on_stale=on_stale)
    try:
        with store.lock(study):
            st = optuna.create_study(
                study_name=study, storage=store.optuna, direction="minimize", load_if_exists=True,
                sampler=optuna.samplers.TPESampler(seed=seed), pruner=make_pruner(pruner, epochs),
            )
            _check_setup(st, setup)
            parent = _parent_run(st, uri, experiment_id, store)
        worker = _Worker(store, st, base, model=model, mixers=mixers, data=dataset, data_dir=data_dir,
                         date_col=date_col, tracking_uri=uri, experiment_id=experiment_id,
                         parent_run_id=parent, seed=seed, verbose=verbose)
        done0 = _count(st)[0]
        worker.say(f"{done0}/{trials} trials done; storage {store.target}; tracking {uri}")
        ran = worker.optimize(trials, timeout, max_failures)
        tracked = _finish(worker, trials, refit, register_as, alias, out_dir)
        return _result(st, store, trials, ran, parent, tracked)
    finally:
        store.close()


def best_params(study: optuna.Study, model: str, mixers: Sequence[str], trial: FrozenTrial) -> dict[str, Any]:
    """The Forecaster keyword arguments of a finished trial (its params replayed by the spaces)."""
    return spaces.suggest(optuna.trial.FixedTrial(trial.params, trial.number), model, tuple(mixers))


def _finish(worker: _Worker, trials: int, refit: bool, register_as: str | None, alias: str,
            out_dir: str | Path | None) -> TrackedRun | None:
    """Once the study has its count: (one worker) refit the best, then close the parent run."""
    st = worker.study
    with worker.storage.lock(st.study_name):
        if _count(st)[0] < trials:  # stopped by --timeout: nothing to finish yet
            return None
        complete = st.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        best = st.best_trial if complete else None
        key = [worker.parent, trials, None if best is None else best.number]
        if st.user_attrs.get(CLOSED_ATTR) == key:  # another worker already finished this state
            return None
        st.set_user_attr(CLOSED_ATTR, key)
        claim = st.user_attrs.get(REFIT_ATTR) or {}
        do_refit = refit and best is not None and claim.get("trial") != best.number
        if do_refit:
            st.set_user_attr(REFIT_ATTR, {"trial": best.number, "worker": worker.name, "run_id": None})
    tracked = None
    if do_refit:
        try:
            tracked = _refit(worker, best, register_as, alias, out_dir)
        except BaseException:
            st.set_user_attr(REFIT_ATTR, claim)  # let a rerun try again
            st.set_user_attr(CLOSED_ATTR, None)
            raise
        st.set_user_attr(REFIT_ATTR, {"trial": best.number, "worker": worker.name, "run_id": tracked.run_id,
                                      "model_uri": tracked.model_uri, "version": tracked.version})
    _close_parent(worker, best)
    return tracked


def _refit(worker: _Worker, best: FrozenTrial, register_as: str | None, alias: str,
           out_dir: str | Path | None) -> TrackedRun:
    st = worker.study
    params = best_params(st, worker.model, worker.mixers, best)
    worker.say(f"refitting best trial {best.number} (val_mse {best.value:.5g}): {params}")
    out = Path(out_dir or DEFAULT_OUT).expanduser().resolve() / f"{st.study_name}-trial-{best.number}"
    tracked = track_fit(
        worker.forecaster(params), worker.data, worker.uri, experiment=_experiment_name(worker),
        register_as=register_as, alias=alias, out_dir=out, data_dir=worker.data_dir,
        date_col=worker.date_col, run_name=f"best-trial-{best.number}", parent_run_id=worker.parent,
        tags={"optuna.study": st.study_name, "optuna.trial": str(best.number), "tsmix.refit": "true"},
    )
    if tracked.registered_name:
        uri = f"models:/{tracked.registered_name}@{tracked.alias}"
        worker.say(f"registered {uri} (version {tracked.version})")
    worker.say(f"refit saved in {tracked.out_dir}; MLflow run {tracked.run_id}")
    return tracked


def _experiment_name(worker: _Worker) -> str:
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=worker.uri).get_experiment(worker.experiment_id).name


def _close_parent(worker: _Worker, best: FrozenTrial | None) -> None:
    """Summarize the study on its MLflow run and mark it FINISHED."""
    import mlflow.entities as me
    from mlflow import MlflowClient

    counts = {s.name.lower(): 0 for s in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)}
    for t in worker.study.get_trials(deepcopy=False):
        if t.state.name.lower() in counts:
            counts[t.state.name.lower()] += 1
    now = int(time.time() * 1000)
    metrics = [me.Metric(f"trials_{k}", float(v), now, 0) for k, v in counts.items()]
    tags = []
    if best is not None:
        metrics.append(me.Metric("best_val_mse", float(best.value), now, 0))
        tags = [me.RunTag("best_trial", str(best.number)),
                me.RunTag("best_params", json.dumps(best.params, sort_keys=True)[:5000])]
    client = MlflowClient(tracking_uri=worker.uri)
    client.log_batch(worker.parent, metrics=metrics, tags=tags)
    client.set_terminated(worker.parent, status="FINISHED")


def _result(st: optuna.Study, store: StudyStorage, trials: int, ran: list[int], parent: str,
            tracked: TrackedRun | None) -> StudyResult:
    all_trials = st.get_trials(deepcopy=False)
    complete = [t for t in all_trials if t.state == TrialState.COMPLETE]
    best = min(complete, key=lambda t: t.value) if complete else None
    params = best_params(st, _model_of(st), _mixers_of(st), best) if best is not None else {}
    return StudyResult(
        study=st.study_name, storage=store.target, trials=trials, complete=len(complete),
        pruned=sum(t.state == TrialState.PRUNED for t in all_trials),
        failed=sum(t.state == TrialState.FAIL for t in all_trials), ran=tuple(ran),
        best_trial=None if best is None else best.number, best_value=None if best is None else best.value,
        best_params=params, parent_run_id=parent, refit=tracked,
    )


def _model_of(st: optuna.Study) -> str:
    return st.user_attrs[SETUP_ATTR]["model"]


def _mixers_of(st: optuna.Study) -> tuple[str, ...]:
    return tuple(st.user_attrs[SETUP_ATTR]["mixers"]) or ("softmax",)
