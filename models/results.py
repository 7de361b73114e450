"""Result rows of the model pipelines: one CSV row per (task, variant, mixer, seed), resumable.

``ResultFile.put`` rewrites the CSV through a temporary sibling and ``os.replace`` under a
``filelock`` lock, so a killed run leaves the old or the new file, never half a row, and two
processes never lose each other's rows. ``done`` is what a re-run skips. ``markdown`` renders
one metric as a mixer x variant table.
"""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from tsmix.atomic import atomic_path
from tsmix.errors import TsmixError
from tsmix.provenance import git_commit

KEY = ("task", "variant", "mixer", "seed")  # a run's identity: a second run of it is skipped


def _key(row: dict[str, Any]) -> tuple[str, ...]:
    return tuple(str(row[k]) for k in KEY)


def provenance() -> dict[str, Any]:
    """Columns every row carries: torch version, threads, commit, finish time."""
    return {"torch": torch.__version__, "threads": torch.get_num_threads(), "commit": git_commit(),
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S")}


class ResultFile:
    """One CSV of result rows (created on the first ``put``)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def rows(self) -> list[dict[str, str]]:
        if not self.path.exists():
            return []
        with open(self.path, newline="") as fh:
            reader = csv.DictReader(fh)
            missing = [k for k in KEY if k not in (reader.fieldnames or ())]
            if missing:
                raise TsmixError(f"{self.path} is not a tsmix result file (no column(s) "
                                 f"{', '.join(missing)}); pass another --out path")
            return list(reader)

    def done(self, task: str, variant: str, mixer: str, seed: int) -> bool:
        key = (task, variant, mixer, str(seed))
        return any(_key(r) == key for r in self.rows())

    def put(self, row: dict[str, Any]) -> None:
        """Add ``row`` (replacing a row with the same key), atomically, under the file's lock."""
        from filelock import FileLock

        missing = [k for k in KEY if row.get(k) in (None, "")]
        if missing:
            raise TsmixError(f"result row lacks key column(s) {', '.join(missing)}")
        row = {k: json.dumps(v) if isinstance(v, (dict, list, tuple)) else v for k, v in row.items()}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.path) + ".tsmix-lock"):
            rows = [r for r in self.rows() if _key(r) != _key(row)] + [row]
            fields = list(dict.fromkeys(k for r in rows for k in r))
            with atomic_path(self.path) as tmp, open(tmp, "w", newline="") as fh:
                writer = csv.DictWriter(fh, fieldnames=fields)
                writer.writeheader()
                writer.writerows(rows)


def markdown(
    rows: Sequence[dict[str, Any]], metric: str, *, percent: bool = True, average: bool = False
) -> str:
    """A mixer x variant table of ``metric`` (mean over seeds, ``n=`` when several), plus the
    average over variants when ``average`` (meaningful only when the variants form one suite)."""
    variants = list(dict.fromkeys(str(r["variant"]) for r in rows))
    mixers = list(dict.fromkeys(str(r["mixer"]) for r in rows))
    cells: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        if r.get(metric) not in (None, ""):
            cells.setdefault((str(r["mixer"]), str(r["variant"])), []).append(float(r[metric]))
    scale = 100.0 if percent else 1.0
    lines = ["| mixer | " + " | ".join(variants) + (" | average |" if average else " |"),
             "|---|" + "---:|" * (len(variants) + average)]
    for m in mixers:
        means = []
        out = []
        for v in variants:
            vals = cells.get((m, v))
            if not vals:
                out.append("–")
                continue
            mean = scale * sum(vals) / len(vals)
            means.append(mean)
            out.append(f"{mean:.1f}" + (f" (n={len(vals)})" if len(vals) > 1 else ""))
        if average:
            out.append(f"{sum(means) / len(means):.1f}" if len(means) == len(variants) else "–")
        lines.append(f"| {m} | " + " | ".join(out) + " |")
    return "\n".join(lines) + "\n"


def metric_table(
    rows: Sequence[dict[str, Any]], metrics: Sequence[str], *, percent: bool = True, digits: int = 1
) -> str:
    """A (mixer, variant) x metric table (mean over seeds, ``digits`` decimals); an empty metric
    shows as "n/a"."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((str(r["mixer"]), str(r["variant"])), []).append(r)
    scale = 100.0 if percent else 1.0
    lines = ["| mixer | variant | " + " | ".join(metrics) + " |", "|---|---|" + "---:|" * len(metrics)]
    for (mixer, variant), rs in groups.items():
        cells = []
        for m in metrics:
            vals = [float(r[m]) for r in rs if r.get(m) not in (None, "")]
            cells.append(f"{scale * sum(vals) / len(vals):.{digits}f}" if vals else "n/a")
        lines.append(f"| {mixer} | {variant} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


