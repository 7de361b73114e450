"""MLflow tracking of Forecaster fits: params, per-epoch losses, metrics, plot, model, registry.

Order of a tracked fit (``track_fit``), chosen so a tracking failure never costs a model:

1. resolve the tracking URI (default ``sqlite:///mlflow.db`` in the working directory) and
   check it answers (``/health`` of an http server, the experiment is readable/creatable)
   BEFORE training: an unreachable server is a TsmixError and nothing is trained;
2. train, logging ``train_loss``/``val_loss``/``lr`` per epoch from the fit callback (if the
   server drops mid-fit, live logging stops and the history is logged in one batch later);
3. save the run directory locally;
4. log metrics, mixer diagnostics, the forecast plot, config/metrics files and the pyfunc
   model; register it and point the alias (MLflow 3 aliases, no stages) at the new version.
"""

from __future__ import annotations

import contextlib
import math
import re
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tsmix.errors import TsmixError

DEFAULT_EXPERIMENT = "tsmix"
DEFAULT_ALIAS = "champion"
DEFAULT_OUT = "tsmix-runs"  # local run directories of tracked fits: <out>/<mlflow run id>
EPOCH_KEYS = ("train_loss", "val_loss", "lr", "seconds")
TEST_METRICS = {"mse": "test_mse", "mae": "test_mae"}  # metrics_ keys renamed for clarity


@dataclass(frozen=True)
class TrackedRun:
    run_id: str  # MLflow run id
    experiment_id: str
    tracking_uri: str
    out_dir: Path  # local run directory (saved before any remote logging)
    model_uri: str | None  # models:/m-... of the logged pyfunc model
    registered_name: str | None  # registry name, if registered
    version: str | None  # registered model version
    alias: str | None  # alias now pointing at ``version``


def resolve_tracking_uri(uri: str | None) -> str:
    """``None`` -> ``sqlite:///<cwd>/mlflow.db``; relative sqlite paths made absolute."""
    if not uri:
        return f"sqlite:///{(Path.cwd() / 'mlflow.db').resolve()}"
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return f"sqlite:///{Path(uri[len('sqlite:///'):]).expanduser().resolve()}"
    return uri


def validate_tracking_uri(uri: str | None) -> str:
    """The resolved URI once it looks usable (an http server answers ``/health``, a sqlite
    database's folder exists); creates nothing, so it can run before anything is written."""
    uri = resolve_tracking_uri(uri)
    if uri.startswith(("http://", "https://")):
        _check_http(uri)
    elif uri.startswith("sqlite:///"):
        folder = Path(uri[len("sqlite:///") :]).parent
        if not folder.is_dir():
            raise TsmixError(
                f"tracking database folder {folder} does not exist; create it or fix --tracking-uri"
            )
    return uri


def check_tracking(uri: str | None, experiment: str = DEFAULT_EXPERIMENT) -> tuple[str, str]:
    """``(uri, experiment_id)`` once the tracking store answered; TsmixError otherwise.

    Called before any training so a wrong ``--tracking-uri`` costs nothing. A sqlite store is
    created under a file lock: workers started together must not create its tables twice.
    """
    uri = validate_tracking_uri(uri)
    lock = contextlib.nullcontext()
    if uri.startswith("sqlite:///"):
        from filelock import FileLock

        lock = FileLock(uri[len("sqlite:///") :] + ".tsmix-lock")
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    try:
        with lock:
            client = MlflowClient(tracking_uri=uri)
            exp = client.get_experiment_by_name(experiment)  # creates a fresh sqlite store's tables
            if exp is None:
                try:
                    return uri, client.create_experiment(experiment)
                except MlflowException:  # another worker (on a server) created it meanwhile
                    exp = client.get_experiment_by_name(experiment)
                    if exp is None:
                        raise
        if exp.lifecycle_stage != "active":
            raise TsmixError(
                f"MLflow experiment {experiment!r} is deleted at {uri}; restore it or pick another name"
            )
        return uri, exp.experiment_id
    except MlflowException as exc:
        raise TsmixError(f"MLflow tracking at {uri} failed: {_first_line(exc)}; fix --tracking-uri") from exc


def _check_http(uri: str, timeout: float = 5.0) -> None:
    url = uri.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            if resp.status != 200:
                raise TsmixError(f"MLflow tracking server {uri} answered {resp.status} on /health")
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TsmixError(
            f"MLflow tracking server {uri} is not reachable ({reason}); start it (mlflow server "
            f"--host HOST --port PORT) or pass another --tracking-uri (default: sqlite:///mlflow.db)"
        ) from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@contextlib.contextmanager
def using_tracking(uri: str) -> Iterator[None]:
    """Point MLflow's fluent API at ``uri`` for the block, then restore the caller's setting.

    The registry follows the tracking URI (unless ``MLFLOW_REGISTRY_URI`` says otherwise).
    """
    import os

    import mlflow
    from mlflow.tracking import is_tracking_uri_set

    prev = mlflow.get_tracking_uri() if is_tracking_uri_set() else None  # None: restoring pins no default
    prev_env = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(prev)
        if prev_env is not None:
            os.environ["MLFLOW_TRACKING_URI"] = prev_env


# --------------------------------------------------------------------- what gets logged
def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}} -> {"a.b": 1}``; None becomes "None" (MLflow params are strings)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


RUNTIME_PARAMS = ("progress", "threads")  # how a fit runs, not what it is: not logged as params


def config_params(forecaster: Any) -> dict[str, Any]:
    """The forecaster's hyper-parameters, flattened (mixer options as ``mixer_options.X``),
    without runtime settings, and without the mixer for a model that has none (DLinear)."""
    params = {k: v for k, v in forecaster.get_params().items() if k not in RUNTIME_PARAMS}
    if not uses_mixer(params["model"]):
        params.pop("mixer", None)
        params.pop("mixer_options", None)
    return flatten(params)


def uses_mixer(model: str) -> bool:
    """Whether ``model`` has a token mixer (its search space says so; unknown models keep the mixer)."""
    from tsmix.tuning.spaces import model_space

    try:
        return model_space(model).uses_mixer
    except TsmixError:
        return True


_BAD_CHARS = re.compile(r"[^0-9A-Za-z_\-./ :]")


def metric_name(key: str) -> str:
    """MLflow allows alphanumerics, ``_-./ :`` in metric names."""
    return _BAD_CHARS.sub("_", key)


def numeric(d: Mapping[str, Any]) -> dict[str, float]:
    """The finite real-valued entries (bools and strings are not metrics)."""
    out = {}
    for k, v in d.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if math.isfinite(float(v)):
            out[k] = float(v)
    return out


def fit_metrics(forecaster: Any) -> dict[str, float]:
    """Final metrics of a fitted forecaster: test mse/mae (overall and ``per_channel.COL.mse``),
    val_mse, timings, size, and the mixers' diagnostics as ``diag.<module>.<key>``."""
    m = {TEST_METRICS.get(k, k): v for k, v in numeric(flatten(forecaster.metrics_)).items()}
    for k, v in numeric(forecaster.mixer_diagnostics()).items():
        m[metric_name(f"diag.{k}")] = v
    return m


def validation_metrics(forecaster: Any) -> dict[str, float]:
    """:func:`fit_metrics` without anything measured on the test split (what a tuning trial logs:
    selection must never see the test set)."""
    test = (*TEST_METRICS.values(), "test_windows")
    return {k: v for k, v in fit_metrics(forecaster).items()
            if k not in test and not k.startswith("per_channel.")}


TRIAL_PLOT = "plots/forecast_val.png"  # a trial's plot: the last validation window (never test)


def log_forecast_plot(forecaster: Any, split: str = "val", artifact_path: str = "plots") -> bool:
    """Log the PNG of the last ``split`` window to the active run; False (with a warning) when
    drawing or logging fails: a missing plot must not cost a trial or a model."""
    import tempfile

    import mlflow

    try:
        with tempfile.TemporaryDirectory(prefix="tsmix-plot-") as tmp:
            path = forecaster.plot_forecast(Path(tmp) / f"forecast_{split}.png", split=split)
            mlflow.log_artifact(str(path), artifact_path=artifact_path)
        return True
    except Exception as exc:
        warnings.warn(f"the {split} forecast plot was not logged ({type(exc).__name__}: {_first_line(exc)}); "
                      "the run goes on", stacklevel=2)
        return False


class EpochLogger:
    """Fit callback logging each epoch's losses to the active MLflow run.

    A failing tracking server must not stop training: the first error switches live logging
    off (with a warning) and :meth:`flush` logs the whole history in one batch afterwards.
    """

    def __init__(self) -> None:
        self.failed: BaseException | None = None

    def __call__(self, epoch: int, logs: Mapping[str, Any]) -> None:
        if self.failed is not None:
            return
        import mlflow

        try:
            mlflow.log_metrics(numeric({k: logs[k] for k in EPOCH_KEYS if k in logs}), step=int(epoch))
        except Exception as exc:
            self.failed = exc
            warnings.warn(f"live MLflow logging stopped ({_first_line(exc)}); training goes on", stacklevel=2)

    def flush(self, history: list[Mapping[str, Any]]) -> None:
        """After a live-logging failure: log every epoch of ``history`` now."""
        if self.failed is None:
            return
        import time

        import mlflow
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [
            Metric(k, v, now, int(row.get("epoch", i + 1)))
            for i, row in enumerate(history)
            for k, v in numeric({k: row[k] for k in EPOCH_KEYS if k in row}).items()
        ]
        mlflow.MlflowClient().log_batch(mlflow.active_run().info.run_id, metrics=metrics)


# --------------------------------------------------------------------- the tracked fit
def track_fit(
    forecaster: Any,
    data: Any,
    tracking_uri: str | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
    register_as: str | None = None,
    alias: str = DEFAULT_ALIAS,
    out_dir: str | Path | None = None,
    *,
    data_dir: str | Path | None = None,
    date_col: str | None = None,
    run_name: str | None = None,
    parent_run_id: str | None = None,
    tags: Mapping[str, str] | None = None,
    callbacks: tuple[Callable[[int, dict], None], ...] = (),
    lineage: Any = None,
    version_tags: Mapping[str, str] | None = None,
) -> TrackedRun:
    """Fit ``forecaster`` on ``data`` and track everything in MLflow (see the module doc).

    ``out_dir``: where the run directory is saved first (default ``tsmix-runs/<run id>``).
    ``register_as``: registered model name; ``alias`` then points at the new version, which
    gets a description and tags (data, window, metrics, commit, versions, ``version_tags``).
    ``lineage``: a :class:`tsmix.tuning.lineage.DataLineage` logged as the run's input.
    """
    import mlflow

    if register_as is not None and not register_as.strip():
        raise TsmixError("--register-as needs a model name, got an empty string")
    if register_as and not alias:
        raise TsmixError("an alias is required when registering (default 'champion')")
    uri, experiment_id = check_tracking(tracking_uri, experiment)  # before training
    out_dir = Path(out_dir).expanduser().resolve() if out_dir is not None else None
    with using_tracking(uri):
        run = mlflow.start_run(  # nested under the caller's active run, if any
            experiment_id=experiment_id, run_name=run_name, parent_run_id=parent_run_id,
            nested=parent_run_id is not None or mlflow.active_run() is not None, tags=dict(tags or {}),
        )
        run_id = run.info.run_id
        status = "FAILED"
        try:
            try:
                mlflow.log_params(config_params(forecaster))
            except Exception as exc:
                raise TsmixError(
                    f"logging to MLflow at {uri} failed before training: {_first_line(exc)}"
                ) from exc
            if lineage is not None:
                from tsmix.tuning.lineage import log_lineage

                log_lineage(lineage, "training")
            live = EpochLogger()
            forecaster.fit(data, data_dir=data_dir, date_col=date_col, callbacks=(live, *callbacks))
            out = forecaster.save(out_dir or Path(DEFAULT_OUT).resolve() / run_id)  # local copy first
            try:
                info = _log_results(forecaster, data, out, live, register_as, data_dir, date_col)
                version = None if info is None else info.registered_model_version
                if register_as:
                    client = mlflow.MlflowClient()
                    describe_version(client, register_as, str(version), forecaster, data, version_tags)
                    client.set_registered_model_alias(register_as, alias, str(version))
            except Exception as exc:
                raise TsmixError(
                    f"the model is trained and saved in {out}, but logging it to MLflow at {uri} failed: "
                    f"{_first_line(exc)}"
                ) from exc
            status = "FINISHED"
        finally:
            with contextlib.suppress(Exception):
                mlflow.end_run(status=status)
    return TrackedRun(
        run_id=run_id, experiment_id=experiment_id, tracking_uri=uri, out_dir=Path(out),
        model_uri=info.model_uri, registered_name=register_as,
        version=None if version is None else str(version), alias=alias if register_as else None,
    )


def _log_results(
    forecaster: Any, data: Any, out: Path, live: EpochLogger, register_as: str | None,
    data_dir: Any, date_col: str | None,
) -> Any:
    import mlflow

    from tsmix.tuning.pyfunc import log_forecaster

    live.flush(forecaster.history)
    mlflow.log_metrics(fit_metrics(forecaster))
    for name in ("config.json", "metrics.json"):
        if (out / name).is_file():
            mlflow.log_artifact(str(out / name), artifact_path="run")
    plot = out / "forecast.png"
    if not plot.is_file():
        try:  # a panel model with future covariates cannot be drawn without them: warn, log the rest
            forecaster.plot_forecast(plot)
        except TsmixError as exc:
            warnings.warn(f"the forecast plot was not logged ({_first_line(exc)})", stacklevel=2)
    if plot.is_file():
        mlflow.log_artifact(str(plot), artifact_path="plots")
    return log_forecaster(
        forecaster, out, data, data_dir=data_dir, date_col=date_col, registered_model_name=register_as
    )


def describe_version(client: Any, name: str, version: str, forecaster: Any, data: Any,
                     extra: Mapping[str, str] | None = None) -> None:
    """Description and tags of a registered version: what it forecasts and how well."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    from tsmix.provenance import git_commit

    cfg, m = forecaster.config, forecaster.metrics_
    try:
        tsmix_version = dist_version("tsmix")
    except PackageNotFoundError:
        tsmix_version = "unknown"
    dataset = str(data) if isinstance(data, (str, Path)) else "frame"
    tags = {"dataset": dataset, "model": cfg.model, "lookback": str(cfg.lookback),
            "horizon": str(cfg.horizon), "features": cfg.features, "commit": git_commit(),
            "tsmix_version": tsmix_version}
    tested = m.get("mse") is not None  # a production fit trained on every row: nothing was tested
    tags["test_mse"] = f"{m['mse']:.6g}" if tested else "none (production fit: nothing held out)"
    held_out = numeric({"val_mse": m.get("val_mse")})  # empty when trained on train+val (NaN)
    if held_out:
        tags["val_mse"] = f"{held_out['val_mse']:.6g}"
    tags.update(extra or {})  # a study's champion: val_mse is the selection score of its best trial
    val = f"val MSE {float(tags['val_mse']):.4g}" if "val_mse" in tags else "no val MSE (train+val fit)"
    what = cfg.model
    if uses_mixer(cfg.model):
        tags["mixer"] = cfg.mixer
        what += f" ({cfg.mixer})"
    client.update_model_version(name, version, description=(
        f"{what} on {dataset}: lookback {cfg.lookback}, horizon {cfg.horizon}, features {cfg.features}; "
        f"{val}, " + (f"test MSE {m['mse']:.4g} (normalized scale); " if tested else
                      "no test MSE (production fit on every row); ") +
        f"tsmix {tsmix_version}, commit {tags['commit']}"))
    for key, value in tags.items():
        client.set_model_version_tag(name, version, key, value)
