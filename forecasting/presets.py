"""Named hyper-parameter presets, looked up in the model registry.

A preset is named data registered with its model (``@register_model(..., presets={"paper":
fn})``, ``fn(benchmark_name, horizon) -> dict`` of ForecasterConfig fields); the caller's
explicit arguments are applied on top. The mixer is never part of a preset. The dataset is
resolved by :func:`tsmix.datasets.specs.benchmark_name` (a name in any case or a file path).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from tsmix.datasets.specs import BENCHMARKS, benchmark_name
from tsmix.errors import TsmixError
from tsmix.forecasting.models.patchtst import FIRST_EPOCH_LR_SCALE as PATCHTST_FIRST_EPOCH_LR_SCALE
from tsmix.forecasting.registry import available_models, model_spec

DATASETS = tuple(BENCHMARKS)


def preset_names() -> list[str]:
    """Every preset name some registered model offers, sorted."""
    return sorted({p for m in available_models() for p in model_spec(m).presets})


def canonical_dataset(dataset: str | Path) -> str:
    """Benchmark name for a name or a file path (``.../ETTh1.csv`` -> ``ETTh1``), any case."""
    name = benchmark_name(dataset)
    if name is None:
        raise TsmixError(
            f"no paper preset for dataset {str(dataset)!r}; presets exist for {', '.join(DATASETS)} "
            "(or drop --preset and set the hyper-parameters yourself)"
        )
    return name


def preset_params(preset: str, model: str, dataset: str | Path, horizon: int) -> dict[str, Any]:
    """The ``preset`` hyper-parameters of ``model`` on ``dataset`` at ``horizon`` (config fields)."""
    if preset not in preset_names():
        raise TsmixError(f"unknown preset {preset!r}; available: {', '.join(preset_names())}")
    fns = model_spec(model).presets
    if preset not in fns:
        having = [m for m in available_models() if preset in model_spec(m).presets]
        raise TsmixError(f"no {preset} preset for model {model!r}; presets exist for {' and '.join(having)}")
    name = canonical_dataset(dataset)
    try:
        return fns[preset](name, horizon)
    except KeyError:
        raise TsmixError(
            f"no {preset} preset of model {model!r} for dataset {name}; set the hyper-parameters yourself"
        ) from None


def paper_preset(model: str, dataset: str | Path, horizon: int) -> dict[str, Any]:
    """The official hyper-parameters of ``model`` on ``dataset`` at ``horizon`` (config fields)."""
    return preset_params("paper", model, dataset, horizon)


class _Presets(Mapping[str, Callable[[str, str | Path, int], dict[str, Any]]]):
    """Read-only view ``{preset name: fn(model, dataset, horizon)}`` over the registry."""

    def __getitem__(self, name: str) -> Callable[[str, str | Path, int], dict[str, Any]]:
        if name not in preset_names():
            raise KeyError(name)
        return partial(preset_params, name)

    def __iter__(self) -> Iterator[str]:
        return iter(preset_names())

    def __len__(self) -> int:
        return len(preset_names())


PRESETS: Mapping[str, Callable[[str, str | Path, int], dict[str, Any]]] = _Presets()

__all__ = ["DATASETS", "PATCHTST_FIRST_EPOCH_LR_SCALE", "PRESETS", "canonical_dataset", "paper_preset",
           "preset_names", "preset_params"]
