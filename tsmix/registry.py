"""The mixer registry: every token mixer registers itself here, in its own file.

A mixer is an ``nn.Module`` mapping ``(B, N, D) -> (B, N, D)``. Its constructor has the
signature ``cls(dim, heads, causal, options)`` where ``options`` is the frozen dataclass
registered with it. Callers only ever go through :func:`build_mixer`, so encoders and
pipelines never know which mixer they hold.

Extras a mixer may expose (callers test with ``hasattr``, never by name):
``diagnostics() -> dict[str, float]``, ``energy_trace(x)``, ``flow(x, s)``.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from tsmix.errors import TsmixError

SpaceFn = Callable[[Any], dict[str, Any]]  # optuna.Trial -> mixer options


@dataclass(frozen=True)
class NoOptions:
    """Options of a mixer that has none."""


@dataclass(frozen=True)
class MixerSpec:
    name: str
    cls: type[nn.Module]
    options: type  # frozen dataclass of the mixer's options
    supports_causal: bool  # False: build_mixer(causal=True) raises instead of leaking the future
    supports_bidirectional: bool  # False: the mixer only exists in causal form
    space: SpaceFn | None  # Optuna search space over the options, None = nothing to tune
    doc: str


_REGISTRY: dict[str, MixerSpec] = {}
_DISCOVERED = False
_FAILED: dict[str, str] = {}  # module name -> formatted import error, for failed_imports()


def register_mixer(
    name: str,
    options: type | None = None,
    *,
    supports_causal: bool = True,
    supports_bidirectional: bool = True,
    space: SpaceFn | None = None,
) -> Callable[[type[nn.Module]], type[nn.Module]]:
    """Class decorator: ``@register_mixer("softmax", options=SoftmaxOptions)``."""
    opts = options if options is not None else NoOptions
    if not (dataclasses.is_dataclass(opts) and opts.__dataclass_params__.frozen):
        raise TypeError(f"options of mixer {name!r} must be a frozen dataclass, got {opts!r}")

    def deco(cls: type[nn.Module]) -> type[nn.Module]:
        if name in _REGISTRY and _REGISTRY[name].cls is not cls:
            raise TypeError(f"mixer name {name!r} is already registered by {_REGISTRY[name].cls}")
        _REGISTRY[name] = MixerSpec(
            name=name,
            cls=cls,
            options=opts,
            supports_causal=supports_causal,
            supports_bidirectional=supports_bidirectional,
            space=space,
            doc=(cls.__doc__ or "").strip().split("\n")[0],
        )
        return cls

    return deco


def register_space(name: str) -> Callable[[SpaceFn], SpaceFn]:
    """Attach an Optuna search space to an already registered mixer (decorator)."""

    def deco(fn: SpaceFn) -> SpaceFn:
        spec = _spec(name)
        _REGISTRY[name] = dataclasses.replace(spec, space=fn)
        return fn

    return deco


def _discover() -> None:
    """Import every module in ``tsmix.mixers`` once: a new mixer file registers itself."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    _DISCOVERED = True
    import tsmix.mixers as pkg

    _FAILED.update(import_modules(pkg))


def import_modules(package: Any) -> dict[str, str]:
    """Import every public module of ``package``; returns ``{module: error}`` for those that failed.

    One broken mixer file must not take every other mixer down with it: its import error is
    kept (and warned about) and reported when somebody asks for a mixer that is missing.
    """
    failed: dict[str, str] = {}
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_"):
            continue
        module = f"{package.__name__}.{info.name}"
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - any error in a mixer file is reported, not raised
            failed[module] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            warnings.warn(f"mixer module {module} failed to import and is skipped: {failed[module]}",
                          RuntimeWarning, stacklevel=2)
    return failed


def failed_imports() -> dict[str, str]:
    """Mixer modules that failed to import (module -> error); empty when every file loaded."""
    _discover()
    return dict(_FAILED)


def _spec(name: str) -> MixerSpec:
    _discover()
    if name not in _REGISTRY:
        broken = "".join(f"; module {m} failed to import ({e})" for m, e in _FAILED.items())
        raise TsmixError(
            f"unknown mixer {name!r}; available mixers: {', '.join(available_mixers())}{broken}"
        )
    return _REGISTRY[name]


def available_mixers() -> list[str]:
    """Names of all registered mixers, sorted."""
    _discover()
    return sorted(_REGISTRY)


def mixer_spec(name: str) -> MixerSpec:
    """The registration record of a mixer (class, options dataclass, search space)."""
    return _spec(name)


def mixer_options(name: str, **options: Any) -> Any:
    """Validate ``options`` against the mixer's dataclass and return the frozen instance."""
    spec = _spec(name)
    fields = {f.name for f in dataclasses.fields(spec.options)}
    unknown = sorted(set(options) - fields)
    if unknown:
        valid = ", ".join(sorted(fields)) or "(none)"
        raise TsmixError(
            f"mixer {name!r} has no option(s) {', '.join(unknown)}; valid options: {valid}"
        )
    try:
        return spec.options(**options)
    except (TypeError, ValueError) as exc:
        raise TsmixError(f"bad options for mixer {name!r}: {exc}") from exc


def build_mixer(
    name: str, dim: int, heads: int = 4, causal: bool = False, **options: Any
) -> nn.Module:
    """Build the registered mixer ``name`` for width ``dim``: the only way mixers are made.

    Raises :class:`TsmixError` for an unknown name, unknown options, or a ``causal`` setting
    the mixer cannot honour (it never silently leaks the future).
    """
    spec = _spec(name)
    if not isinstance(dim, int) or dim <= 0:
        raise TsmixError(f"mixer dim must be a positive int, got {dim!r}")
    if not isinstance(heads, int) or heads <= 0:
        raise TsmixError(f"mixer heads must be a positive int, got {heads!r}")
    if causal and not spec.supports_causal:
        raise TsmixError(
            f"mixer {name!r} is bidirectional by construction and cannot be causal; "
            f"use causal=False or pick a causal mixer"
        )
    if not causal and not spec.supports_bidirectional:
        raise TsmixError(f"mixer {name!r} only exists in causal form; pass causal=True")
    opts = mixer_options(name, **options)
    return spec.cls(dim, heads, causal, opts)
