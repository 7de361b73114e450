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

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tsmix.errors import TsmixError
from tsmix.tuning import spaces
from tsmix.tuning.lineage import data_lineage
from tsmix.tuning.refit import CLOSED_ATTR, REFIT_ATTR, finish
from tsmix.tuning.search import SearchSpace, SpaceFn, from_json, load_space_file
from tsmix.tuning.storage import StudyStorage, open_storage, resolve_storage_url
from tsmix.tuning.study_runs import PARENTS_ATTR, mark_stale_run, parent_run, set_budget
from tsmix.tuning.tracking import DEFAULT_ALIAS, TrackedRun, check_tracking, validate_tracking_uri
from tsmix.tuning.worker import ACTIVE, DONE, Worker, count, worker_id

PRUNERS = ("median", "hyperband", "none")
SETUP_ATTR = "tsmix.setup"  # what the study searches; a rerun must match it


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
    model_uri: str | None = None  # the study's current champion model (whichever worker refit it)
    registered_version: str | None = None  # its registered version, when registered


def make_pruner(name: str | optuna.pruners.BasePruner, epochs: int) -> optuna.pruners.BasePruner:
    """Median (prune below the running median of earlier trials at the same epoch),
    Hyperband (successive halving over epochs), none, or any Optuna pruner object.

    The median pruner waits for the first half of the epochs (``n_warmup_steps = epochs // 2``):
    early validation losses rank trials badly. In the ETTh1 RLinear lookback study
    (``benchmarks/anchors``) the settings that had won an earlier study (validation 1.151 after
    training) were pruned at epoch 1 on 1.230, and the study's runner-up (1.157 in the end) was
    above the median of the other finished trials after epoch 1 (1.268 against 1.220) and still
    after epoch 3 (1.169 against 1.168), below it from epoch 5."""
    if isinstance(name, optuna.pruners.BasePruner):
        return name
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=max(1, int(epochs) // 2))
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=1, max_resource=max(int(epochs), 1))
    if name == "none":
        return optuna.pruners.NopPruner()
    raise TsmixError(f"pruner must be one of {', '.join(PRUNERS)}, got {name!r}")


RUNTIME_FIELDS = ("progress", "threads", "device")  # how a worker runs, not what the study searches
READING_FIELDS = ("features", "target", "fill", "date_format", "date_unit")  # how every fit reads the data


def _setup(dataset: Any, search: SearchSpace, config: dict[str, Any]) -> dict[str, Any]:
    """What makes trials comparable: data, model, mixers, the fixed (defaulted) config and a
    user search space (recorded only when one is given, so older studies still match)."""
    uses_mixer = spaces.model_space(search.model).uses_mixer
    fixed = {k: v for k, v in config.items() if k not in RUNTIME_FIELDS and k != "mixer_options"}
    if not uses_mixer:
        fixed.pop("mixer", None)
    setup = {"dataset": str(dataset), "mixers": list(search.mixers) if uses_mixer else [], **fixed}
    if search.overrides or search.fn is not None:
        described = search.describe()
        setup["space"] = {k: described[k] for k in ("space", "fn") if k in described}
    return json.loads(json.dumps(setup, default=str))


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


def run_study(
    dataset: Any,
    *,
    model: str = "patchtst",
    mixers: Sequence[str] = ("softmax",),
    trials: int = 20,
    timeout: float | None = None,
    epochs: int | None = None,
    lookback: int | None = None,
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
    space: SpaceFn | str | Path | Mapping[str, Any] | None = None,
    preset: str | None = None,
    **fixed: Any,
) -> StudyResult:
    """Tune ``model`` (and the mixer among ``mixers``) on ``dataset``: one worker of the study.

    ``trials`` is the study's total of COMPLETE + PRUNED trials over all workers; ``timeout``
    (seconds) stops this worker from starting new trials. ``storage``: ``sqlite:///file.db``
    (default ``sqlite:///optuna.db``), ``journal:PATH`` or ``postgresql+psycopg2://...``.
    ``heartbeat``/``grace``: a running trial without heartbeat for ``grace`` seconds (default
    twice the heartbeat) is failed by the next worker; ``retry_stale`` > 0 re-queues it (that
    many times) with the same parameters. ``fixed``: Forecaster keyword arguments held fixed
    (e.g. ``features="S"``, ``batch_size=64``): a fixed name leaves the search space and every
    trial trains with its value. ``space``: a ``space(trial) -> dict`` callable replacing the
    built-in spaces, or a .json/.yaml file (or mapping) of distributions by name
    (``{"lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": true}}``) overriding or
    extending them (see :mod:`tsmix.tuning.search`). ``preset`` (e.g. ``"paper"``): every trial
    starts from the preset's hyper-parameters for ``model`` on ``dataset`` at ``horizon``; what the
    space samples replaces the preset's value and ``fixed`` wins over both. ``lookback`` and
    ``epochs`` default to the preset's, else 336 and 10.
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
    search = make_search(model, mixers, fixed, space)
    base = study_base(model, dataset, horizon, lookback=lookback, epochs=epochs, preset=preset, fixed=fixed)
    lookback, epochs = base["lookback"], base["epochs"]
    if not spaces.model_space(model).uses_mixer:
        base.setdefault("mixer", mixers[0])  # recorded, unused by the model
    config = Forecaster(**base).get_params()  # invalid fixed settings fail here, before anything
    setup = _setup(dataset, search, config)
    make_pruner(pruner, epochs)

    # Validate everything before creating anything: a bad storage URL or an unreachable
    # tracking server leaves no optuna.db, no mlflow.db and no run behind.
    resolve_storage_url(storage)
    uri = validate_tracking_uri(tracking_uri)
    on_stale = mark_stale_run(uri)
    if retry_stale:
        retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=retry_stale)
        mark = on_stale

        def on_stale(study_: optuna.Study, trial: FrozenTrial) -> None:
            mark(study_, trial)
            retry(study_, trial)

    store = open_storage(storage, heartbeat=heartbeat, grace=grace, on_stale=on_stale)
    try:
        uri, experiment_id = check_tracking(uri, experiment or study)
        lineage = data_lineage(dataset, lookback=lookback, horizon=horizon, data_dir=data_dir,
                               date_col=date_col, **{k: config[k] for k in READING_FIELDS})
        with store.lock(study):
            st = optuna.create_study(
                study_name=study, storage=store.optuna, direction="minimize", load_if_exists=True,
                sampler=optuna.samplers.TPESampler(seed=seed), pruner=make_pruner(pruner, epochs),
            )
            _check_setup(st, setup)
            parent = parent_run(st, uri, experiment_id, store, params={
                **lineage.params(), "model": model, "mixers": ",".join(setup["mixers"]) or "none",
                "sampler": f"TPESampler(seed={seed} + trial number)", "pruner": _pruner_name(pruner),
                "seed": seed, "epochs": epochs, "lookback": lookback, "horizon": horizon,
                "preset": preset or "none", "fixed": json.dumps(search.fixed, sort_keys=True, default=str),
            }, space=search.describe())
            set_budget(uri, parent, trials)
        worker = Worker(store, st, base, search=search, data=dataset, data_dir=data_dir, date_col=date_col,
                        lineage=lineage, tracking_uri=uri, experiment_id=experiment_id, parent_run_id=parent,
                        seed=seed, verbose=verbose)
        done0 = count(st)[0]
        worker.say(f"{done0}/{trials} trials done; storage {store.target}; tracking {uri}")
        ran = worker.optimize(trials, timeout, max_failures)
        tracked = finish(worker, trials, lambda t: search.replay(t.params, t.number), refit, register_as,
                         alias, out_dir)
        return _result(st, store, search, trials, ran, parent, tracked)
    finally:
        store.close()


def study_base(model: str, dataset: Any, horizon: int, *, lookback: int | None = None,
               epochs: int | None = None, preset: str | None = None,
               fixed: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The Forecaster arguments every trial starts from (its sampled values go on top): the
    preset's, then model, lookback, horizon and epochs (given, else the preset's, else the
    Forecaster's defaults, 336 and 10), then ``fixed``."""
    from tsmix.forecasting.config import ForecasterConfig

    values = preset_values(preset, model, dataset, horizon)
    lookback = lookback if lookback is not None else values.get("lookback", ForecasterConfig.lookback)
    epochs = epochs if epochs is not None else values.get("epochs", ForecasterConfig.epochs)
    return {**values, "model": model, "lookback": lookback, "horizon": horizon, "epochs": epochs,
            "progress": False, **(fixed or {})}


def preset_values(preset: str | None, model: str, dataset: Any, horizon: int) -> dict[str, Any]:
    """The preset's Forecaster arguments under a study's space (``{}`` without a preset)."""
    if preset is None:
        return {}
    if not isinstance(dataset, (str, Path)):
        raise TsmixError(f"preset {preset!r} is set per benchmark dataset: pass the dataset's name "
                         f"(ETTh1, ...), or drop the preset and --set the hyper-parameters")
    from tsmix.forecasting.presets import preset_params

    return preset_params(preset, model, dataset, horizon)


def make_search(model: str, mixers: Sequence[str], fixed: dict[str, Any],
                space: SpaceFn | str | Path | Mapping[str, Any] | None) -> SearchSpace:
    """The study's search space: ``space`` is a callable, a --space file, or a mapping in its format."""
    fn, overrides = None, {}
    if callable(space):
        fn = space
    elif isinstance(space, (str, Path)):
        overrides = load_space_file(space)
    elif isinstance(space, Mapping):
        overrides = {str(k): from_json(str(k), v) for k, v in space.items()}
    elif space is not None:
        raise TsmixError(
            f"space must be a callable, a .json/.yaml path or a mapping, got {type(space).__name__}"
        )
    search = SearchSpace(model, tuple(mixers), dict(fixed), overrides, fn)
    search.check()
    return search


def _pruner_name(pruner: str | optuna.pruners.BasePruner) -> str:
    return pruner if isinstance(pruner, str) else type(pruner).__name__


def best_params(study: optuna.Study, model: str, mixers: Sequence[str], trial: FrozenTrial) -> dict[str, Any]:
    """The Forecaster keyword arguments a finished trial trained with (its params replayed).

    The study's recorded setup supplies what the trial's params lack: a ``--space`` file's
    entries (e.g. a searched ``lookback``) and the values ``--set`` held fixed (the names the space
    asks for but the trial never sampled), as :meth:`SearchSpace.replay` does inside the study."""
    setup = study.user_attrs.get(SETUP_ATTR) or {}
    described = setup.get("space") or {}
    if described.get("fn"):
        raise TsmixError(f"study {study.study_name!r} searched a custom space function "
                         f"({described['fn']}): replay its trials with that function's SearchSpace")
    probe = make_search(model, mixers, {}, described.get("space"))  # the study's --space entries
    asked = probe._walk()[1] | set(probe.overrides)
    fixed = {k: setup[k] for k in asked if k not in trial.params and k in setup}
    try:
        return dataclasses.replace(probe, fixed=fixed).replay(trial.params, trial.number)
    except ValueError as exc:  # optuna's FixedTrial: a name neither sampled nor recorded
        raise TsmixError(f"cannot replay trial {trial.number} of study {study.study_name!r} as a "
                         f"{model} trial over mixers {', '.join(mixers)}: {exc} (was the study "
                         "created for another model or mixers?)") from None


def _result(st: optuna.Study, store: StudyStorage, search: SearchSpace, trials: int, ran: list[int],
            parent: str, tracked: TrackedRun | None) -> StudyResult:
    all_trials = st.get_trials(deepcopy=False)
    complete = [t for t in all_trials if t.state == TrialState.COMPLETE]
    best = min(complete, key=lambda t: t.value) if complete else None
    champion = st.user_attrs.get(REFIT_ATTR) or {}
    return StudyResult(
        study=st.study_name, storage=store.target, trials=trials, complete=len(complete),
        pruned=sum(t.state == TrialState.PRUNED for t in all_trials),
        failed=sum(t.state == TrialState.FAIL for t in all_trials), ran=tuple(ran),
        best_trial=None if best is None else best.number, best_value=None if best is None else best.value,
        best_params={k: v for k, v in search.replay(best.params, best.number).items()
                     if k not in RUNTIME_FIELDS} if best is not None else {},
        parent_run_id=parent, refit=tracked, model_uri=champion.get("model_uri"),
        registered_version=champion.get("version"),
    )


__all__ = ["ACTIVE", "CLOSED_ATTR", "DONE", "PARENTS_ATTR", "PRUNERS", "REFIT_ATTR", "SETUP_ATTR",
           "StudyResult", "best_params", "make_pruner", "make_search", "preset_values", "run_study",
           "study_base", "worker_id"]
