"""What a study searches: the built-in spaces (``tsmix.tuning.spaces``) adjusted by the user.

* ``fixed`` (``--set KEY=VALUE``): a fixed name leaves the space. Wherever a space would
  call ``trial.suggest_*(KEY, ...)`` it gets the fixed value back and no distribution is
  registered, so the sampler never searches it and the trial trains with that value.
* ``overrides`` (``--space space.yaml|.json``): Optuna distributions by name. A name the
  built-in space asks for is sampled from the file's distribution instead; any other name
  must be a Forecaster argument and is sampled in addition.
* ``fn`` (Python API): a ``space(trial) -> dict`` callable replacing the built-in model and
  mixer spaces (fixed names and overrides still apply to the trial it receives).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from tsmix.errors import TsmixError
from tsmix.tuning import spaces

SpaceFn = Callable[[Any], dict[str, Any]]  # trial -> Forecaster keyword arguments


class SpaceTrial:
    """An ``optuna.Trial`` seen through a :class:`SearchSpace`: fixed names answer their value
    without registering a distribution; overridden names use the user's distribution."""

    def __init__(self, trial: Any, space: SearchSpace) -> None:
        self._trial, self._space = trial, space
        self.asked: list[str] = []  # every name the space asked for, in order

    def __getattr__(self, name: str) -> Any:  # number, report, should_prune, user attrs, ...
        return getattr(self._trial, name)

    @property
    def held(self) -> frozenset[str]:
        """The names the study holds fixed (``tsmix.forecasting.spaces.held`` reads them)."""
        return frozenset(self._space.fixed)

    def _answer(self, name: str, ask: Callable[[], Any]) -> Any:
        self.asked.append(name)
        if name in self._space.fixed:
            return self._space.fixed[name]
        if name in self._space.overrides:
            return suggest(self._trial, name, self._space.overrides[name])
        return ask()

    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None,
                      log: bool = False) -> float:
        return self._answer(name, lambda: self._trial.suggest_float(name, low, high, step=step, log=log))

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1, log: bool = False) -> int:
        return self._answer(name, lambda: self._trial.suggest_int(name, low, high, step=step, log=log))

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        return self._answer(name, lambda: self._trial.suggest_categorical(name, choices))


def suggest(trial: Any, name: str, dist: BaseDistribution) -> Any:
    """Sample ``name`` from ``dist`` through the trial's public ``suggest_*`` methods."""
    if isinstance(dist, FloatDistribution):
        return trial.suggest_float(name, dist.low, dist.high, step=dist.step, log=dist.log)
    if isinstance(dist, IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, step=dist.step, log=dist.log)
    return trial.suggest_categorical(name, list(dist.choices))


@dataclass(frozen=True)
class SearchSpace:
    model: str  # the model whose built-in space is searched (unless ``fn`` replaces it)
    mixers: tuple[str, ...]  # mixers to choose from (ignored by models without a mixer)
    fixed: Mapping[str, Any] = field(default_factory=dict)  # --set: names out of the space, their values
    overrides: Mapping[str, BaseDistribution] = field(default_factory=dict)  # --space file entries
    fn: SpaceFn | None = None  # a user space replacing the built-in one

    def suggest(self, trial: Any) -> dict[str, Any]:
        """The Forecaster keyword arguments of one trial (fixed values included: what trains)."""
        return self._sample(trial)[0]

    def _sample(self, trial: Any) -> tuple[dict[str, Any], list[str]]:
        t = SpaceTrial(trial, self)
        params = dict(self.fn(t)) if self.fn is not None else spaces.suggest(t, self.model, self.mixers)
        for name, dist in self.overrides.items():
            if name not in t.asked:  # not part of the built-in space: a Forecaster argument of its own
                params[name] = suggest(trial, name, dist)
        return {**params, **self.fixed}, t.asked

    def replay(self, params: Mapping[str, Any], number: int) -> dict[str, Any]:
        """The Forecaster keyword arguments of a finished trial (its ``params`` replayed)."""
        return self.suggest(optuna.trial.FixedTrial(dict(params), number))

    def _walk(self) -> tuple[dict[str, BaseDistribution], set[str]]:
        """Sample every mixer branch once: (all distributions, every name the spaces asked for)."""
        found: dict[str, BaseDistribution] = {}
        asked: set[str] = set()
        multi = (spaces.model_space(self.model).uses_mixer and len(self.mixers) > 1
                 and "mixer" not in self.fixed)
        for i, mixer in enumerate(self.mixers if multi else self.mixers[:1]):
            trial = _scratch_trial(i)
            if multi:
                trial = _Pin(trial, "mixer", mixer, CategoricalDistribution(list(self.mixers)))
            asked.update(self._sample(trial)[1])
            found.update({k: v for k, v in trial.distributions.items() if k not in found})
        return found, asked

    def check(self) -> None:
        """Overrides no space asks for must be Forecaster arguments (else a typo in --space)."""
        from tsmix.forecasting.config import field_names

        asked = self._walk()[1]
        unknown = sorted(set(self.overrides) - asked - set(field_names()))
        if unknown:
            raise TsmixError(
                f"search space name(s) {', '.join(unknown)} are neither in the {self.model} space "
                f"({', '.join(sorted(asked))}) nor Forecaster arguments; fix the --space file"
            )

    def distributions(self) -> dict[str, BaseDistribution]:
        """Every distribution the study may sample (each mixer's branch included), fixed names left out."""
        return self._walk()[0]

    def describe(self) -> dict[str, Any]:
        """JSON-ready: the effective space (``--space`` format), the fixed values, a custom fn's name."""
        out: dict[str, Any] = {"space": {k: to_json(v) for k, v in self.distributions().items()},
                               "fixed": dict(self.fixed)}
        if self.fn is not None:
            out["fn"] = f"{getattr(self.fn, '__module__', '?')}.{getattr(self.fn, '__qualname__', self.fn)}"
        return json.loads(json.dumps(out, default=str))


class _Pin:
    """A trial whose ``name`` categorical answers ``value`` while still registering ``dist``
    (used to walk every mixer branch of a space when describing it)."""

    def __init__(self, trial: Any, name: str, value: Any, dist: CategoricalDistribution) -> None:
        self._trial, self._name, self._value, self._dist = trial, name, value, dist

    def __getattr__(self, name: str) -> Any:
        return getattr(self._trial, name)

    @property
    def distributions(self) -> dict[str, BaseDistribution]:
        return {self._name: self._dist, **self._trial.distributions}

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        if name == self._name:
            return self._value
        return self._trial.suggest_categorical(name, choices)


# ------------------------------------------------------------------ the --space file format
_KEYS = {"float": {"low", "high", "log", "step"}, "int": {"low", "high", "log", "step"},
         "categorical": {"choices"}}


def from_json(name: str, spec: Any) -> BaseDistribution:
    """``{"type": "float", "low": 1e-4, "high": 1e-2, "log": true}`` (or int / categorical)."""
    if not isinstance(spec, Mapping) or spec.get("type") not in _KEYS:
        raise TsmixError(f"search space entry {name!r} needs a type of float, int or categorical, "
                         f"got {spec!r}")
    kind = spec["type"]
    extra = sorted(set(spec) - _KEYS[kind] - {"type"})
    if extra:
        raise TsmixError(f"search space entry {name!r} ({kind}) has unknown key(s) {', '.join(extra)}; "
                         f"allowed: {', '.join(sorted(_KEYS[kind]))}")
    try:
        if kind == "categorical":
            choices = spec.get("choices")
            if not isinstance(choices, list) or not choices:
                raise ValueError("choices must be a non-empty list")
            return CategoricalDistribution(choices)
        if "low" not in spec or "high" not in spec:
            raise ValueError("low and high are required")
        cls = FloatDistribution if kind == "float" else IntDistribution
        step = spec.get("step", None if kind == "float" else 1)
        return cls(spec["low"], spec["high"], log=bool(spec.get("log", False)), step=step)
    except (ValueError, TypeError) as exc:
        raise TsmixError(f"search space entry {name!r} is invalid: {exc}") from None


def to_json(dist: BaseDistribution) -> dict[str, Any]:
    """The inverse of :func:`from_json`."""
    if isinstance(dist, CategoricalDistribution):
        return {"type": "categorical", "choices": list(dist.choices)}
    kind = "float" if isinstance(dist, FloatDistribution) else "int"
    out: dict[str, Any] = {"type": kind, "low": dist.low, "high": dist.high, "log": dist.log}
    if dist.step is not None and not (kind == "int" and dist.step == 1):
        out["step"] = dist.step
    return out


def load_space_file(path: str | Path) -> dict[str, BaseDistribution]:
    """Read a ``--space`` file (.json, .yaml or .yml) into Optuna distributions."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise TsmixError(f"search space file {p} does not exist; pass a .json or .yaml file to --space")
    suffix = p.suffix.lower()
    if suffix not in (".json", ".yaml", ".yml"):
        raise TsmixError(f"search space file {p} must end in .json, .yaml or .yml")
    import yaml

    try:
        data = json.loads(p.read_text()) if suffix == ".json" else yaml.safe_load(p.read_text())
    except (ValueError, yaml.YAMLError) as exc:
        raise TsmixError(f"cannot read the search space file {p}: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, Mapping) or not data:
        raise TsmixError(f"search space file {p} must hold a mapping of name -> distribution")
    return {str(k): from_json(str(k), v) for k, v in data.items()}


def _scratch_trial(seed: int) -> optuna.Trial:
    """A trial of a throwaway in-memory study, without Optuna's INFO line announcing that study
    (``run_study`` builds a few to read the space; the user never asked for them)."""
    log = logging.getLogger("optuna.storages._in_memory")
    level = log.level
    log.setLevel(logging.WARNING)
    try:
        return optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed)).ask()
    finally:
        log.setLevel(level)
