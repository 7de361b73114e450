"""The pyfunc flavor: a saved Forecaster run directory served through ``mlflow.pyfunc``.

``mlflow.pyfunc.load_model(uri).predict(df)`` takes the recent history (a frame with the
date column and the fitted value columns, at least ``lookback`` rows) and returns the
forecast frame of :meth:`Forecaster.predict`: the next ``horizon`` timestamps and values in
original units. The same works over REST with ``mlflow models serve``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlflow.pyfunc
import pandas as pd

MODEL_CODE = Path(__file__).with_name("_model_code.py")
RUN_DIR = "run_dir"  # name of the artifact holding the Forecaster run directory


class ForecasterModel(mlflow.pyfunc.PythonModel):
    """Wraps ``Forecaster.load(run_dir)``; predict(history frame) -> forecast frame."""

    def load_context(self, context: Any) -> None:
        from tsmix.forecasting import Forecaster

        self.forecaster = Forecaster.load(context.artifacts[RUN_DIR])
        self.date_col = self.forecaster.predict().columns[0]  # the fitted data's date column

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict | None = None) -> pd.DataFrame:
        df = pd.DataFrame(model_input)  # also accepts dict-of-lists from REST clients
        if self.date_col in df.columns:  # JSON carries timestamps as strings
            df[self.date_col] = pd.to_datetime(df[self.date_col])
        return self.forecaster.predict(df)


def input_example(
    forecaster: Any, data: Any, *, data_dir: Any = None, date_col: str | None = None
) -> pd.DataFrame:
    """The last ``lookback`` rows of ``data`` as the frame ``predict`` takes (date column first)."""
    from tsmix.datasets import load

    lookback = forecaster.config.lookback
    name = forecaster.predict().columns[0]  # the fitted data's date column
    series = load(data, data_dir=data_dir, date_col=date_col)
    example = pd.DataFrame(series.values[-lookback:].astype("float64"), columns=list(series.columns))
    example.insert(0, name, pd.to_datetime(series.timestamps[-lookback:]))
    return example


def requirements() -> list[str]:
    """Pinned runtime requirements, written without MLflow's slow import-tracing inference.

    ``tsmix`` itself must be installed where the model is served (``--env-manager local``
    uses the current environment).
    """
    from importlib.metadata import PackageNotFoundError, version

    reqs = []
    for dist in ("tsmix", "mlflow", "torch", "numpy", "pandas", "polars", "pyarrow", "scikit-learn",
                 "safetensors"):
        try:
            reqs.append(f"{dist}=={version(dist)}")
        except PackageNotFoundError:
            reqs.append(dist)
    return reqs


def log_forecaster(
    forecaster: Any,
    run_dir: str | Path,
    data: Any,
    *,
    name: str = "model",
    data_dir: Any = None,
    date_col: str | None = None,
    registered_model_name: str | None = None,
) -> Any:
    """Log ``run_dir`` (a saved fit of ``forecaster``) as a pyfunc model in the active run.

    The input example is the tail of ``data``; the signature is inferred from it and the
    forecast it gives. Returns MLflow's ``ModelInfo`` (``model_uri``,
    ``registered_model_version``).
    """
    from mlflow.models import infer_signature

    example = input_example(forecaster, data, data_dir=data_dir, date_col=date_col)
    signature = infer_signature(example, forecaster.predict(example))
    return mlflow.pyfunc.log_model(
        name=name,
        python_model=str(MODEL_CODE),
        artifacts={RUN_DIR: str(Path(run_dir))},
        input_example=example,
        signature=signature,
        pip_requirements=requirements(),
        registered_model_name=registered_model_name,
    )
