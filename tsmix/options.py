"""Typed option values from dataclass field type hints: one parser for every command line.

A mixer's options, a model's config and every ``KEY=VALUE`` flag are checked against the
type hints of the frozen dataclass that holds them, so ``bias="False"`` (a string, which is
truthy) is refused instead of silently turning the bias on.

    hints = field_hints(SoftmaxOptions)                          # {"bias": bool, "dropout": float}
    parse_assignments(["bias=false"], hints, "mixer 'softmax'")  # {"bias": False}
    check_value("False", bool, "option 'bias' of mixer 'softmax'")  # TsmixError
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Union

from tsmix.errors import TsmixError

TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")
NONE_WORDS = ("none", "null")


def field_hints(cls: type) -> dict[str, Any]:
    """``{field name: resolved type hint}`` of a dataclass, in field order."""
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"field_hints needs a dataclass type, got {cls!r}")
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls)}


def describe(hint: Any) -> str:
    """A short human name of a type hint: ``float or None``, ``one of 'key', 'head'``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return "any value"
    if hint is type(None):
        return "None"
    if _is_union(origin):
        return " or ".join(describe(a) for a in args)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (tuple, list):
        inner = ", ".join("..." if a is Ellipsis else describe(a) for a in args)
        return f"{origin.__name__}[{inner}]" if args else origin.__name__
    if origin is dict:
        return "dict"
    return getattr(hint, "__name__", str(hint))


def check_value(value: Any, hint: Any, what: str) -> Any:
    """``value`` checked against ``hint``; returns it converted (int -> float, list -> tuple).

    ``what`` names the value in the error, e.g. ``"option 'bias' of mixer 'softmax'"``.
    """
    ok, converted = _convert(value, hint)
    if not ok:
        raise TsmixError(f"{what} must be {describe(hint)}, got {value!r} ({type(value).__name__})")
    return converted


def _convert(value: Any, hint: Any) -> tuple[bool, Any]:
    """(matches, converted value); never raises for a mismatch."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True, value
    if hint is type(None) or hint is None:
        return value is None, None
    if _is_union(origin):
        for arm in args:
            ok, out = _convert(value, arm)
            if ok:
                return True, out
        return False, None
    if origin is Literal:
        # type equality as well: True == 1 must not pass as Literal[1]
        return any(value == a and type(value) is type(a) for a in args), value
    if origin in (tuple, list):
        return _convert_sequence(value, origin, args)
    if origin is dict or hint is dict:
        return _convert_dict(value, args)
    if hint is bool:
        return isinstance(value, bool), value
    if hint is int:
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        return ok, int(value) if ok else None
    if hint is float:
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
        return ok, float(value) if ok else None
    if isinstance(hint, type):
        return isinstance(value, hint), value
    return True, value  # an unsupported hint (a TypeVar, a forward string) is not checked


def _convert_sequence(value: Any, origin: type, args: tuple) -> tuple[bool, Any]:
    if not isinstance(value, (tuple, list)):
        return False, None
    ok, out = _each(list(value), origin, args, _convert)
    return ok, origin(out) if ok else None


def _each(items: list, origin: type, args: tuple, convert) -> tuple[bool, list | None]:
    """``convert(item, hint)`` over a sequence's items against ``tuple[X, ...]``, ``tuple[X, Y]``
    or ``list[X]`` (no args: items kept); (False, None) on a wrong length or a failed item."""
    if not args:
        return True, items
    if origin is list or (len(args) == 2 and args[1] is Ellipsis):
        hints = [args[0]] * len(items)
    elif len(args) != len(items):
        return False, None
    else:
        hints = list(args)
    out = []
    for item, hint in zip(items, hints):
        ok, conv = convert(item, hint)
        if not ok:
            return False, None
        out.append(conv)
    return True, out


def _convert_dict(value: Any, args: tuple) -> tuple[bool, Any]:
    if not isinstance(value, Mapping):
        return False, None
    if not args:
        return True, dict(value)
    out = {}
    for k, v in value.items():
        ok_k, ck = _convert(k, args[0])
        ok_v, cv = _convert(v, args[1])
        if not (ok_k and ok_v):
            return False, None
        out[ck] = cv
    return True, out


def _is_union(origin: Any) -> bool:
    return origin is Union or origin is types.UnionType


def parse_text(text: str, hint: Any, what: str) -> Any:
    """A command-line string -> the typed value ``hint`` asks for (then :func:`check_value`'d).

    bool: true/false/1/0/yes/no/on/off (any case); ``X | None``: none/null; tuples and lists as
    JSON (``[1, 2]``) or comma-separated (``1,2``); dicts as JSON.
    """
    ok, value = _parse(text, hint)
    if not ok:
        raise TsmixError(f"{what} must be {describe(hint)}, got {text!r}")
    return check_value(value, hint, what)


def _parse(text: str, hint: Any) -> tuple[bool, Any]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    stripped = text.strip()
    if hint is Any or hint is str:
        return True, text
    if hint is type(None) or hint is None:
        return stripped.lower() in NONE_WORDS, None
    if _is_union(origin):
        if type(None) in args and stripped.lower() in NONE_WORDS:
            return True, None
        for arm in args:
            ok, out = _parse(text, arm)
            if ok and _convert(out, arm)[0]:
                return True, out
        return False, None
    if origin is Literal:
        for a in args:
            ok, out = _parse(text, type(a))
            if ok and out == a and type(out) is type(a):
                return True, a
        return False, None
    if origin in (tuple, list):
        return _parse_sequence(stripped, origin, args)
    if origin is dict or hint is dict:
        return _parse_json(stripped, dict)
    if hint is bool:
        word = stripped.lower()
        if word in TRUE_WORDS or word in FALSE_WORDS:
            return True, word in TRUE_WORDS
        return False, None
    if hint is int or hint is float:
        try:
            return True, hint(stripped)
        except ValueError:
            return False, None
    return False, None  # no text form for other types


def _parse_sequence(text: str, origin: type, args: tuple) -> tuple[bool, Any]:
    if text.startswith("["):
        return _parse_json(text, list)
    parts = [p.strip() for p in text.strip("()").split(",")] if text.strip("()") else []
    if parts and parts[-1] == "":  # "1," is the one-element tuple
        parts.pop()
    return _each(parts, origin, args, _parse)


def _parse_json(text: str, kind: type) -> tuple[bool, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return False, None
    return isinstance(value, kind), value


def parse_assignments(items: Sequence[str], hints: Mapping[str, Any], what: str) -> dict[str, Any]:
    """``["k=v", ...]`` -> ``{k: typed v}`` against ``hints``; ``what`` names the owner.

    A malformed item, an unknown key or a key given twice is a :class:`TsmixError` naming
    the valid keys.
    """
    valid = ", ".join(hints) or "(none)"
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise TsmixError(f"option {item!r} of {what} is not KEY=VALUE; valid keys: {valid}")
        if key not in hints:
            raise TsmixError(f"{what} has no option {key!r}; valid keys: {valid}")
        if key in out:
            raise TsmixError(f"option {key!r} of {what} is given twice; give each key once")
        out[key] = parse_text(text, hints[key], f"option {key!r} of {what}")
    return out
