"""The model registry: every forecasting model registers itself in its own file.

Mirrors the mixer registry (:mod:`tsmix.registry`). A model is one file in
``tsmix.forecasting.models`` (or a plugin file named in ``$TSMIX_PLUGINS``) holding

* a frozen config dataclass: the model's architecture fields *with their defaults* (the one
  place they live); its field names are :class:`ForecasterConfig` field names, so the config is
  built from the flat ForecasterConfig by name, never copied field by field;
* a builder ``build(config, channels) -> nn.Module`` mapping ``(B, L, C) -> (B, H, C)`` (a class
  with that constructor or a function), decorated with :func:`register_model`.

Search space, presets, training defaults and needs travel with the registration, so the CLI
(``--model`` choices), the tuning spaces, the benchmark suites and the presets lookup all pick
a new model up with no other edit.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import sys
import traceback
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from torch import nn

from tsmix.errors import TsmixError
from tsmix.registry import import_modules

SpaceFn = Callable[[Any], dict[str, Any]]  # optuna.Trial -> Forecaster keyword arguments
PresetFn = Callable[[str, int], dict[str, Any]]  # (benchmark name, horizon) -> ForecasterConfig fields
Builder = Callable[[Any, int], nn.Module]  # (model config, input channels) -> (B, L, C) -> (B, H, C)
PLUGINS_ENV = "TSMIX_PLUGINS"  # os.pathsep-separated .py files or module names imported at discovery


@dataclass(frozen=True)
class TrainDefaults:
    """Training settings a model starts from when the ForecasterConfig leaves them None."""

    batch_size: int = 32  # the LTSF scripts' common batch
    lr: float = 1e-3  # peak learning rate
    lr_schedule: str = "type1"  # the LTSF scripts' per-epoch halving
    patience: int = 3  # early stopping patience of the LTSF scripts


@dataclass(frozen=True)
class ModelNeeds:
    """What a model asks of its mixer and its data (asked by callers, never inferred from the name)."""

    causal_mixer: bool = False  # False: the encoder sees the whole window, the mixer must be bidirectional
    # Covariate kinds (hist_exog, futr_exog) of a panel the model takes as extra input variates; the
    # others go through the covariate wrapper's linear paths (see forecasting/covariate_models.py).
    covariates: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModelSpec:
    name: str
    build: Builder
    config: type  # frozen dataclass: architecture fields and their defaults
    space: SpaceFn | None  # Optuna search space, None = the model cannot be tuned
    presets: Mapping[str, PresetFn]  # named hyper-parameter sets ("paper")
    uses_mixer: bool  # False: no token mixer (DLinear); one fit covers every mixer
    needs: ModelNeeds
    training: TrainDefaults
    doc: str = ""

    def defaults(self) -> dict[str, Any]:
        """Training and architecture defaults by ForecasterConfig field name (model config wins)."""
        arch = {f.name: f.default for f in dataclasses.fields(self.config)
                if f.default is not dataclasses.MISSING}
        return {**dataclasses.asdict(self.training), **arch}

    def fill(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The model's defaults for the fields ``values`` (a flat config's) leaves None."""
        return {k: v for k, v in self.defaults().items() if k in values and values[k] is None}

    def make_config(self, values: Mapping[str, Any]) -> Any:
        """The model's config from flat (resolved) config values: every field it shares, by name."""
        kw = {f.name: values[f.name] for f in dataclasses.fields(self.config) if f.name in values}
        if "mixer_options" in kw:
            kw["mixer_options"] = dict(kw["mixer_options"])  # the model never shares the caller's dict
        return self.config(**kw)


_REGISTRY: dict[str, ModelSpec] = {}
_DISCOVERED = False
_FAILED: dict[str, str] = {}  # module -> import error, named when a model is missing


def register_model(
    name: str,
    *,
    config: type,
    space: SpaceFn | None = None,
    presets: Mapping[str, PresetFn] | None = None,
    uses_mixer: bool = True,
    needs: ModelNeeds | None = None,
    training: TrainDefaults | None = None,
) -> Callable[[Builder], Builder]:
    """Decorator: ``@register_model("patchtst", config=PatchTSTConfig, space=fn, presets={...})``."""
    if not (dataclasses.is_dataclass(config) and config.__dataclass_params__.frozen):
        raise TypeError(f"config of model {name!r} must be a frozen dataclass, got {config!r}")
    from tsmix.forecasting.config import field_names

    flat = set(field_names())
    required = [f.name for f in dataclasses.fields(config)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    unknown = [n for n in required if n not in flat]
    if unknown:  # nothing could ever set them from a ForecasterConfig
        raise TypeError(f"config of model {name!r} requires {unknown}, which are not ForecasterConfig fields")

    def deco(build: Builder) -> Builder:
        old = _REGISTRY.get(name)
        # the same builder re-imported (a plugin loaded twice) replaces itself; another one may not
        if old is not None and old.build.__qualname__ != build.__qualname__:
            raise TypeError(f"model name {name!r} is already registered by {old.build}")
        _REGISTRY[name] = ModelSpec(
            name=name, build=build, config=config, space=space,
            presets=MappingProxyType(dict(presets or {})), uses_mixer=uses_mixer,
            needs=needs or ModelNeeds(), training=training or TrainDefaults(),
            doc=(build.__doc__ or "").strip().split("\n")[0],
        )
        return build

    return deco


def unregister_model(name: str) -> None:
    """Remove a model (tests and plugins that clean up after themselves)."""
    _REGISTRY.pop(name, None)


def _discover() -> None:
    """Import every module of ``tsmix.forecasting.models`` once, then the ``$TSMIX_PLUGINS`` files."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    _DISCOVERED = True
    import tsmix.forecasting.models as pkg

    _FAILED.update(import_modules(pkg))
    for item in filter(None, os.environ.get(PLUGINS_ENV, "").split(os.pathsep)):
        try:
            load_plugin(item)
        except TsmixError as exc:  # as for a broken model file: warned, and named when a model is missing
            _FAILED[item] = str(exc)
            warnings.warn(f"model plugin {item} is skipped: {exc}", RuntimeWarning, stacklevel=2)


def load_plugin(item: str | Path) -> None:
    """Import a plugin: a ``.py`` file (by path) or a module name; its decorators register models."""
    text = str(item).strip()
    if not text.endswith(".py"):
        try:
            importlib.import_module(text)
        except ImportError as exc:
            raise TsmixError(f"cannot import plugin module {text!r} (from ${PLUGINS_ENV}): {exc}") from exc
        return
    path = Path(text).expanduser().resolve()
    if not path.is_file():
        raise TsmixError(f"plugin file {text} does not exist; fix ${PLUGINS_ENV}")
    module = f"tsmix_plugin_{path.stem}"
    spec = importlib.util.spec_from_file_location(module, path)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[module] = mod
    try:
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
    except Exception as exc:  # noqa: BLE001 - any error in a plugin file is named, in one line
        sys.modules.pop(module, None)
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        raise TsmixError(f"plugin file {path} failed to import: {detail}") from exc


def available_models() -> list[str]:
    """Names of all registered forecasting models, sorted."""
    _discover()
    return sorted(_REGISTRY)


def model_spec(name: str) -> ModelSpec:
    """The registration record of a model (builder, config, space, presets, needs)."""
    _discover()
    if name not in _REGISTRY:
        broken = "".join(f"; module {m} failed to import ({e})" for m, e in _FAILED.items())
        raise TsmixError(f"model must be one of {', '.join(available_models())}, got {name!r}{broken}")
    return _REGISTRY[name]


def build_model(config: Any, channels: int, marks: int = 0) -> nn.Module:
    """The network for a ForecasterConfig (resolved first) over ``channels`` input variates, plus
    ``marks`` calendar variates after them (``calendar=True``: read, never forecast).

    A ``ProbabilisticModel``: the registered network (its RevIN lifted out) and the config's output
    head; for ``loss="mse"`` it computes what the registered network alone does, bit for bit.
    """
    from tsmix.forecasting.probabilistic import build_with_head

    cfg = config.resolved()
    return build_with_head(model_spec(cfg.model), dataclasses.asdict(cfg), channels, cfg.head(), marks)


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


__all__ = [
    "ModelNeeds", "ModelSpec", "TrainDefaults", "available_models", "build_model", "count_params",
    "load_plugin", "model_spec", "register_model", "unregister_model",
]
