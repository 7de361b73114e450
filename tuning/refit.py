"""The end of a study: once it has its count, one worker refits the best trial with full
tracking (model logged, optionally registered and aliased) and closes the study's run.

The refit (the champion) trains on the training and validation windows for exactly the best
trial's best epoch count (``train_on="train+val"``), is scored once on test, and is what gets
registered; its version carries the best trial's validation MSE as the selection score."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from tsmix.tuning.study_runs import close_parent, experiment_name
from tsmix.tuning.tracking import DEFAULT_OUT, TrackedRun, track_fit
from tsmix.tuning.worker import Worker, count

REFIT_ATTR = "tsmix.refit"  # {"trial": n, "run_id": ..., "version": ...} of the last refit
CLOSED_ATTR = "tsmix.finished"  # [parent run, trials, best trial] the study was last finished at

ParamsOf = Callable[[FrozenTrial], dict[str, Any]]  # a finished trial -> its Forecaster kwargs


def finish(worker: Worker, trials: int, params_of: ParamsOf, refit: bool, register_as: str | None,
           alias: str, out_dir: str | Path | None) -> TrackedRun | None:
    """Once the study has its count: (one worker) refit the best, then close the parent run."""
    st = worker.study
    with worker.storage.lock(st.study_name):
        if count(st)[0] < trials:  # stopped by --timeout: nothing to finish yet
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
            tracked = refit_best(worker, best, params_of(best), register_as, alias, out_dir)
        except BaseException:
            st.set_user_attr(REFIT_ATTR, claim)  # let a rerun try again
            st.set_user_attr(CLOSED_ATTR, None)
            raise
        st.set_user_attr(REFIT_ATTR, {"trial": best.number, "worker": worker.name, "run_id": tracked.run_id,
                                      "model_uri": tracked.model_uri, "version": tracked.version})
    close_parent(st, worker.uri, worker.parent, best)
    return tracked


def champion_params(best: FrozenTrial, params: dict[str, Any]) -> dict[str, Any]:
    """The champion's settings: the best trial's, trained on train+val for its best epoch count.

    Selection is over (validation is spent), so the final model sees the validation windows too and
    trains exactly as long as the best trial took to reach its best validation loss. A trial without
    a recorded best epoch (an older study) is refit as it was tuned: on train, selected on val.
    """
    epochs = int(best.user_attrs.get("best_epoch") or 0)
    return {**params, "epochs": epochs, "train_on": "train+val"} if epochs >= 1 else dict(params)


def refit_best(worker: Worker, best: FrozenTrial, params: dict[str, Any], register_as: str | None,
               alias: str, out_dir: str | Path | None) -> TrackedRun:
    st = worker.study
    params = champion_params(best, params)
    how = (f"on train+val for {params['epochs']} epochs" if "train_on" in params
           else "on train (no best epoch recorded)")
    worker.say(f"refitting best trial {best.number} (val_mse {best.value:.5g}) {how}: {params}")
    out = Path(out_dir or DEFAULT_OUT).expanduser().resolve() / f"{st.study_name}-trial-{best.number}"
    selection = {"optuna.study": st.study_name, "optuna.trial": str(best.number),
                 "val_mse": f"{best.value:.6g}"}  # the selection score: the champion has none of its own
    tracked = track_fit(
        worker.forecaster(params), worker.data, worker.uri,
        experiment=experiment_name(worker.uri, worker.experiment_id),
        register_as=register_as, alias=alias, out_dir=out, data_dir=worker.data_dir,
        date_col=worker.date_col, run_name=f"best-trial-{best.number}", parent_run_id=worker.parent,
        tags={"optuna.study": st.study_name, "optuna.trial": str(best.number), "tsmix.refit": "true",
              "tsmix.selection_val_mse": f"{best.value:.6g}"},
        lineage=worker.lineage, version_tags=selection,
    )
    if tracked.registered_name:
        uri = f"models:/{tracked.registered_name}@{tracked.alias}"
        worker.say(f"registered {uri} (version {tracked.version})")
    worker.say(f"refit saved in {tracked.out_dir}; MLflow run {tracked.run_id}")
    return tracked
