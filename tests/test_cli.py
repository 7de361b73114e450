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


def test_closed_pipe_exits_quietly(monkeypatch):
    class ClosedPipe:  # what stdout is once `| head` has exited
        def write(self, _):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("sys.stdout", ClosedPipe())
    assert main(["mixers", "--json"]) == 141


SPAM_CLI = """
import argparse, sys
import tsmix.cli as cli

def spam(args):
    for _ in range(200_000):  # ~10 MB: far more than a pipe buffer holds
        print("x" * 50)
    return 0

parser = argparse.ArgumentParser(prog="tsmix")
parser.add_subparsers(dest="command").add_parser("spam").set_defaults(func=spam)
cli.build_parser = lambda: parser
sys.exit(cli.main(["spam"]))
"""


def test_closed_pipe_from_a_real_shell_pipe_has_no_traceback(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "spam.py"
    script.write_text(SPAM_CLI)
    proc = subprocess.run(f"'{sys.executable}' '{script}' | head -n 1", shell=True, capture_output=True,
                          text=True, timeout=120)
    assert proc.stdout == "x" * 50 + "\n"
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
