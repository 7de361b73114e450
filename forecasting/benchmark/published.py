"""Published reference numbers (shipped as ``published.csv`` beside this file).

Each row: reference, dataset, horizon ("avg" for horizon-averaged tables), lookback, mse, mae,
protocol, source, caveat. The caveats matter:

- PatchTST and DLinear tables come from the official scripts, whose test loader dropped its
  last partial batch (``drop_last=True``). Those numbers are comparable with our
  ``mse_paper`` column, not with the fair ``mse`` (every window).
- The FEM paper's time-series table is known here only through the project's notes: MSE
  averaged over horizons, setup not stated; its baselines differ from the original papers'.

Which of our rows a reference sits beside is decided by :data:`COUNTERPARTS` (model, mixer,
lookback); a mixer added later has no published counterpart until one is listed here.
"""

from __future__ import annotations

import csv
from functools import lru_cache
from importlib import resources
from typing import Any

# (model, mixer, lookback) of our runs -> the published reference that used the same recipe.
COUNTERPARTS: dict[tuple[str, str, int], str] = {
    ("patchtst", "softmax", 336): "PatchTST/42",
    ("patchtst", "softmax", 512): "PatchTST/64",
    ("dlinear", "-", 336): "DLinear",
    ("itransformer", "softmax", 96): "iTransformer",
}
# References drawn beside every table of a dataset (when present for it).
TABLE_REFERENCES = ("PatchTST/42", "PatchTST/64", "DLinear", "iTransformer", "FEM-SM")


@lru_cache(maxsize=1)
def _load() -> tuple[dict[str, Any], ...]:
    text = resources.files(__package__).joinpath("published.csv").read_text()
    out = []
    for r in csv.DictReader(text.splitlines()):
        out.append({
            "reference": r["reference"],
            "dataset": r["dataset"],
            "horizon": r["horizon"] if r["horizon"] == "avg" else int(r["horizon"]),
            "lookback": int(r["lookback"]) if r["lookback"] else None,
            "mse": float(r["mse"]) if r["mse"] else None,
            "mae": float(r["mae"]) if r["mae"] else None,
            "protocol": r["protocol"],
            "source": r["source"],
            "caveat": r["caveat"],
        })
    return tuple(out)


def published(dataset: str | None = None, reference: str | None = None) -> list[dict[str, Any]]:
    """Published rows, optionally filtered by dataset and/or reference name."""
    return [dict(r) for r in _load()
            if (dataset is None or r["dataset"].lower() == dataset.lower())
            and (reference is None or r["reference"] == reference)]


def lookup(reference: str, dataset: str, horizon: int | str) -> dict[str, Any] | None:
    """The published row of ``reference`` on (dataset, horizon), or None."""
    for r in _load():
        same = r["dataset"].lower() == dataset.lower() and r["horizon"] == horizon
        if r["reference"] == reference and same:
            return dict(r)
    return None


def counterpart(model: str, mixer: str, lookback: int) -> str | None:
    """The published reference our (model, mixer, lookback) reproduces, if any."""
    return COUNTERPARTS.get((model, mixer, int(lookback)))


def average(reference: str, dataset: str, horizons: tuple[int, ...] = (96, 192, 336, 720),
            metric: str = "mse") -> float | None:
    """Mean of a reference over ``horizons`` (or its published "avg" row when only that exists)."""
    vals = [lookup(reference, dataset, h) for h in horizons]
    if all(v is not None and v[metric] is not None for v in vals):
        return sum(v[metric] for v in vals) / len(vals)  # type: ignore[index]
    if tuple(sorted(horizons)) != (96, 192, 336, 720):
        return None  # a horizon-averaged table only stands for the standard four horizons
    avg = lookup(reference, dataset, "avg")
    return avg[metric] if avg is not None else None
