"""The LTSF benchmark registry and the standard split borders used since Informer."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tsmix.datasets.errors import DataError

ETT_URL = "https://raw.githubusercontent.com/zhouhaoyi/ETDataset/main/"
# The Time-Series-Library bundle (the Autoformer files) mirrored on the Hugging Face hub.
TSL_URL = "https://huggingface.co/datasets/thuml/Time-Series-Library/resolve/main/"


@dataclass(frozen=True)
class BenchmarkSpec:
    name: str  # canonical spelling, e.g. "ETTh1"
    relpath: str  # path under a data folder / the cache, e.g. "ETT-small/ETTh1.csv"
    url: str  # canonical download location (TSMIX_DATA_URL + relpath overrides it)
    sha256: str  # checked after every download, so a corrupt or changed file never loads
    freq: str  # pandas offset alias of the sampling step
    target: str = "OT"  # the forecast target in every LTSF paper
    kind: str = "custom"  # border rule: "etth" | "ettm" | "custom" (70/10/20)
    # Timestamps at which the published file is irregular (a duplicate or a gap). They are kept as-is
    # so that row counts and splits match the papers; any other irregularity is still an error.
    known_irregular: tuple[str, ...] = ()

    @property
    def filename(self) -> str:
        return Path(self.relpath).name


def _ett(name: str, sha: str, kind: str, freq: str) -> BenchmarkSpec:
    rel = f"ETT-small/{name}.csv"
    return BenchmarkSpec(name=name, relpath=rel, url=ETT_URL + rel, sha256=sha, freq=freq, kind=kind)


BENCHMARKS: dict[str, BenchmarkSpec] = {
    s.name: s
    for s in (
        _ett("ETTh1", "f18de3ad269cef59bb07b5438d79bb3042d3be49bdeecf01c1cd6d29695ee066", "etth", "h"),
        _ett("ETTh2", "a3dc2c597b9218c7ce1cd55eb77b283fd459a1d09d753063f944967dd6b9218b", "etth", "h"),
        _ett("ETTm1", "6ce1759b1a18e3328421d5d75fadcb316c449fcd7cec32820c8dafda71986c9e", "ettm", "15min"),
        _ett("ETTm2", "db973ca252c6410a30d0469b13d696cf919648d0f3fd588c60f03fdbdbadd1fd", "ettm", "15min"),
        BenchmarkSpec(
            name="Weather",
            relpath="weather/weather.csv",
            url=TSL_URL + "weather/weather.csv",
            sha256="34ee981d07313e51da2a50bb600072c8ae4a69cb4b0651f4cb93a069d7a2ba63",
            freq="10min",
            kind="custom",
            known_irregular=("2020-05-12 06:00:00", "2020-05-29 11:10:00"),  # 1 duplicate, 1 gap of 100 min
        ),
    )
}

# Row borders of the ETT splits (12/4/4 months); the minute sets are the same months at 4 rows per hour.
_ETT_BORDERS = {"etth": (8640, 11520, 14400), "ettm": (8640 * 4, 11520 * 4, 14400 * 4)}
KINDS = ("etth", "ettm", "custom")


def benchmark_name(dataset: str | Path) -> str | None:
    """The canonical benchmark name of a name (any case) or of a ``.csv``/``.parquet`` path named
    like one (``.../ETTh1.csv`` -> ``ETTh1``, ``weather.parquet`` -> ``Weather``); None otherwise.

    The one dataset-name resolver: data lookup, presets and benchmark suites all match here.
    """
    text = str(dataset).strip()
    stem = Path(text).stem if text.lower().endswith((".csv", ".parquet")) else text
    return next((key for key in BENCHMARKS if key.lower() == stem.lower()), None)


def get_benchmark(name: str, *, required: bool = True) -> BenchmarkSpec | None:
    """The spec of a benchmark name (case-insensitive). Unknown: DataError, or None if not ``required``."""
    key = None if str(name).lower().endswith((".csv", ".parquet")) else benchmark_name(name)
    if key is not None:
        return BENCHMARKS[key]
    if required:
        raise DataError(f"unknown benchmark {name!r}: use one of {', '.join(BENCHMARKS)} or a file path")
    return None


def benchmark_for_file(path: str | Path) -> BenchmarkSpec | None:
    """A file named like a benchmark file (``ETTh1.csv``) gets that benchmark's borders."""
    base = Path(path).name
    return next((s for s in BENCHMARKS.values() if s.filename == base), None)


def split_borders(n_rows: int, lookback: int, kind: str) -> dict[str, tuple[int, int]]:
    """Row ranges ``[a, b)`` of train/val/test; val and test start ``lookback`` rows early (context)."""
    if kind not in KINDS:
        raise DataError(f"unknown border rule {kind!r}: use one of {', '.join(KINDS)}")
    if lookback < 0:
        raise DataError(f"lookback must be >= 0, got {lookback}")
    if kind in _ETT_BORDERS:
        b1, b2, b3 = _ETT_BORDERS[kind]
        if n_rows < b3:
            raise DataError(
                f"the {kind.upper()} borders need {b3} rows but the series has {n_rows}: use the full "
                f"benchmark file, or rename the file so the 70/10/20 rule applies"
            )
        n_train, val_end, test_end = b1, b2, b3
    else:
        n_train, n_test = int(n_rows * 0.7), int(n_rows * 0.2)
        val_end, test_end = n_rows - n_test, n_rows
    borders = {"train": (0, n_train), "val": (n_train - lookback, val_end),
               "test": (val_end - lookback, test_end)}
    if borders["val"][0] < 0:
        raise DataError(
            f"lookback {lookback} is longer than the {n_train}-row training split of a {n_rows}-row "
            f"series: use a lookback below {n_train} or more data"
        )
    return borders
