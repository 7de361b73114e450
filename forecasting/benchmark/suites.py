"""Benchmark grids: which (dataset, horizon, lookback, model, mixer, seed) runs a suite holds.

A suite expands into :class:`RunSpec` items. Each one is a complete recipe for one Forecaster
run (hyper-parameters included), so a stored result row can always be traced back to what
produced it (``config_hash``). Mixers and models are discovered through their registries
(``tsmix.available_mixers()``, ``tsmix.forecasting.available_models()``) at expansion time: one
registered later joins the grid by re-running the suite (resume). A model the suite does not
configure runs at the suite's default lookback, from the suite's default preset if it has one.

Suites
- ``smoke``: tiny slices of ETTh1 (first rows only, so the 70/10/20 borders of custom data
  apply and the protocol column says so), one epoch, tiny widths, one seed. CI runs it.
- ``quick``: ETTh1 + ETTh2, every horizon, DLinear (paper recipe, L=336), the patch encoder
  (L=336, paper widths, fewer epochs) and the variate encoder (L=96) for every mixer, 3 seeds.
- ``paper``: the official presets on all five sets, every horizon, 3 seeds (long; resumable).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tsmix.datasets.specs import BENCHMARKS, get_benchmark
from tsmix.errors import TsmixError
from tsmix.forecasting.registry import available_models, model_spec

ALL_DATASETS = tuple(BENCHMARKS)
ALL_HORIZONS = (96, 192, 336, 720)
DEFAULT_SEEDS = (2021, 2022, 2023)  # 2021 is the seed of the official PatchTST scripts
NO_MIXER = "-"  # the mixer column of models without a token mixer (DLinear)

# Hyper-parameters that change a result row; everything else (progress bars, device,
# thread count) is left out of the hash so the same recipe on another machine resumes.
_NOT_IN_HASH = {"progress", "device", "threads"}


@dataclass(frozen=True)
class RunSpec:
    """One Forecaster run of a suite: the key of its result row plus the full recipe."""

    suite: str  # suite name, part of the key: quick-suite rows never count as paper rows
    dataset: str  # benchmark name ("ETTh1", ...)
    horizon: int  # forecast length H
    lookback: int  # context length L
    model: str  # registered model name (tsmix.forecasting.available_models())
    mixer: str  # registered mixer name, NO_MIXER for a model without one (DLinear)
    seed: int  # training seed
    preset: str | None = None  # "paper": start from Forecaster.from_preset, then apply overrides
    overrides: tuple[tuple[str, Any], ...] = ()  # sorted (name, value) hyper-parameters
    rows: int | None = None  # use only the first `rows` rows of the file (smoke slices)
    protocol: str = "fair"  # evaluation protocol named in the row; slices say so

    @property
    def key(self) -> tuple:
        return (self.suite, self.dataset, self.horizon, self.lookback, self.model, self.mixer, self.seed)

    @property
    def label(self) -> str:
        mixer = "" if self.mixer == NO_MIXER else f"/{self.mixer}"
        return f"{self.dataset} H={self.horizon} L={self.lookback} {self.model}{mixer} seed={self.seed}"

    def kwargs(self) -> dict[str, Any]:
        """Forecaster keyword arguments (beside the preset, when there is one)."""
        kw: dict[str, Any] = dict(self.overrides)
        kw.update(lookback=self.lookback, horizon=self.horizon, seed=self.seed)
        if self.mixer != NO_MIXER:
            kw["mixer"] = self.mixer
        return kw

    def recipe(self) -> dict[str, Any]:
        """What determines the result: hashed into the row so stale rows are recognisable."""
        kw = {k: v for k, v in self.kwargs().items() if k not in _NOT_IN_HASH and k != "seed"}
        return {"model": self.model, "dataset": self.dataset, "preset": self.preset,
                "rows": self.rows, "protocol": self.protocol, **kw}

    @property
    def config_hash(self) -> str:
        blob = json.dumps(self.recipe(), sort_keys=True, default=str)
        return hashlib.sha1(blob.encode()).hexdigest()[:10]


@dataclass(frozen=True)
class Suite:
    """A named grid over every registered model. ``settings(model)`` returns one model's overrides."""

    name: str
    description: str
    datasets: tuple[str, ...]
    horizons: tuple[int, ...]
    seeds: tuple[int, ...]
    lookbacks: tuple[tuple[str, int], ...]  # model -> L; also the models' run and table order
    default_lookback: int  # L of a registered model the suite does not name
    presets: tuple[tuple[str, str], ...] = ()  # model -> preset the overrides apply on ("paper")
    default_preset: str | None = None  # preset of an unnamed model, when that model registers it
    rows: int | None = None  # slice length (smoke); None = the whole file with standard borders
    overrides: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = field(default=())  # model -> kw

    @property
    def models(self) -> tuple[str, ...]:
        """Registered models: those the suite names (in its order), then the others, sorted."""
        named = [m for m, _ in self.lookbacks if m in available_models()]
        return (*named, *(m for m in available_models() if m not in named))

    def lookback(self, model: str) -> int:
        return dict(self.lookbacks).get(model, self.default_lookback)

    def settings(self, model: str) -> dict[str, Any]:
        return dict(dict(self.overrides).get(model, ()))

    def preset(self, model: str) -> str | None:
        named = dict(self.presets)
        if model in named:
            return named[model]
        return self.default_preset if self.default_preset in model_spec(model).presets else None


def _kw(**kw: Any) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(kw.items()))


# Smoke: seconds per run on one core. Widths are as small as the encoders allow; one epoch.
SMOKE = Suite(
    name="smoke",
    description="CI check: first 1200 rows of ETTh1 (custom 70/10/20 borders), H=24, 1 epoch, tiny widths",
    datasets=("ETTh1",),
    horizons=(24,),
    seeds=(2021,),
    lookbacks=(("dlinear", 96), ("patchtst", 96), ("itransformer", 96), ("rlinear", 96)),
    default_lookback=96,
    rows=1200,
    overrides=(
        ("dlinear", _kw(epochs=1, batch_size=32, lr=0.005, patience=3)),
        ("patchtst", _kw(epochs=1, batch_size=64, lr=1e-3, d_model=16, heads=2, layers=1, d_ff=32,
                         dropout=0.1, patch_len=16, stride=8, patience=3)),
        ("itransformer", _kw(epochs=1, batch_size=64, lr=1e-3, d_model=16, heads=2, layers=1, d_ff=32,
                             dropout=0.1, patience=3)),
        ("rlinear", _kw(epochs=1, batch_size=32, lr=0.005, patience=3)),
    ),
)

# Quick: sized by timing single runs on the shared 2-core machine (numbers in
# benchmarks/results/quick/NOTES.md). One PatchTST epoch over all 8209 ETTh1 training windows
# is ~55 s of one core (softmax; op-heavy mixers 2-7x more), so the patch encoder gets ONE
# epoch of a one-cycle schedule at 10x the paper lr (paper widths: d_model 16, 4 heads, d_ff
# 128, 3 layers, BatchNorm); the variate encoder (~9 s per epoch) gets two one-cycle epochs at
# the default widths; DLinear keeps its full paper recipe (10 epochs, patience 3; ~25 s). The
# grid still holds (1 + 2 x mixers) x 4 horizons x 2 sets x 3 seeds runs, so with many mixers
# it is hours, not minutes, on a shared CPU; the order of `expand` makes a stopped run useful.
QUICK = Suite(
    name="quick",
    description=("ETTh1+ETTh2, H 96-720, 3 seeds; DLinear paper recipe (L=336, 10 epochs, patience 3); "
                 "patch encoder L=336 at the paper's ETTh widths, 1 one-cycle epoch at lr 1e-3; "
                 "variate encoder L=96 at its default widths (d_model 128, 8 heads, 2 layers), "
                 "2 one-cycle epochs at lr 5e-4"),
    datasets=("ETTh1", "ETTh2"),
    horizons=ALL_HORIZONS,
    seeds=DEFAULT_SEEDS,
    lookbacks=(("dlinear", 336), ("patchtst", 336), ("itransformer", 96), ("rlinear", 336)),
    default_lookback=96,
    presets=(("dlinear", "paper"), ("patchtst", "paper")),
    overrides=(
        ("patchtst", _kw(epochs=1, lr=1e-3, lr_schedule="onecycle", pct_start=0.3, first_epoch_lr_scale=1.0)),
        ("itransformer", _kw(epochs=2, batch_size=32, lr=5e-4, lr_schedule="onecycle", pct_start=0.3)),
    ),
)

PAPER = Suite(
    name="paper",
    description="official presets (Forecaster.from_preset('paper', ...)) on all five sets, every horizon, "
                "3 seeds",
    datasets=ALL_DATASETS,
    horizons=ALL_HORIZONS,
    seeds=DEFAULT_SEEDS,
    lookbacks=(("dlinear", 336), ("patchtst", 336), ("itransformer", 96), ("rlinear", 336)),
    default_lookback=96,
    default_preset="paper",
)

SUITES: dict[str, Suite] = {s.name: s for s in (SMOKE, QUICK, PAPER)}

# Every registered model in the order the tables list them (the suites' own order first).
ALL_MODELS = SMOKE.models


def itransformer_paper(dataset: str) -> dict[str, Any]:
    """The iTransformer paper preset (registered with the model) without its lookback and horizon."""
    from tsmix.forecasting.presets import preset_params

    params = preset_params("paper", "itransformer", dataset, ALL_HORIZONS[0])
    return {k: v for k, v in params.items() if k not in ("lookback", "horizon")}


def get_suite(name: str) -> Suite:
    if name not in SUITES:
        raise TsmixError(f"unknown benchmark suite {name!r}; choose one of {', '.join(SUITES)} "
                         f"(or use `tsmix benchmark-speed` for the speed suite)")
    return SUITES[name]


def _check_subset(kind: str, given: Iterable[Any], valid: Sequence[Any]) -> None:
    bad = [g for g in given if g not in valid]
    if bad:
        raise TsmixError(f"unknown {kind} {', '.join(map(str, bad))}; valid: {', '.join(map(str, valid))}")


def _canonical_dataset(name: str) -> str:
    spec = get_benchmark(name, required=False)
    if spec is None:
        raise TsmixError(f"unknown dataset {name!r}; the benchmark knows {', '.join(ALL_DATASETS)}")
    return spec.name


def expand(
    suite: Suite,
    *,
    datasets: Sequence[str] | None = None,
    horizons: Sequence[int] | None = None,
    models: Sequence[str] | None = None,
    mixers: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
) -> list[RunSpec]:
    """All runs of ``suite`` with CLI overrides; ``mixers`` defaults to every registered mixer and
    each given list replaces the suite's own.

    Order: seed, dataset, then the mixer-free models, then per mixer (softmax first) each
    encoder, horizons innermost. A long run stopped early thus has whole table rows (every
    horizon) of the first seed, in both encoders, for the mixers it reached.
    """
    from tsmix import available_mixers

    registered = available_mixers()
    ds = tuple(_canonical_dataset(d) for d in (datasets or suite.datasets))
    hs = tuple(int(h) for h in (horizons or suite.horizons))
    if any(h <= 0 for h in hs):
        raise TsmixError(f"horizons must be positive, got {hs}")
    ms = tuple(models or suite.models)
    _check_subset("model", ms, available_models())
    mx = tuple(mixers or registered)
    _check_subset("mixer", mx, registered)
    sd = tuple(int(s) for s in (seeds or suite.seeds))

    mx = tuple(sorted(mx, key=lambda m: (m != "softmax", m)))
    runs: list[RunSpec] = []
    cells = [(m, NO_MIXER) for m in ms if not model_spec(m).uses_mixer]
    cells += [(m, x) for x in mx for m in ms if model_spec(m).uses_mixer]
    for seed in sd:
        for dataset in ds:
            for model, mixer in cells:
                for horizon in hs:
                    runs.append(_spec(suite, dataset, horizon, model, mixer, seed))
    return runs


def _spec(suite: Suite, dataset: str, horizon: int, model: str, mixer: str, seed: int) -> RunSpec:
    overrides = suite.settings(model)
    preset = suite.preset(model)
    protocol = "fair" if suite.rows is None else f"fair/first-{suite.rows}-rows"
    return RunSpec(
        suite=suite.name, dataset=dataset, horizon=horizon, lookback=suite.lookback(model),
        model=model, mixer=mixer, seed=seed, preset=preset, overrides=tuple(sorted(overrides.items())),
        rows=suite.rows, protocol=protocol,
    )
