"""Typed option values (tsmix.options) and the registry's one --mixer-option parser."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import pytest

import tsmix
from tsmix.errors import TsmixError
from tsmix.options import check_value, describe, field_hints, parse_assignments, parse_text

W = "option 'x' of thing 't'"


@dataclass(frozen=True)
class Opts:
    flag: bool = True
    count: int = 4
    rate: float = 0.5
    name: str = "a"
    cap: float | None = None
    mode: Literal["key", "head"] = "key"
    sizes: tuple[int, ...] = (1, 2)
    pair: tuple[int, float] = (1, 0.5)
    names: list[str] | None = None


def test_field_hints_resolve_postponed_annotations_in_field_order():
    hints = field_hints(Opts)
    assert list(hints) == ["flag", "count", "rate", "name", "cap", "mode", "sizes", "pair", "names"]
    assert hints["flag"] is bool and hints["cap"] == (float | None)
    with pytest.raises(TypeError, match="dataclass"):
        field_hints(int)


@pytest.mark.parametrize(
    "value,hint,expected",
    [
        (True, bool, True),
        (3, int, 3),
        (3, float, 3.0),  # an int where a float goes: converted, so the dataclass holds a float
        (2.5, float, 2.5),
        ("elu", str, "elu"),
        (None, float | None, None),
        (0.9, float | None, 0.9),
        ("head", Literal["key", "head"], "head"),
        ([1, 2, 3], tuple[int, ...], (1, 2, 3)),  # JSON gives lists: converted to the tuple hint
        ((1, 2), tuple[int, float], (1, 2.0)),
        (["a"], list[str] | None, ["a"]),
        ({"a": 1}, dict[str, float], {"a": 1.0}),
    ],
)
def test_check_value_accepts_and_converts(value, hint, expected):
    out = check_value(value, hint, W)
    assert out == expected and type(out) is type(expected)


@pytest.mark.parametrize(
    "value,hint,shown",
    [
        ("False", bool, "must be bool, got 'False' (str)"),
        (1, bool, "must be bool, got 1 (int)"),
        (True, int, "must be int, got True (bool)"),  # a bool is not a count
        (2.0, int, "must be int, got 2.0 (float)"),
        (True, float, "must be float, got True (bool)"),
        ("0.1", float, "must be float, got '0.1' (str)"),
        (3, str, "must be str"),
        ("x", float | None, "must be float or None, got 'x' (str)"),
        ("rows", Literal["key", "head"], "must be one of 'key', 'head'"),
        (1, Literal[True], "must be one of True"),  # 1 == True, but it is not the literal
        ([1, "a"], tuple[int, ...], "must be tuple[int, ...]"),
        ((1, 2, 3), tuple[int, float], "must be tuple"),
        ("ab", list[str], "must be list"),
    ],
)
def test_check_value_refuses_with_the_option_type_and_value(value, hint, shown):
    with pytest.raises(TsmixError, match="^" + re.escape(f"{W} {shown}")):
        check_value(value, hint, W)


@pytest.mark.parametrize(
    "text,hint,expected",
    [
        ("true", bool, True), ("False", bool, False), ("1", bool, True), ("0", bool, False),
        ("YES", bool, True), ("no", bool, False),
        ("7", int, 7), ("-3", int, -3),
        ("0.25", float, 0.25), ("3", float, 3.0), ("1e-3", float, 1e-3),
        ("elu", str, "elu"), ("", str, ""),
        ("none", float | None, None), ("NULL", int | None, None), ("0.9", float | None, 0.9),
        ("head", Literal["key", "head"], "head"), ("2", Literal[1, 2], 2),
        ("1,2,3", tuple[int, ...], (1, 2, 3)), ("[1, 2]", tuple[int, ...], (1, 2)),
        ("(4, 5)", tuple[int, ...], (4, 5)), ("1,", tuple[int, ...], (1,)),
        ("3, 0.5", tuple[int, float], (3, 0.5)), ("a,b", list[str], ["a", "b"]),
        ('{"a": 2}', dict[str, float], {"a": 2.0}),
    ],
)
def test_parse_text(text, hint, expected):
    out = parse_text(text, hint, W)
    assert out == expected and type(out) is type(expected)


@pytest.mark.parametrize(
    "text,hint,shown",
    [
        ("abc", float, "must be float, got 'abc'"),
        ("2.5", int, "must be int, got '2.5'"),
        ("maybe", bool, "must be bool, got 'maybe'"),
        ("none", float, "must be float, got 'none'"),  # None only where the hint allows it
        ("rows", Literal["key", "head"], "must be one of 'key', 'head', got 'rows'"),
        ("1,x", tuple[int, ...], "got '1,x'"),
        ("1,2,3", tuple[int, float], "got '1,2,3'"),
        ("[1,", tuple[int, ...], "got"),
        ('["a"]', tuple[int, ...], "must be tuple"),
    ],
)
def test_parse_text_errors_name_the_type_and_the_text(text, hint, shown):
    with pytest.raises(TsmixError, match=re.escape(shown)):
        parse_text(text, hint, W)


def test_parse_assignments():
    hints = field_hints(Opts)
    got = parse_assignments(["flag=false", "count=8", "cap=none", "sizes=3,4", "name=x=y"], hints, "t")
    assert got == {"flag": False, "count": 8, "cap": None, "sizes": (3, 4), "name": "x=y"}
    assert parse_assignments([], hints, "t") == {}
    with pytest.raises(TsmixError, match="t has no option 'nope'; valid keys: flag, count, rate"):
        parse_assignments(["nope=1"], hints, "t")
    with pytest.raises(TsmixError, match="option 'flag' of t is not KEY=VALUE; valid keys: flag"):
        parse_assignments(["flag"], hints, "t")
    with pytest.raises(TsmixError, match="not KEY=VALUE"):
        parse_assignments(["=1"], hints, "t")
    with pytest.raises(TsmixError, match="option 'count' of t is given twice"):
        parse_assignments(["count=1", "count=2"], hints, "t")
    with pytest.raises(TsmixError, match="option 'rate' of t must be float, got 'fast'"):
        parse_assignments(["rate=fast"], hints, "t")


def test_describe():
    assert describe(float | None) == "float or None"
    assert describe(tuple[int, ...]) == "tuple[int, ...]"
    assert describe(Literal["a", "b"]) == "one of 'a', 'b'"


# ----------------------------------------------------------------------------- registry


def test_build_mixer_refuses_a_mistyped_option():
    shown = "option 'bias' of mixer 'softmax' must be bool, got 'False' (str)"
    with pytest.raises(TsmixError, match=f"^{re.escape(shown)}$"):
        tsmix.build_mixer("softmax", dim=16, heads=4, bias="False")
    with pytest.raises(TsmixError, match="option 'steps' of mixer 'nrgpt' must be int, got 2.0"):
        tsmix.build_mixer("nrgpt", dim=16, heads=4, steps=2.0)


def test_mixer_options_convert_ints_for_floats_and_keep_range_checks():
    opts = tsmix.mixer_options("fem-sm", beta_init=2)
    assert opts.beta_init == 2.0 and type(opts.beta_init) is float
    with pytest.raises(TsmixError, match="bad options for mixer 'fem-sm': beta_init must be"):
        tsmix.mixer_options("fem-sm", beta_init=0)


def test_parse_mixer_options_is_typed_and_checked():
    got = tsmix.parse_mixer_options("nrgpt", ["steps=3", "beta_init=none", "learn_beta=no", "step=1"])
    assert got == {"steps": 3, "beta_init": None, "learn_beta": False, "step": 1.0}
    m = tsmix.build_mixer("nrgpt", 16, heads=2, **got)
    assert m.options.steps == 3 and m.options.learn_beta is False
    assert tsmix.parse_mixer_options("gated-g1", ["gate_init=0.9"]) == {"gate_init": 0.9}
    with pytest.raises(TsmixError, match="mixer 'softmax' has no option 'heads'; valid keys: bias, dropout"):
        tsmix.parse_mixer_options("softmax", ["heads=4"])
    with pytest.raises(TsmixError, match="bad options for mixer 'nrgpt': steps must be an int >= 1"):
        tsmix.parse_mixer_options("nrgpt", ["steps=0"])  # range checks now, not at build time
    with pytest.raises(TsmixError, match="unknown mixer 'nope'"):
        tsmix.parse_mixer_options("nope", ["a=1"])


@pytest.mark.parametrize("name", tsmix.available_mixers())
def test_every_mixer_default_round_trips_through_text(name):
    """Each option's default, written as text, parses back to itself: every option has a text form."""
    spec = tsmix.mixer_spec(name)
    defaults = spec.options()
    items = []
    for key in field_hints(spec.options):
        value = getattr(defaults, key)
        items.append(f"{key}={'none' if value is None else value}")
    parsed = tsmix.parse_mixer_options(name, items)
    assert spec.options(**parsed) == defaults
