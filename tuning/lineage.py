"""Dataset lineage for MLflow: which data (name, source, digest) and which split sizes a run used.

Logged with ``mlflow.log_input`` on every trial run and on the refit, so a registered model
can be traced back to the exact file and borders it was trained and selected on.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class DataLineage:
    name: str  # dataset name (benchmark name, file stem, or "frame")
    source: str  # where it came from: the file path, or "in-memory frame"
    digest: str  # sha256 of the file (first 16 hex digits), or MLflow's digest of the frame
    splits: dict[str, Any] = field(default_factory=dict)  # rows, borders and windows of each split
    dataset: Any = None  # the mlflow.data Dataset logged as the run input

    def params(self) -> dict[str, Any]:
        """Flat params for the study's run: dataset name, source, digest and window counts."""
        return {"dataset": self.name, "dataset.source": self.source, "dataset.digest": self.digest,
                **{f"dataset.{k}": v for k, v in self.splits.items() if k.endswith("_windows")}}


def data_lineage(data: Any, *, lookback: int, horizon: int, features: str, data_dir: Any = None,
                 date_col: str | None = None, target: str | None = None, fill: str | None = None,
                 date_format: str | None = None, date_unit: str | None = None) -> DataLineage:
    """Read ``data`` the way a fit does and describe it (one extra read, once per worker).

    ``target``, ``fill``, ``date_format``, ``date_unit``: the fit's reading settings (its config's),
    so data a fit can read (NaNs filled, text or epoch dates) is described, not rejected."""
    import mlflow.data
    import pandas as pd

    from tsmix.datasets import prepare, sha256_file

    prepared = prepare(data, lookback, horizon, features, data_dir=data_dir, date_col=date_col, target=target,
                       fill=fill, date_format=date_format, date_unit=date_unit)
    summary = prepared.summary()
    series = prepared.series
    frame = pd.DataFrame(series.values, columns=list(series.columns))
    path = summary.get("path")
    splits = {f"{k}_windows": summary[f"{k}_windows"] for k in ("train", "val", "test")}
    splits.update({f"{k}_rows": f"{a}:{b}" for k, (a, b) in summary.get("borders", {}).items()})
    splits["rows"] = summary.get("rows")
    with warnings.catch_warnings():  # "source can be interpreted in multiple ways": a local file, either way
        warnings.simplefilter("ignore", UserWarning)
        if path and Path(path).is_file():
            name = str(data) if isinstance(data, str) and not Path(data).is_file() else Path(path).stem
            digest = sha256_file(Path(path))[:16]
            dataset = mlflow.data.from_pandas(frame, source=str(path), name=name, digest=digest)
            return DataLineage(name, str(path), digest, splits, dataset)
        dataset = mlflow.data.from_pandas(frame, name="frame")
    return DataLineage("frame", "in-memory frame", dataset.digest, splits, dataset)


# How the tracking server's SQL store words a lost insert race (SQLite, PostgreSQL, MySQL).
_RACE_WORDS = ("unique constraint", "duplicate key", "duplicate entry")


def log_lineage(lineage: DataLineage, context: str) -> None:
    """``mlflow.log_input`` on the active run, the split sizes as input tags.

    The server looks the dataset up and inserts it when missing, in two steps: two workers
    logging a new dataset at once can both miss it and one insert then fails on the unique
    (experiment, name, digest) key (seen with two ``tsmix tune`` workers). The dataset exists
    by then, so that one error is retried once; any other error, or a second failure, is raised.
    """
    import mlflow
    from mlflow.exceptions import MlflowException

    tags = {k: str(v) for k, v in lineage.splits.items()}
    try:
        mlflow.log_input(lineage.dataset, context=context, tags=tags)
    except MlflowException as exc:
        if not any(w in str(exc).lower() for w in _RACE_WORDS):
            raise
        mlflow.log_input(lineage.dataset, context=context, tags=tags)
