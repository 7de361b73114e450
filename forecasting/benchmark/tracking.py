"""MLflow logging of benchmark rows and reports, scoped: the caller's tracking URI and active
experiment are left as they were (the benchmark never changes MLflow's global settings)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def benchmark_run(tracking_uri: str, experiment: str, run_name: str) -> Iterator[Any]:
    """An MLflow run in ``experiment`` (created if missing) at ``tracking_uri``, for the block.

    The URI is checked first (an unreachable server is a TsmixError before anything is logged)."""
    import mlflow

    from tsmix.tuning.tracking import check_tracking, using_tracking

    uri, experiment_id = check_tracking(tracking_uri, experiment)
    with using_tracking(uri), mlflow.start_run(experiment_id=experiment_id, run_name=run_name) as run:
        yield run
