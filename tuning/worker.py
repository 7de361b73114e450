"""One worker of a study: the loop that claims, fits and reports trials.

    fail stale trials (heartbeat) -> [lock] count, ask -> fit with pruning -> tell

Counting and asking happen under the study's claim lock, so N workers together run exactly
``trials`` COMPLETE or PRUNED trials. Every trial is a nested MLflow run under the study's run.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
import warnings
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState

from tsmix.errors import TsmixError
from tsmix.tuning.lineage import DataLineage, log_lineage
from tsmix.tuning.search import SearchSpace
from tsmix.tuning.storage import StudyStorage
from tsmix.tuning.tracking import (
    EpochLogger,
    config_params,
    log_forecast_plot,
    using_tracking,
    validation_metrics,
)

DONE = (TrialState.COMPLETE, TrialState.PRUNED)  # what counts towards ``trials``
ACTIVE = (TrialState.RUNNING, TrialState.WAITING)  # may still count
POLL_SECONDS = 1.0  # how often a worker waiting for other workers' trials looks again


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def count(study: optuna.Study) -> tuple[int, int, int, int]:
    """(done, active, waiting, total) trial counts."""
    trials = study.get_trials(deepcopy=False)
    done = sum(t.state in DONE for t in trials)
    active = sum(t.state in ACTIVE for t in trials)
    waiting = sum(t.state == TrialState.WAITING for t in trials)
    return done, active, waiting, len(trials)


class Worker:
    """The state one ``run_study`` call works with (kept together, passed to helpers)."""

    def __init__(self, storage: StudyStorage, study: optuna.Study, base: dict[str, Any], *,
                 search: SearchSpace, data: Any, data_dir: Any, date_col: str | None, lineage: DataLineage,
                 tracking_uri: str, experiment_id: str, parent_run_id: str, seed: int,
                 verbose: bool) -> None:
        self.storage, self.study, self.base, self.search = storage, study, base, search
        self.data, self.data_dir, self.date_col, self.lineage = data, data_dir, date_col, lineage
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

        params = self.search.suggest(trial)  # fixed values included: exactly what trains
        forecaster = self.forecaster(params)
        trial.set_user_attr("worker", self.name)
        last_epoch = forecaster.config.epochs

        def prune(epoch: int, logs: dict) -> None:
            value = float(logs["val_loss"])
            if not math.isfinite(value):  # a diverged fit is a failed trial, not a pruned one
                raise TsmixError(f"val_loss is {value} at epoch {epoch}")
            trial.report(value, int(epoch))
            if int(epoch) < last_epoch and trial.should_prune():  # the last epoch's work is done: keep it
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
                mlflow.log_dict(json.loads(json.dumps(forecaster.get_params(), default=str)), "config.json")
                log_lineage(self.lineage, "tuning")
                live = EpochLogger()
                try:
                    forecaster.fit(self.data, data_dir=self.data_dir, date_col=self.date_col,
                                   callbacks=(live, prune), evaluate_test=False)  # selection never sees test
                except optuna.TrialPruned as exc:
                    mlflow.set_tag("optuna.state", "PRUNED")
                    status, state = "FINISHED", TrialState.PRUNED
                    return state, None, str(exc)
                live.flush(forecaster.history)
                metrics = validation_metrics(forecaster)  # never the test split while selecting
                mlflow.log_metrics(metrics)
                log_forecast_plot(forecaster, "val")  # validation only: trials never see test
                mlflow.set_tag("optuna.state", "COMPLETE")
                trial.set_user_attr("best_epoch", int(metrics["best_epoch"]))  # the champion trains this long
                status, state = "FINISHED", TrialState.COMPLETE
                value = float(metrics["val_mse"])
                epochs = f"{int(metrics['epochs'])} epochs, best {int(metrics['best_epoch'])}"
                return state, value, f"val_mse={value:.5g} ({epochs})"
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
    def claim(self, n_trials: int) -> tuple[bool, optuna.Trial | None]:
        """Under the claim lock: (study done?, a new trial or None when all slots run elsewhere)."""
        with self.storage.lock(self.study.study_name):
            done, active, waiting, total = count(self.study)
            if done >= n_trials:
                return True, None
            if not (done + active < n_trials or waiting):  # no free slot, no retry to pick up
                return False, None
            # Seed by trial number: distinct across workers, reproducible for one worker.
            self.study.sampler = optuna.samplers.TPESampler(seed=self.seed + total)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Heartbeat of storage")
                trial = self.study.ask()
            self.storage.beat(self.storage.trial_id(self.study.study_name, trial.number))  # stale-detectable
            return False, trial

    def optimize(self, n_trials: int, timeout: float | None, max_failures: int) -> list[int]:
        start, ran, failures = time.monotonic(), [], 0
        while True:
            if timeout is not None and time.monotonic() - start > timeout:
                self.say(f"timeout of {timeout:g} s reached")
                break
            for number in self.storage.fail_stale(self.study):
                self.say(f"trial {number} marked FAIL: its worker stopped sending heartbeats")
            finished, trial = self.claim(n_trials)
            if finished:
                break
            if trial is None:  # every remaining slot is running elsewhere: wait for them
                time.sleep(POLL_SECONDS)
                continue
            t0 = time.monotonic()
            with self.storage.heartbeat_thread(self.storage.trial_id(self.study.study_name, trial.number)):
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
