"""``tsmix mixers``: list the registered token mixers, their modes and options."""

from __future__ import annotations

import argparse
import dataclasses
import json

from tsmix.registry import available_mixers, mixer_spec


def mixer_table() -> list[dict]:
    """One dict per registered mixer: name, causal/bidirectional support, options, summary."""
    rows = []
    for name in available_mixers():
        spec = mixer_spec(name)
        options = {
            f.name: (None if f.default is dataclasses.MISSING else f.default)
            for f in dataclasses.fields(spec.options)
        }
        rows.append(
            {
                "name": name,
                "causal": spec.supports_causal,
                "bidirectional": spec.supports_bidirectional,
                "tunable": spec.space is not None,
                "options": options,
                "doc": spec.doc,
            }
        )
    return rows


def _run(args: argparse.Namespace) -> int:
    rows = mixer_table()
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        modes = "/".join(m for m, ok in (("bidir", r["bidirectional"]), ("causal", r["causal"])) if ok)
        print(f"{r['name']:<{width}}  {modes:<12}  {r['doc']}")
        if r["options"] and args.verbose:
            opts = ", ".join(f"{k}={v!r}" for k, v in r["options"].items())
            print(f"{'':<{width}}  options: {opts}")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    from tsmix.models.lm.cli import add_commands as add_lm
    from tsmix.models.tasks.cli import add_commands as add_task
    from tsmix.models.vision.cli import add_commands as add_vision

    add_lm(sub)  # tsmix lm
    add_task(sub)  # tsmix task NAME
    add_vision(sub)  # tsmix vision
    p = sub.add_parser("mixers", help="list the registered token mixers")
    p.add_argument("--json", action="store_true", help="print one JSON list")
    p.add_argument("-v", "--verbose", action="store_true", help="also list each mixer's options")
    p.set_defaults(func=_run)
