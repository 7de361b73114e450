"""The ``tsmix`` command. Thin: it parses flags and calls the package API.

Each concern contributes its sub-commands through an ``add_commands(subparsers)``
function in its own ``cli`` module (listed in ``COMMAND_MODULES``), so this file stays a
dispatcher. User errors (:class:`tsmix.TsmixError`) print one line and exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from tsmix.errors import TsmixError

COMMAND_MODULES = (
    "tsmix.datasets.cli",  # tsmix data
    "tsmix.forecasting.cli",  # tsmix fit / evaluate / predict
    "tsmix.forecasting.backtest_cli",  # tsmix backtest
    "tsmix.forecasting.ensemble_cli",  # tsmix ensemble
    "tsmix.forecasting.benchmark.cli",  # tsmix benchmark
    "tsmix.tuning.cli",  # tsmix tune
    "tsmix.models.cli",  # tsmix mixers / lm / task / vision
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tsmix", description="Time-series forecasting with interchangeable token mixers."
    )
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_commands(sub)
    return parser


def _version() -> str:
    from tsmix import __version__

    return f"tsmix {__version__}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except TsmixError as exc:
        print(f"tsmix {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"tsmix {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _closed_pipe()


def run() -> None:
    """The ``tsmix`` console script (and ``python -m tsmix``): :func:`main` in a process whose freed
    memory glibc keeps for reuse (``tsmix.engine.memory``; ``TSMIX_MALLOC=default`` leaves it)."""
    from tsmix.engine.memory import retain_unless_disabled

    try:
        retain_unless_disabled()
    except TsmixError as exc:
        print(f"tsmix: error: {exc}", file=sys.stderr)
        sys.exit(2)
    sys.exit(main())


def _closed_pipe() -> int:
    """The reader went away (``tsmix mixers --json | head``): exit quietly, as Unix tools do.

    stdout is pointed at /dev/null so the interpreter's final flush cannot raise again.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout may be no real file (tests)
        pass
    return 141  # 128 + SIGPIPE, what a shell reports for a killed pipe writer


if __name__ == "__main__":
    run()
