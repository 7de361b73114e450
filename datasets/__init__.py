"""tsmix.datasets: LTSF benchmark specs, reading, lookup/download, validation, scaling, windows.

``prepare(source, lookback, horizon)`` is the one call most users need; see its docstring.
"""

from tsmix.datasets.dates import DATE_UNITS, future_index, localize
from tsmix.datasets.errors import DataError
from tsmix.datasets.lookup import cache_dir, download, resolve_path, sha256_file
from tsmix.datasets.prepare import SPLITS, Prepared, prepare
from tsmix.datasets.scaling import Scaler
from tsmix.datasets.series import Series, load
from tsmix.datasets.specs import BENCHMARKS, BenchmarkSpec, benchmark_for_file, get_benchmark, split_borders
from tsmix.datasets.timefeatures import time_features
from tsmix.datasets.validate import FEATURES, FILLS, infer_freq
from tsmix.datasets.windows import WindowSet

__all__ = [
    "BENCHMARKS", "DATE_UNITS", "FEATURES", "FILLS", "SPLITS", "BenchmarkSpec", "DataError", "Prepared",
    "Scaler", "Series", "WindowSet", "benchmark_for_file", "cache_dir", "download", "future_index",
    "get_benchmark", "infer_freq", "load", "localize", "prepare", "resolve_path", "sha256_file",
    "split_borders", "time_features",
]
