"""Result rows on disk: one CSV per (suite, dataset[, shard]), written atomically, one row per run.

Layout under a results directory::

    DIR/<suite>/rows/<dataset>.csv            (or <dataset>.<shard>.csv, e.g. one shard per host)

Every finished run is stored at once by rewriting its CSV to a temporary file in the same
folder and ``os.replace``-ing it over the old one, under an exclusive file lock (``filelock``)
on the folder's ``.rows.tsmix-lock``, which the kernel releases if its holder dies. A run
killed at any moment therefore leaves either the old or the new file, never half a row, and
two processes on one machine never lose each other's rows. Rows from other machines arrive
as other shard files (or merged CSVs); readers deduplicate by key, keeping the most recently
finished row.
"""

from __future__ import annotations

import contextlib
import csv
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tsmix.atomic import atomic_path
from tsmix.errors import TsmixError

# Column order of the CSV files. The first seven form the key of a row.
KEY_COLUMNS = ("suite", "dataset", "horizon", "lookback", "model", "mixer", "seed")
COLUMNS = KEY_COLUMNS + (
    "protocol",  # evaluation protocol of mse/mae ("fair", or "fair/first-N-rows" for slices)
    "mse", "mae",  # test set, every window, normalized scale
    "mse_paper", "mae_paper",  # same model, test loader dropping its last batch (published tables)
    "val_mse",  # best validation MSE (the selection criterion)
    "epochs",  # epochs actually trained (early stopping may cut)
    "train_seconds",  # wall time of training (the trainer's clock; inflated by other jobs on the machine)
    "cpu_seconds",  # process CPU time of fit() (training + its evaluations): robust to machine load
    "params",  # trainable parameters
    "test_windows",  # windows scored under the fair protocol
    # intervals on the fair test windows (empty for a model without any: no head intervals or calibration)
    "loss",  # the head's training loss (mse, mae, quantile, normal, studentt)
    "interval_method",  # where the intervals come from (split-conformal (scaled), quantile+conformal, ...)
    "crps", "pinball",  # CRPS (its approximation depends on the head) and mean pinball, scaled data
    "coverage_80", "coverage_95", "width_80", "width_95",  # empirical coverage and mean width per level
    "device", "torch", "threads", "host", "commit",
    "config_hash",  # hash of the recipe (RunSpec.recipe): a changed grid marks old rows stale
    "config",  # the Forecaster config as JSON, for tracing a row back to its run
    "finished_at",  # ISO time the row was written
)
_INT = {"horizon", "lookback", "seed", "epochs", "params", "test_windows", "threads"}
_FLOAT = {"mse", "mae", "mse_paper", "mae_paper", "val_mse", "train_seconds", "cpu_seconds", "crps",
          "pinball", "coverage_80", "coverage_95", "width_80", "width_95"}
LOCK_NAME = ".rows.tsmix-lock"  # beside the rows; readers glob *.csv only
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def row_key(row: dict[str, Any]) -> tuple:
    """The identity of a run: (suite, dataset, horizon, lookback, model, mixer, seed)."""
    return tuple(_coerce(c, row[c]) for c in KEY_COLUMNS)


def _coerce(col: str, value: Any) -> Any:
    if value is None or value == "":
        return None
    if col in _INT:
        return int(float(value))
    if col in _FLOAT:
        return float(value)
    return str(value)


def _parse(raw: dict[str, str]) -> dict[str, Any]:
    return {c: _coerce(c, raw.get(c)) for c in COLUMNS} | {
        k: v for k, v in raw.items() if k not in COLUMNS and k is not None
    }


def _format(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)  # full precision: rows are data, tables round later
    return str(value)


def read_csv(path: Path) -> list[dict[str, Any]]:
    """Rows of one CSV file (missing file: no rows). A malformed file is an error, not skipped."""
    if not path.exists():
        return []
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in KEY_COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise TsmixError(f"{path} is not a benchmark result file (no column(s) {', '.join(missing)}); "
                             f"move it out of the results folder")
        return [_parse(r) for r in reader]


def append_csv(path: str | Path, fields: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> None:
    """Append ``rows`` (only ``fields``, in that order) to the CSV at ``path``, its header first when
    the file is new or empty; flushed and fsynced before returning. The resumable log of the
    benchmark scripts: each call is one finished unit of work, so a killed run loses at most the
    unit in progress.

    Writers of one file take its lock (``<path>.tsmix-lock``). A file whose header is a prefix of
    ``fields`` (a script that gained columns) is first rewritten atomically with the new header,
    its old rows empty there; any other header is an error, never a misaligned row."""
    from filelock import FileLock

    path, fields = Path(path), list(fields)
    with FileLock(f"{path}.tsmix-lock"):
        header = _header(path)
        if header is not None and header != fields:
            if header != fields[: len(header)]:
                raise TsmixError(
                    f"{path} has the columns {', '.join(header)}; this script writes "
                    f"{', '.join(fields)}: give it another output file, or move this one away"
                )
            with open(path, newline="") as fh:
                old = list(csv.DictReader(fh))
            with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
                w = csv.DictWriter(fh, fieldnames=fields)
                w.writeheader()
                w.writerows({k: r.get(k, "") for k in fields} for r in old)
        with open(path, "a", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=fields)
            if header is None:
                w.writeheader()
            w.writerows({k: r.get(k) for k in fields} for r in rows)
            fh.flush()
            os.fsync(fh.fileno())


def _header(path: Path) -> list[str] | None:
    """The CSV header of ``path``; None when there is no file or it is empty."""
    if not path.is_file() or path.stat().st_size == 0:
        return None
    with open(path, newline="") as fh:
        return next(csv.reader(fh), None)


def csv_keys(path: str | Path, columns: Sequence[str]) -> set[tuple[str, ...]]:
    """The ``columns`` of every row of the CSV at ``path`` as string tuples (empty when there is no
    file): what a resumable benchmark script has finished."""
    path = Path(path)
    if not path.is_file():
        return set()
    with open(path, newline="") as fh:
        return {tuple(str(r[c]) for c in columns) for r in csv.DictReader(fh)}


def _write_atomic(path: Path, rows: list[dict[str, Any]]) -> None:
    """Write ``rows`` to ``path`` through a synced temporary sibling and a rename."""
    extra = sorted({k for r in rows for k in r} - set(COLUMNS))
    fields = list(COLUMNS) + extra
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: _format(r.get(k)) for k in fields})


class ResultStore:
    """Append/read result rows of the suites under one results directory."""

    def __init__(self, root: str | Path, shard: str | None = None) -> None:
        self.root = Path(root)
        self.shard = _SAFE.sub("_", shard) if shard else None  # e.g. a host name

    def folder(self, suite: str) -> Path:
        return self.root / suite / "rows"

    def path(self, suite: str, dataset: str) -> Path:
        stem = _SAFE.sub("_", dataset)
        return self.folder(suite) / (f"{stem}.{self.shard}.csv" if self.shard else f"{stem}.csv")

    @contextlib.contextmanager
    def _locked(self, path: Path) -> Iterator[None]:
        """Exclusive lock on the rows folder (its lock file matches ``*.tsmix-lock`` in .gitignore)."""
        from filelock import FileLock

        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(path.parent / LOCK_NAME):
            yield

    def put(self, row: dict[str, Any], replace: bool = False) -> bool:
        """Store one finished run. Returns False (and writes nothing) when its key is already
        in this file and ``replace`` is False, so a duplicate run never adds a second row."""
        missing = [c for c in KEY_COLUMNS if row.get(c) in (None, "")]
        if missing:
            raise TsmixError(f"result row lacks key column(s) {', '.join(missing)}")
        path = self.path(str(row["suite"]), str(row["dataset"]))
        key = row_key(row)
        with self._locked(path):
            rows = read_csv(path)
            same = [i for i, r in enumerate(rows) if row_key(r) == key]
            if same and not replace:
                return False
            rows = [r for r in rows if row_key(r) != key] + [row]
            _write_atomic(path, rows)
        return True

    def rows(self, suite: str | None = None) -> list[dict[str, Any]]:
        """Every row of ``suite`` (all suites when None) from every shard, deduplicated by key
        (the most recently finished row wins)."""
        if suite:
            suites = [suite]
        else:
            suites = sorted(p.name for p in self.root.iterdir() if p.is_dir()) if self.root.exists() else []
        found: list[dict[str, Any]] = []
        for s in suites:
            folder = self.folder(s)
            if folder.exists():
                for path in sorted(folder.glob("*.csv")):
                    found.extend(read_csv(path))
        return merge_rows(found)

    def finished(self, suite: str) -> dict[tuple, dict[str, Any]]:
        """Key -> row of the finished runs of ``suite`` (what resume skips)."""
        return {row_key(r): r for r in self.rows(suite)}


def merge_rows(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Deduplicate rows by key (latest ``finished_at`` wins); keeps input order otherwise."""
    out: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        k = row_key(r)
        if k not in out or str(r.get("finished_at") or "") >= str(out[k].get("finished_at") or ""):
            out[k] = r
    return list(out.values())
