"""tsmix.forecasting.benchmark: resumable benchmark grids, result rows, reports, speed suite.

- :mod:`suites`: the smoke / quick / paper grids as :class:`RunSpec` lists.
- :mod:`store`: result rows as CSV files, one row per finished run, written atomically.
- :mod:`runner`: runs what is missing from a grid (resume by key) and stores each row at once.
- :mod:`published`: published reference numbers with source and caveats (``published.csv``).
- :mod:`report`: markdown tables, summary CSV, plots, optional MLflow logging.
- :mod:`speed`: time and peak memory of every registered mixer vs sequence length and width.
"""

from tsmix.forecasting.benchmark.published import counterpart, lookup, published
from tsmix.forecasting.benchmark.report import aggregate, write_report
from tsmix.forecasting.benchmark.runner import plan, run_one, run_suite
from tsmix.forecasting.benchmark.speed import SpeedConfig, run_speed, write_speed
from tsmix.forecasting.benchmark.store import COLUMNS, KEY_COLUMNS, ResultStore
from tsmix.forecasting.benchmark.suites import SUITES, RunSpec, Suite, expand, get_suite

__all__ = [
    "COLUMNS",
    "KEY_COLUMNS",
    "SUITES",
    "ResultStore",
    "RunSpec",
    "SpeedConfig",
    "Suite",
    "aggregate",
    "counterpart",
    "expand",
    "get_suite",
    "lookup",
    "plan",
    "published",
    "run_one",
    "run_speed",
    "run_suite",
    "write_report",
    "write_speed",
]
