"""Flags and the result writer shared by ``tsmix task`` and ``tsmix vision``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tsmix.atomic import write_text_atomic
from tsmix.models.capabilities import parse_options
from tsmix.models.fit import FitConfig
from tsmix.models.nets import NetConfig
from tsmix.models.results import ResultFile, markdown, metric_table, provenance


def add_common(p: argparse.ArgumentParser, *, mixers: str, steps: int, lr: float, batch: int,
               dim: int = 64, layers: int = 2) -> None:
    m = p.add_argument_group("model")
    m.add_argument("--mixers", default=mixers, help="comma-separated registered mixers")
    m.add_argument("-o", "--mixer-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a mixer option for every mixer listed (repeatable, typed by each mixer's options)")
    m.add_argument("--dim", type=int, default=dim)
    m.add_argument("--heads", type=int, default=4)
    m.add_argument("--layers", type=int, default=layers)
    m.add_argument("--ffn", default="gelu", help="Block FFN: gelu | relu | swiglu | none")
    m.add_argument("--positions", default="auto", help="auto | learned | sincos | none")
    t = p.add_argument_group("training")
    t.add_argument("--steps", type=int, default=steps)
    t.add_argument("--batch-size", type=int, default=batch)
    t.add_argument("--lr", type=float, default=lr)
    t.add_argument("--warmup", type=int, default=20)
    t.add_argument("--weight-decay", type=float, default=0.0)
    t.add_argument("--seeds", default="0", help="comma-separated seeds")
    o = p.add_argument_group("output")
    o.add_argument("--out", default=None, help="CSV of result rows (appended; finished runs are skipped)")
    o.add_argument("--table", default=None, help="write the markdown table of --out here")
    o.add_argument("--threads", type=int, default=None, help="torch CPU threads")


def net_config(args: argparse.Namespace, mixer: str, causal: bool) -> NetConfig:
    return NetConfig(mixer=mixer, mixer_options=parse_options(mixer, args.mixer_option), causal=causal,
                     dim=args.dim, heads=args.heads, layers=args.layers, ffn=args.ffn,
                     positions=args.positions)


def fit_config(args: argparse.Namespace, seed: int) -> FitConfig:
    return FitConfig(steps=args.steps, batch_size=args.batch_size, lr=args.lr, warmup=args.warmup,
                     weight_decay=args.weight_decay, seed=seed)


def seeds(args: argparse.Namespace) -> list[int]:
    return [int(s) for s in str(args.seeds).split(",") if s.strip()]


def mixers(args: argparse.Namespace) -> list[str]:
    return [m.strip() for m in args.mixers.split(",") if m.strip()]


def run_grid(args: argparse.Namespace, task: str, variants: list[str], metric: str | list[str],
             one: Callable[[str, str, int], dict[str, Any]], config: Callable[[str, str, int], dict],
             average: bool = False, percent: bool = True, digits: int = 1) -> int:
    """Run ``one(variant, mixer, seed)`` for the grid, skipping rows already in ``--out``; print the table
    (metrics in percent with ``digits`` decimals; ``percent=False`` for losses)."""
    if args.threads:
        torch.set_num_threads(args.threads)
    names = mixers(args)
    for name in names:  # bad mixers and options fail before any training
        parse_options(name, args.mixer_option)
    store = ResultFile(args.out) if args.out else None
    rows: list[dict[str, Any]] = []
    # runs with mixer options are other rows: the options are part of the mixer label (an ablation)
    suffix = f"[{','.join(args.mixer_option)}]" if args.mixer_option else ""
    for variant in variants:
        for name in names:
            label = name + suffix
            for seed in seeds(args):
                if store is not None and store.done(task, variant, label, seed):
                    print(f"{task} {variant} {label} seed {seed}: done, skipped", flush=True)
                    continue
                result = one(variant, name, seed)
                row = {"task": task, "variant": variant, "mixer": label, "seed": seed, **result,
                       "config": config(variant, name, seed), **provenance()}
                rows.append(row)
                shown = " ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
                                 for k, v in result.items())
                print(f"{task} {variant} {label} seed {seed}: {shown}", flush=True)
                if store is not None:
                    store.put(row)
    table_rows = [r for r in store.rows() if r["task"] == task] if store is not None else rows
    if isinstance(metric, str):
        table = markdown(table_rows, metric, average=average)
    else:
        table = metric_table(table_rows, metric, percent=percent, digits=digits)
    print(table)
    if args.table:
        write_text_atomic(Path(args.table), table)
    return 0
