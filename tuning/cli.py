"""``tsmix tune``: one worker of an Optuna study (start N of them on the same storage/study).

Also the tracking flags other commands share: :func:`add_tracking_arguments` adds
``--tracking-uri/--experiment/--register-as/--alias`` (and ``--track``) to a parser,
:func:`tracking_requested` says whether the user asked for tracking, and
:func:`track_from_args` runs the tracked fit (train, save locally, log, register).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tsmix.errors import TsmixError


def add_tracking_arguments(p: argparse.ArgumentParser, *, default_experiment: str | None = "tsmix",
                           optional: bool = True) -> None:
    """``optional``: tracking is opt-in (``--track``, or implied by ``--tracking-uri``/``--register-as``)."""
    g = p.add_argument_group("MLflow tracking")
    if optional:
        g.add_argument("--track", action="store_true",
                       help="log the fit to MLflow (implied by --tracking-uri and --register-as)")
    g.add_argument("--tracking-uri", default=None,
                   help="MLflow tracking URI (default sqlite:///mlflow.db in the working directory; "
                        "http://host:port for a tracking server)")
    g.add_argument("--experiment", default=default_experiment,
                   help="MLflow experiment name" + (f" (default {default_experiment})" if default_experiment
                                                    else " (default: the study name)"))
    g.add_argument("--register-as", default=None, metavar="NAME",
                   help="register the model under NAME in the MLflow model registry (default: none)")
    g.add_argument("--alias", default="champion",
                   help="alias set on the registered version (default champion)")


def tracking_requested(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "track", False) or args.tracking_uri or args.register_as)


def track_from_args(forecaster: Any, data: Any, args: argparse.Namespace, out_dir: str | Path | None = None,
                    **kwargs: Any) -> Any:
    """``track_fit`` with the flags of :func:`add_tracking_arguments`; returns the TrackedRun."""
    from tsmix.tuning.tracking import track_fit

    return track_fit(forecaster, data, tracking_uri=args.tracking_uri, experiment=args.experiment or "tsmix",
                     register_as=args.register_as, alias=args.alias, out_dir=out_dir, **kwargs)


def parse_key_value(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` with the value read as JSON where it parses (numbers, true/false), else a string."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    key, raw = text.split("=", 1)
    try:
        value = json.loads(raw)  # numbers, true/false, null, {"json": "objects"}
    except json.JSONDecodeError:
        value = raw
    return key.strip(), value


def add_commands(sub: Any) -> None:
    from tsmix.forecasting.presets import preset_names

    p = sub.add_parser(
        "tune", help="tune a forecaster with an Optuna study tracked in MLflow",
        description="One worker of an Optuna study over Forecaster configs. Start several on the same "
                    "--storage and --study to share the work; together they run exactly --trials trials.",
    )
    p.add_argument("--dataset", default=None,
                   help="benchmark name (ETTh1, ...) or a CSV/parquet path (required unless --show-space)")
    p.add_argument("--data-dir", default=None,
                   help="folder holding the benchmark files (default: $TSMIX_DATA_DIR, then the user cache)")
    p.add_argument("--model", default="patchtst", help="patchtst | itransformer | dlinear (default patchtst)")
    p.add_argument("--mixers", default="softmax",
                   help="comma-separated mixers to choose from (tsmix mixers lists them); ignored by dlinear "
                        "(default softmax)")
    p.add_argument("--trials", type=int, default=20,
                   help="total COMPLETE+PRUNED trials of the study, over all workers (default 20)")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds after which this worker starts no new trial (default: no limit)")
    p.add_argument("--epochs", type=int, default=None,
                   help="maximum epochs of each trial (default: the preset's, else 10)")
    p.add_argument("--lookback", type=int, default=None,
                   help="input window length (default: the preset's, else 336)")
    p.add_argument("--horizon", type=int, default=96, help="steps to forecast (default 96)")
    p.add_argument("--features", default="M", choices=("M", "S", "MS"),
                   help="M all->all, S target->target, MS all->target (default M)")
    p.add_argument("--storage", default=None,
                   help="sqlite:///optuna.db (default), journal:PATH, or postgresql://user@host/db "
                        "(the installed driver, or name one: postgresql+psycopg2://)")
    p.add_argument("--study", default="tsmix", help="study name; rerunning continues it (default tsmix)")
    p.add_argument("--seed", type=int, default=2021,
                   help="TPE sampler seed; trial k uses seed+k (default 2021)")
    p.add_argument("--pruner", default="median", choices=("median", "hyperband", "none"),
                   help="stop weak trials early on their validation loss; median prunes only after 5 "
                        "finished trials, from epoch max(1, epochs // 2) on, and never at the last epoch "
                        "(default median)")
    p.add_argument("--heartbeat", type=int, default=60,
                   help="seconds between heartbeats of a running trial (default 60)")
    p.add_argument("--grace", type=int, default=None,
                   help="seconds without heartbeat before a trial counts as dead (default 2x heartbeat)")
    p.add_argument("--retry-stale", type=int, default=0, metavar="N",
                   help="re-queue a dead worker's trial up to N times (default 0: only mark it failed)")
    p.add_argument("--out", default=None, help="folder for the champion's run directory (default tsmix-runs)")
    p.add_argument("--no-refit", action="store_true",
                   help="do not train the champion at the end (default: the best trial's settings are "
                        "trained on train+val, scored on test and registered with --register-as)")
    p.add_argument("--preset", default=None, choices=preset_names(),
                   help="every trial starts from this preset's hyper-parameters for --model on --dataset "
                        "at --horizon (tsmix fit --preset); the space searches over them and --set wins "
                        "(default: the Forecaster's defaults)")
    p.add_argument("--set", dest="fixed", type=parse_key_value, action="append", default=[],
                   metavar="KEY=VALUE",
                   help="hold a Forecaster hyper-parameter fixed, e.g. --set batch_size=64 (repeatable); "
                        "it leaves the search space and every trial trains with it (default: none)")
    p.add_argument("--space", default=None, metavar="FILE",
                   help="a .json/.yaml file of Optuna distributions by name, e.g. "
                        '{"lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": true}}, overriding or '
                        "extending the model's space (default: the built-in space)")
    p.add_argument("--show-space", action="store_true",
                   help="print the effective search space (after --set and --space) as JSON and exit "
                        "(default: tune)")
    p.add_argument("--quiet", action="store_true",
                   help="only print the summary (default: a line per trial with its epochs)")
    from tsmix.forecasting.cli import add_reading_flags

    add_reading_flags(p, "reading --dataset (held fixed like --set)")
    add_tracking_arguments(p, default_experiment=None, optional=False)
    p.set_defaults(func=_tune)


def _tune(args: argparse.Namespace) -> int:
    import os

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # one line per event
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # no "View run" lines per trial
    from tsmix.forecasting.cli import reading_of

    fixed = dict(args.fixed)
    if "features" in fixed:
        raise TsmixError("--set features=... is not taken: use --features")
    for name, value in reading_of(args).items():
        if name in fixed and fixed[name] != value:
            raise TsmixError(f"--set {name}={fixed[name]} and --{name.replace('_', '-')} {value} disagree; "
                             "give it once")
        fixed[name] = value
    mixers = [m for m in args.mixers.split(",") if m.strip()]
    if args.show_space:
        from tsmix.tuning import spaces
        from tsmix.tuning.study import make_search, preset_values

        search = make_search(args.model, spaces.check_mixers(mixers), fixed, args.space)
        described = search.describe()
        if args.preset:  # the values every trial starts from (searched names replace theirs)
            if not args.dataset:
                raise TsmixError("--preset is set per dataset: give --dataset with --show-space")
            described.update(preset=args.preset,
                             base=preset_values(args.preset, args.model, args.dataset, args.horizon))
        print(json.dumps(described, indent=2, sort_keys=True, default=str))
        return 0
    if not args.dataset:
        raise TsmixError("--dataset is required: a benchmark name such as ETTh1, or a CSV/parquet path")
    from tsmix.tuning.study import run_study

    result = run_study(
        args.dataset, model=args.model, mixers=mixers,
        trials=args.trials, timeout=args.timeout, epochs=args.epochs, lookback=args.lookback,
        horizon=args.horizon, storage=args.storage, study=args.study, tracking_uri=args.tracking_uri,
        experiment=args.experiment, register_as=args.register_as, alias=args.alias, seed=args.seed,
        pruner=args.pruner, heartbeat=args.heartbeat, grace=args.grace, retry_stale=args.retry_stale,
        data_dir=args.data_dir, refit=not args.no_refit, out_dir=args.out, verbose=not args.quiet,
        features=args.features, space=args.space, preset=args.preset, **fixed,
    )
    print(f"study {result.study}: {result.complete} complete, {result.pruned} pruned, {result.failed} failed "
          f"of {result.trials}; this worker ran {len(result.ran)}")
    if result.best_trial is not None:
        print(f"best trial {result.best_trial}: val_mse {result.best_value:.6g}")
        print("best params: " + json.dumps(result.best_params, sort_keys=True, default=str))
    if result.refit is not None:
        r = result.refit
        print(f"refit: {r.out_dir} (MLflow run {r.run_id}, model {r.model_uri})")
        if r.registered_name:
            print(f"registered: models:/{r.registered_name}@{r.alias} (version {r.version})")
    elif result.model_uri:
        print(f"champion: {result.model_uri} (the best trial is unchanged; not refit again)")
    return 0
