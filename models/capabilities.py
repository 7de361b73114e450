"""What a mixer can do and how its ``--mixer-option`` flags parse, asked of the mixer registry.

Callers in tsmix.models ask here (or the registry directly) and never compare mixer names:
``capabilities`` is :func:`tsmix.registry.mixer_capabilities`, ``parse_options`` is
:func:`tsmix.registry.parse_mixer_options`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from tsmix import registry
from tsmix.errors import TsmixError
from tsmix.registry import Capabilities


def capabilities(name: str, options: dict[str, Any] | None = None) -> Capabilities:
    """The registry's capabilities of mixer ``name`` built with ``options`` (position awareness may
    depend on them, e.g. fem-sm's conditioning or rotary embeddings); an unknown name is a TsmixError."""
    return registry.mixer_capabilities(name, **(options or {}))


def routes_by_position(name: str, options: dict[str, Any] | None = None) -> bool:
    """True when the mixer can move a token between fixed positions with no position embedding.

    The registry's ``position_indexed``: the mixing weights are a learned function of the positions
    themselves (the YB brick-wall and spectral maps). Narrower than ``position_aware`` (the map
    depends on token order at all): a decayed scan (gla, fem-gla/ssm/aft) or fem-sm's time-decay
    conditioning orders the tokens but reaches a given absolute position only as fast as its decay
    allows, so routing tasks (transport) still give those mixers learned positions.
    """
    return capabilities(name, options).position_indexed


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
    """``["steps=4", "eta=free"]`` -> typed options of mixer ``name`` (the registry's flag parser)."""
    return registry.parse_mixer_options(name, list(items))


def option_names(name: str) -> frozenset[str]:
    """The option keys mixer ``name`` accepts (its options dataclass's fields)."""
    return frozenset(f.name for f in dataclasses.fields(registry.mixer_spec(name).options))


def accepted(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """The subset of ``options`` that mixer ``name`` accepts (shared defaults applied where they fit)."""
    keys = option_names(name)
    return {k: v for k, v in options.items() if k in keys}
