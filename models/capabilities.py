"""What a mixer can do and how its ``--mixer-option`` flags parse, asked of the registry.

``tsmix.registry.mixer_capabilities`` and ``tsmix.registry.parse_mixer_options`` (the mixer
registry's shared API) answer when they exist; until then the registration record answers
(``supports_causal`` / ``supports_bidirectional``, the options dataclass's type hints). Callers
in tsmix.models ask here and never compare mixer names.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tsmix import registry
from tsmix.errors import TsmixError

# Registrations made before the registry declared position awareness: their token maps depend
# on positions themselves (used only while tsmix.registry.mixer_capabilities is absent).
_POSITION_AWARE_BEFORE_API = frozenset({"yb-brickwall", "yb-spectral"})


@dataclass(frozen=True)
class Capabilities:
    causal: bool  # build_mixer(causal=True) works: no look-ahead
    bidirectional: bool  # build_mixer(causal=False) works
    position_aware: bool  # the token map depends on positions: no position embedding needed


def capabilities(name: str, options: dict[str, Any] | None = None) -> Capabilities:
    """The capabilities of mixer ``name`` built with ``options`` (position awareness may depend on
    them, e.g. rotary embeddings); an unknown name is a TsmixError."""
    ask = getattr(registry, "mixer_capabilities", None)
    if ask is not None:
        caps = ask(name, **(options or {}))
        return Capabilities(bool(caps.causal), bool(caps.bidirectional), bool(caps.position_aware))
    spec = registry.mixer_spec(name)
    return Capabilities(spec.supports_causal, spec.supports_bidirectional, name in _POSITION_AWARE_BEFORE_API)


def require(name: str, *, causal: bool, what: str) -> None:
    """A one-line TsmixError when ``name`` cannot run in the mode ``what`` needs."""
    caps = capabilities(name)
    if causal and not caps.causal:
        able = ", ".join(n for n in registry.available_mixers() if capabilities(n).causal)
        raise TsmixError(f"{what} needs a causal mixer and {name!r} is bidirectional only; pick one of: "
                         f"{able}")
    if not causal and not caps.bidirectional:
        able = ", ".join(n for n in registry.available_mixers() if capabilities(n).bidirectional)
        raise TsmixError(f"{what} needs a bidirectional mixer and {name!r} is causal only; pick one of: "
                         f"{able}")


def parse_options(name: str, items: Sequence[str]) -> dict[str, Any]:
    """``["steps=4", "eta=free"]`` -> typed options of mixer ``name`` (the shared flag parser)."""
    shared = getattr(registry, "parse_mixer_options", None)
    if shared is not None:
        return dict(shared(name, list(items)))
    from tsmix.options import field_hints, parse_assignments

    return parse_assignments(items, field_hints(registry.mixer_spec(name).options), f"mixer {name!r}")


def option_names(name: str) -> frozenset[str]:
    """The option keys mixer ``name`` accepts (its options dataclass's fields)."""
    import dataclasses

    return frozenset(f.name for f in dataclasses.fields(registry.mixer_spec(name).options))


def accepted(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """The subset of ``options`` that mixer ``name`` accepts (shared defaults applied where they fit)."""
    keys = option_names(name)
    return {k: v for k, v in options.items() if k in keys}
