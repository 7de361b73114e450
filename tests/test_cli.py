"""The ``tsmix`` dispatcher: every command module loads, errors are one line, exit 2."""

from __future__ import annotations

import importlib
import json

import pytest

import tsmix
from tsmix.cli import COMMAND_MODULES, build_parser, main


@pytest.mark.parametrize("name", COMMAND_MODULES)
def test_every_command_module_imports_and_registers(name):
    module = importlib.import_module(name)
    assert callable(module.add_commands)


def test_help_lists_the_commands():
    text = build_parser().format_help()
    for cmd in ("data", "fit", "evaluate", "predict", "tune", "benchmark", "mixers"):
        assert cmd in text


def test_mixers_command_lists_registry(capsys):
    assert main(["mixers", "--json"]) == 0
    names = [r["name"] for r in json.loads(capsys.readouterr().out)]
    assert names == tsmix.available_mixers()


def test_no_command_prints_help_and_fails(capsys):
    assert main([]) == 2
    assert "usage" in capsys.readouterr().out
