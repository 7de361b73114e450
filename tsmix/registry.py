"""The mixer registry: every token mixer registers itself here, in its own file.

A mixer is an ``nn.Module`` mapping ``(B, N, D) -> (B, N, D)`` with a plain ``reference(x)``
beside its fast ``forward`` (the contract, :class:`Mixer`, is checked at registration). Its
constructor has the signature ``cls(dim, heads, causal, options)`` where ``options`` is the
frozen dataclass registered with it; option values are type-checked against its hints
(:mod:`tsmix.options`). What a mixer can do (causal, bidirectional, position-aware,
position-indexed, streaming) is declared at registration and asked through :func:`mixer_capabilities`.
Callers only ever go through :func:`build_mixer`, so encoders and pipelines never know which
mixer they hold.

Extras a mixer may expose (callers test with ``hasattr``, never by name):
``diagnostics() -> dict[str, float]``, ``energy_trace(x)``, ``flow(x, s)``.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from tsmix.errors import TsmixError
from tsmix.options import check_value, field_hints, parse_assignments

SpaceFn = Callable[[Any], dict[str, Any]]  # optuna.Trial -> mixer options


@dataclass(frozen=True)
class NoOptions:
    """Options of a mixer that has none."""


class Mixer(nn.Module):
    """Base of the token mixers (optional: any ``nn.Module`` with this contract registers).

    ``cls(dim, heads, causal, options)``; ``forward(x (B, N, D)) -> (B, N, D)`` is the fast
    path and ``reference(x)`` the plain formula it must equal (the float64 contract tests
    compare them). Streaming mixers add ``step(x_t, state) -> (y_t, state)`` and
    ``recurrent(x)``.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, D) -> (B, N, D)
        raise NotImplementedError(f"{type(self).__name__} does not define forward")

    def reference(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, D) -> (B, N, D)
        raise NotImplementedError(f"{type(self).__name__} does not define reference")


@dataclass(frozen=True)
class Capabilities:
    """What a mixer can do, declared at registration; callers ask, never infer from the name."""

    causal: bool = True  # build_mixer(causal=True) gives a map with no look-ahead
    bidirectional: bool = True  # build_mixer(causal=False) exists
    # The bidirectional map depends on token order itself (not permutation-equivariant), so a
    # model needs no positional embedding; the value at the default options (see mixer_capabilities)
    position_aware: bool = False
    streaming: bool = False  # causal mixers with step(x_t, state) and recurrent(x)
    # Position-aware because the mixing weights are a learned function of the token positions
    # themselves, not of the content (YB brick-wall/spectral): such a map can move a token between
    # fixed positions with no position embedding, which a decayed scan (also position-aware) cannot.
    position_indexed: bool = False

    def labels(self) -> list[str]:
        """``["causal", "bidirectional", "position-aware", "streaming"]``, those that hold.

        The modes a user picks among; ``position_indexed`` refines position-aware and is not listed.
        """
        return [n.replace("_", "-") for n in _LABELLED if getattr(self, n)]


_LABELLED = ("causal", "bidirectional", "position_aware", "streaming")


PositionRule = Callable[[Any], bool]  # mixer options -> position_aware under those options


@dataclass(frozen=True)
class MixerSpec:
    name: str
    cls: type[nn.Module]
    options: type  # frozen dataclass of the mixer's options
    capabilities: Capabilities  # at the default options
    space: SpaceFn | None  # Optuna search space over the options, None = nothing to tune
    doc: str
    position_rule: PositionRule | None = None  # position_aware depends on the options
    # position_indexed as declared; it holds under options only where position_aware does too
    indexed: bool = False

    @property
    def supports_causal(self) -> bool:  # False: build_mixer(causal=True) raises
        return self.capabilities.causal

    @property
    def supports_bidirectional(self) -> bool:  # False: the mixer only exists in causal form
        return self.capabilities.bidirectional

    @property
    def causal_modes(self) -> tuple[bool, ...]:
        """The ``causal=`` values :func:`tsmix.build_mixer` accepts, bidirectional first."""
        caps = self.capabilities
        return tuple(c for c, ok in ((False, caps.bidirectional), (True, caps.causal)) if ok)


_REGISTRY: dict[str, MixerSpec] = {}
_DISCOVERED = False
_FAILED: dict[str, str] = {}  # module name -> formatted import error, for failed_imports()


def register_mixer(
    name: str,
    options: type | None = None,
    *,
    supports_causal: bool = True,
    supports_bidirectional: bool = True,
    position_aware: bool | PositionRule = False,
    streaming: bool = False,
    position_indexed: bool = False,
    space: SpaceFn | None = None,
) -> Callable[[type[nn.Module]], type[nn.Module]]:
    """Class decorator: ``@register_mixer("softmax", options=SoftmaxOptions)``.

    ``position_aware`` is a bool or a rule ``options -> bool`` (e.g. on only with RoPE);
    ``streaming`` promises ``step``/``recurrent`` in causal mode; ``position_indexed`` says the mixing
    weights depend on token positions, not content (it implies position-aware). The class is checked here
    (:func:`check_mixer_class`), so a broken contract fails at import, not in a training run.
    """
    opts = options if options is not None else NoOptions
    if not (dataclasses.is_dataclass(opts) and opts.__dataclass_params__.frozen):
        raise TypeError(f"options of mixer {name!r} must be a frozen dataclass, got {opts!r}")
    if not (supports_causal or supports_bidirectional):
        raise TypeError(f"mixer {name!r} must support causal or bidirectional use (or both)")
    if streaming and not supports_causal:
        raise TypeError(f"mixer {name!r}: streaming means a causal step(); it needs supports_causal=True")
    if position_indexed and position_aware is False:
        raise TypeError(f"mixer {name!r}: position_indexed weights depend on positions; it needs "
                        f"position_aware=True (or a rule)")
    rule = position_aware if callable(position_aware) else None
    if rule is not None:
        position_aware = bool(rule(opts()))

    def deco(cls: type[nn.Module]) -> type[nn.Module]:
        if name in _REGISTRY and _REGISTRY[name].cls is not cls:
            raise TypeError(f"mixer name {name!r} is already registered by {_REGISTRY[name].cls}")
        check_mixer_class(name, cls, streaming)
        caps = Capabilities(supports_causal, supports_bidirectional, bool(position_aware), streaming,
                            position_indexed and bool(position_aware))
        _REGISTRY[name] = MixerSpec(
            name=name,
            cls=cls,
            options=opts,
            capabilities=caps,
            space=space,
            doc=(cls.__doc__ or "").strip().split("\n")[0],
            position_rule=rule,
            indexed=position_indexed,
        )
        return cls

    return deco


def _defines(cls: type, method: str) -> bool:
    """``cls`` has its own ``method`` (not nn.Module's placeholder forward nor Mixer's stubs)."""
    fn = getattr(cls, method, None)
    return callable(fn) and fn not in (getattr(nn.Module, method, None), getattr(Mixer, method, None))


def check_mixer_class(name: str, cls: type, streaming: bool = False) -> None:
    """Raise ``TypeError`` unless ``cls`` meets the mixer contract (see :class:`Mixer`)."""
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise TypeError(f"mixer {name!r} must be an nn.Module subclass, got {cls!r}")
    needed = ["forward", "reference"] + (["step", "recurrent"] if streaming else [])
    missing = [m for m in needed if not _defines(cls, m)]
    if missing:
        raise TypeError(
            f"mixer {name!r} ({cls.__qualname__}) does not define {', '.join(missing)}; every mixer "
            f"needs forward(x) and a plain reference(x) the contract tests compare it with"
            + ("; streaming=True also needs step(x_t, state) and recurrent(x)" if streaming else "")
        )
    try:
        inspect.signature(cls).bind(8, 1, False, None)
    except TypeError as exc:
        raise TypeError(
            f"mixer {name!r} ({cls.__qualname__}) must be constructible as cls(dim, heads, causal, "
            f"options): {exc}"
        ) from None


def unregister_mixer(name: str) -> None:
    """Remove a registered mixer (tests and plugins that register temporary mixers)."""
    _REGISTRY.pop(name, None)


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


def mixer_capabilities(name: str, **options: Any) -> Capabilities:
    """What mixer ``name`` can do; with ``options``, ``position_aware`` as built with them."""
    spec = _spec(name)
    if spec.position_rule is None or not options:
        return spec.capabilities
    aware = bool(spec.position_rule(mixer_options(name, **options)))
    indexed = aware and spec.indexed  # options that turn awareness off turn this off too
    return dataclasses.replace(spec.capabilities, position_aware=aware, position_indexed=indexed)


def mixer_options(name: str, **options: Any) -> Any:
    """Check ``options`` (names and types) against the mixer's dataclass; the frozen instance.

    A value of the wrong type (``bias="False"``) is a :class:`TsmixError` naming the option,
    its type and the value; ints are accepted for floats.
    """
    spec = _spec(name)
    hints = field_hints(spec.options)
    unknown = sorted(set(options) - set(hints))
    if unknown:
        valid = ", ".join(sorted(hints)) or "(none)"
        raise TsmixError(
            f"mixer {name!r} has no option(s) {', '.join(unknown)}; valid options: {valid}"
        )
    typed = {k: check_value(v, hints[k], f"option {k!r} of mixer {name!r}") for k, v in options.items()}
    try:
        return spec.options(**typed)
    except (TypeError, ValueError) as exc:
        raise TsmixError(f"bad options for mixer {name!r}: {exc}") from exc


def parse_mixer_options(name: str, items: Sequence[str]) -> dict[str, Any]:
    """``["bias=false", "dropout=0.1"]`` -> typed options of mixer ``name``, fully checked.

    The one parser behind every ``--mixer-option KEY=VALUE`` flag; the result is what
    :func:`build_mixer` takes as ``**options``.
    """
    spec = _spec(name)
    typed = parse_assignments(items, field_hints(spec.options), f"mixer {name!r}")
    mixer_options(name, **typed)  # the dataclass's own range checks, now rather than at build time
    return typed


def _mode_error(name: str, causal: bool, caps: Capabilities) -> TsmixError:
    only, fix = ("bidirectional", "use causal=False or pick a causal mixer") if causal else (
        "causal", "pass causal=True or pick a bidirectional mixer")
    return TsmixError(
        f"mixer {name!r} supports only {only} use (capabilities: {', '.join(caps.labels())}); {fix}"
    )


def build_mixer(
    name: str, dim: int, heads: int = 4, causal: bool = False, **options: Any
) -> nn.Module:
    """Build the registered mixer ``name`` for width ``dim``: the only way mixers are made.

    Raises :class:`TsmixError` for an unknown name, unknown or mistyped options, or a
    ``causal`` setting the mixer cannot honour (it never silently leaks the future).
    """
    spec = _spec(name)
    if not isinstance(dim, int) or isinstance(dim, bool) or dim <= 0:
        raise TsmixError(f"mixer dim must be a positive int, got {dim!r}")
    if not isinstance(heads, int) or isinstance(heads, bool) or heads <= 0:
        raise TsmixError(f"mixer heads must be a positive int, got {heads!r}")
    if not isinstance(causal, bool):
        raise TsmixError(f"mixer causal must be a bool, got {causal!r} ({type(causal).__name__})")
    caps = spec.capabilities
    if (causal and not caps.causal) or (not causal and not caps.bidirectional):
        raise _mode_error(name, causal, caps)
    opts = mixer_options(name, **options)
    return spec.cls(dim, heads, causal, opts)
