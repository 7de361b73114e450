"""The pyfunc flavor: a saved Forecaster run directory served through ``mlflow.pyfunc``.

``mlflow.pyfunc.load_model(uri).predict(df, params={"horizon": k})`` takes the recent history
(a frame with the date column and the fitted value columns, at least ``lookback`` rows) and
returns the forecast frame of :meth:`Forecaster.predict`: the next ``horizon`` timestamps and
values in original units. The same works over REST (``mlflow models serve``, JSON or CSV).
A model fitted on a long-format panel takes and returns long frames instead; its request
convention (future covariate rows, static attributes) is in :mod:`tsmix.tuning.pyfunc_panel`.

Params (a params schema): ``horizon`` (steps, at most the trained horizon; default all of them),
``level`` (interval levels in percent, e.g. ``[80, 95]``: ``<col>-lo-80``, ``<col>-hi-80``, ...)
and ``quantiles`` (e.g. ``[0.1, 0.9]``: ``<col>-q0.1``, ...), empty by default (a point
forecast): the columns ``Forecaster.predict(level=..., quantiles=...)`` returns. A value the
model rejects is a 400 over REST with the library's message.

Portability: the model carries the ``tsmix`` package itself (``code/tsmix``, staged in its
import layout; MLflow puts ``code/`` on ``sys.path`` when it loads the model) and the
third-party requirements tsmix declares (ranges, no ``tsmix==`` pin that no index serves), so
it loads where tsmix is not installed.

The signature has no input schema on purpose: MLflow's column types cannot take a date column
that arrives as datetimes in-process, as text over REST and zoned from zoned data (``datetime``
rejects text and zones, ``any`` breaks MLflow's CSV parser), nor integer columns where
``double`` is declared. The input contract (date column, value columns, lookback) is stored in
the model's config and checked in ``predict``, with a one-line error naming the fix.
"""

from __future__ import annotations

import numbers
import shutil
import tempfile
from pathlib import Path
from typing import Any

import mlflow.pyfunc
import pandas as pd
from mlflow.exceptions import INVALID_PARAMETER_VALUE, MlflowException

from tsmix.errors import TsmixError
from tsmix.tuning.pyfunc_panel import PanelSpec, panel_example, panel_forecast, training_static

MODEL_CODE = Path(__file__).with_name("_model_code.py")
RUN_DIR = "run_dir"  # name of the artifact holding the Forecaster run directory
PACKAGE = "tsmix"  # the import package bundled with the model
# Not part of a running model: left out of the bundled copy of the package.
CODE_EXCLUDE = ("__pycache__", "*.pyc", "*.pyo", "tests", "test", ".*", "*.egg-info")


class PyfuncInputError(TsmixError, MlflowException):
    """Bad input or params of a served forecast: a TsmixError in-process, and an MlflowException
    with INVALID_PARAMETER_VALUE so ``mlflow models serve`` answers 400 with this message."""

    def __init__(self, message: str) -> None:
        MlflowException.__init__(self, message, error_code=INVALID_PARAMETER_VALUE)


class ForecasterModel(mlflow.pyfunc.PythonModel):
    """Wraps ``Forecaster.load(run_dir)``; predict(history frame, params) -> forecast frame."""

    def load_context(self, context: Any) -> None:
        from tsmix.forecasting import Forecaster

        run_dir = context.artifacts[RUN_DIR]
        self.forecaster = Forecaster.load(run_dir)
        self.panel: PanelSpec | None = None
        self.static: pd.DataFrame | None = None  # a panel model's training static attributes
        if self.forecaster.panel_ is not None:  # long-format requests (pyfunc_panel)
            self.panel = PanelSpec.of(self.forecaster)  # the fitted schema is the contract; config echoes it
            self.static = training_static(run_dir)
            return
        config = getattr(context, "model_config", None) or {}  # empty for models logged before it existed
        # the fitted data's date column (older models: read off a forecast)
        self.date_col: str = config.get("date_column") or self.forecaster.predict().columns[0]
        self.columns: list[str] | None = config.get("columns")  # value columns in fitted order

    # pd.DataFrame is what MLflow hands over, and a hint MLflow infers no second signature from
    def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None
                ) -> pd.DataFrame:
        horizon, level, quantiles = self._params(params or {})
        try:
            if self.panel is not None:
                return panel_forecast(self.forecaster, model_input, self.panel, self.static,
                                      horizon=horizon, level=level, quantiles=quantiles)
            history = self._history(model_input)
            # intervals: the head's or conformal; quantiles: the head's or conformal ones
            out = self.forecaster.predict(history, level=level or None, quantiles=quantiles or None)
        except PyfuncInputError:
            raise
        except TsmixError as exc:  # the Forecaster's own input checks, worded for the user
            raise PyfuncInputError(str(exc)) from exc
        return out.iloc[:horizon].reset_index(drop=True)

    def _params(self, params: dict[str, Any]) -> tuple[int, list[int], list[float]]:
        """``(horizon, levels, quantiles)`` from the request's params; defaults: trained horizon, a
        point forecast."""
        trained = self.forecaster.config.horizon
        horizon = params.get("horizon")
        horizon = trained if horizon is None else horizon
        if isinstance(horizon, bool) or not isinstance(horizon, numbers.Integral) or horizon < 1:
            raise PyfuncInputError(f"param horizon must be a positive number of steps, got {horizon!r}")
        horizon = int(horizon)
        if horizon > trained:
            raise PyfuncInputError(
                f"param horizon={horizon} is longer than the {trained} steps this model forecasts; "
                f"ask for at most {trained} or train a model with horizon {horizon}")
        level = params.get("level")
        level = [] if level is None else [int(x) for x in level]  # a list, or an array once MLflow checked it
        quantiles = params.get("quantiles")
        quantiles = [] if quantiles is None else [float(x) for x in quantiles]  # range checks: the library's
        return horizon, level, quantiles

    def _history(self, model_input: Any) -> pd.DataFrame:
        """The request as the frame ``Forecaster.predict`` reads: date column first, then the fitted
        value columns in order (other columns dropped), integer values as float64. Text dates are
        parsed by tsmix.datasets, like a file's."""
        df = pd.DataFrame(model_input)  # also dict-of-lists from REST clients
        want = [self.date_col, *(self.columns or [c for c in df.columns if c != self.date_col])]
        missing = [c for c in want if c not in df.columns]
        if missing:
            raise PyfuncInputError(
                f"input is missing column(s) {missing}; send a frame with columns {want} "
                f"(at least {self.forecaster.config.lookback} rows)")
        whole = [c for c in want[1:] if pd.api.types.is_integer_dtype(df[c])]
        return df[want].astype(dict.fromkeys(whole, "float64"))  # JSON and CSV carry whole numbers as ints


# --------------------------------------------------------------------- what the model carries
def package_folders(package: str = PACKAGE) -> dict[str, Path]:
    """``{"": root folder, "<sub>": folder}``: where ``package`` and each direct sub-package that
    lives outside its root folder are. An installed wheel has everything under the root; a source
    checkout installed in editable mode maps root folders (``datasets/`` -> ``tsmix.datasets``),
    which are found as the root's sibling folders that import as ``package.<name>``."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise TsmixError(f"{package} is not importable here; install it (pip install -e .) to log models")
    root = Path(spec.origin).resolve().parent
    folders = {"": root}
    for cand in sorted(root.parent.iterdir()):
        is_package = cand.name.isidentifier() and (cand / "__init__.py").is_file()
        if not is_package or (root / cand.name).exists():
            continue
        sub = importlib.util.find_spec(f"{package}.{cand.name}")
        if sub is not None and sub.origin and Path(sub.origin).resolve().parent == cand.resolve():
            folders[cand.name] = cand.resolve()
    return folders


def stage_package(dest: str | Path, package: str = PACKAGE) -> Path:
    """Copy ``package`` into ``dest/<package>`` in its import layout (what ``code_paths`` bundles),
    without caches and tests. Returns the staged package folder."""
    folders = package_folders(package)
    target = Path(dest) / package
    ignore = shutil.ignore_patterns(*CODE_EXCLUDE)
    shutil.copytree(folders.pop(""), target, ignore=ignore)
    for name, folder in folders.items():
        shutil.copytree(folder, target / name, ignore=ignore)
    return target


def requirements(package: str = PACKAGE) -> list[str]:
    """The third-party requirements ``package`` declares (version ranges as written, environment
    markers kept, extras such as ``dev`` left out); the package itself travels as code.

    Written instead of MLflow's slow import-tracing inference."""
    from importlib.metadata import PackageNotFoundError, requires

    from packaging.requirements import Requirement

    try:
        declared = requires(package) or []
    except PackageNotFoundError as exc:
        raise TsmixError(
            f"{package} is not installed as a distribution; pip install -e . to log models") from exc
    reqs = [Requirement(line) for line in declared]
    return [str(r) for r in reqs if r.marker is None or "extra" not in str(r.marker)]


# --------------------------------------------------------------------- logging
def input_example(
    forecaster: Any, data: Any, *, data_dir: Any = None, date_col: str | None = None
) -> pd.DataFrame:
    """The last ``lookback`` rows of ``data`` as the frame ``predict`` takes (date column first,
    zoned when the data's dates are)."""
    from tsmix.datasets import load

    lookback = forecaster.config.lookback
    name = forecaster.predict().columns[0]  # the fitted data's date column
    series = load(data, data_dir=data_dir, date_col=date_col)
    example = pd.DataFrame(series.values[-lookback:].astype("float64"), columns=list(series.columns))
    example.insert(0, name, series.index[-lookback:])
    return example


def signature(forecaster: Any, example: pd.DataFrame, forecast: pd.DataFrame | None = None) -> Any:
    """Outputs (``forecast``, default: the forecast of ``example``) and the params schema; no input
    schema (module doc)."""
    from mlflow.models import ModelSignature, infer_signature
    from mlflow.types import DataType, ParamSchema, ParamSpec

    params = ParamSchema([
        ParamSpec("horizon", DataType.long, forecaster.config.horizon),  # steps, at most the trained ones
        ParamSpec("level", DataType.long, [], (-1,)),  # interval levels in percent; [] = point forecast
        ParamSpec("quantiles", DataType.double, [], (-1,)),  # probabilities in (0, 1); [] = none
    ])
    if forecast is None:
        forecast = forecaster.predict(example)
    outputs = infer_signature(forecast).inputs  # the forecast frame's column schema
    return ModelSignature(outputs=outputs, params=params)


def log_forecaster(
    forecaster: Any,
    run_dir: str | Path,
    data: Any,
    *,
    name: str = "model",
    data_dir: Any = None,
    date_col: str | None = None,
    registered_model_name: str | None = None,
    futr_df: Any = None,
) -> Any:
    """Log ``run_dir`` (a saved fit of ``forecaster``) as a pyfunc model in the active run.

    The model bundles the tsmix package and its requirements (module doc); the input example is
    the tail of ``data`` (for a panel fit: of a few of its series, see :mod:`pyfunc_panel`;
    ``futr_df``: future covariates to append to it). Returns MLflow's ``ModelInfo``
    (``model_uri``, ``registered_model_version``).
    """
    forecast = None
    if forecaster.panel_ is not None:
        spec = PanelSpec.of(forecaster)
        example = panel_example(forecaster, data, spec, futr_df=futr_df)
        config: dict[str, Any] = {"panel": spec.to_config()}
        forecast = panel_forecast(forecaster, example, spec, training_static(run_dir), horizon=spec.horizon)
    else:
        if futr_df is not None:
            raise TsmixError("futr_df applies to models fitted on long-format panels, not to this wide model")
        example = input_example(forecaster, data, data_dir=data_dir, date_col=date_col)
        config = {"date_column": str(example.columns[0]), "columns": [str(c) for c in example.columns[1:]]}
    with tempfile.TemporaryDirectory(prefix="tsmix-code-") as tmp:
        return mlflow.pyfunc.log_model(
            name=name,
            python_model=str(MODEL_CODE),
            artifacts={RUN_DIR: str(Path(run_dir))},
            code_paths=[str(stage_package(tmp))],
            model_config=config,
            input_example=example,
            signature=signature(forecaster, example, forecast),
            pip_requirements=requirements(),
            registered_model_name=registered_model_name,
        )
