"""``tsmix task NAME [flags]``: one command group for every benchmark task, one result row per
(task, variant, mixer, seed) in ``--out`` (resumable) and a markdown table.

    tsmix task mad --mixers softmax,fem-sm --tasks in-context-recall,compression --out mad.csv
    tsmix task listops --mixers nrgpt,softmax --mode both
    tsmix task induction --mixers yb-spectral,softmax,linear --test-lengths 64,256,1024
    tsmix task transport | channel-select | curved-boundary   (the synthetic suites)
    tsmix task lm-overfit --mixers nrgpt,gpt-rec-parallel --ffn none --norm none   (Shakespeare gap)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import asdict, replace

import torch

from tsmix.errors import TsmixError
from tsmix.models import common_cli as C
from tsmix.models.capabilities import option_names, parse_options, require


def _mad(p: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    from .mad import MAD_TASKS, run_mad

    C.add_common(p, mixers="softmax,fem-sm", steps=400, lr=3e-3, batch=32)
    p.add_argument("--tasks", default=",".join(MAD_TASKS), help="comma-separated MAD tasks")

    def go(args: argparse.Namespace) -> int:
        tasks = [t for t in args.tasks.split(",") if t]
        bad = [t for t in tasks if t not in MAD_TASKS]
        if bad:
            raise TsmixError(f"unknown MAD task(s) {', '.join(bad)}; choose from {', '.join(MAD_TASKS)}")
        for m in C.mixers(args):
            require(m, causal=True, what="MAD (next-token prediction)")
        return C.run_grid(args, "mad", tasks, "accuracy",
                          lambda t, m, s: run_mad(t, C.net_config(args, m, True), C.fit_config(args, s), s),
                          lambda t, m, s: {"settings": MAD_TASKS[t].scaled,
                                           "fit": asdict(C.fit_config(args, s))}, average=True)
    return go


def _listops(p: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    from .listops import ListOpsConfig, run_listops

    C.add_common(p, mixers="nrgpt,gpt-rec-parallel,softmax", steps=600, lr=3e-3, batch=32)
    p.add_argument("--mode", default="both", choices=("causal", "bidirectional", "both"))
    d = ListOpsConfig()
    for name in ("max_depth", "max_args", "min_length", "max_length", "modulus", "num_train"):
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(d, name))
    p.add_argument("--ops", default=",".join(d.ops), help="comma-separated from MAX,MIN,MED,SM")

    def go(args: argparse.Namespace) -> int:
        task = ListOpsConfig(ops=tuple(args.ops.split(",")), max_depth=args.max_depth, max_args=args.max_args,
                             min_length=args.min_length, max_length=args.max_length, modulus=args.modulus,
                             num_train=args.num_train)
        modes = ["causal", "bidirectional"] if args.mode == "both" else [args.mode]
        for m in C.mixers(args):
            for mode in modes:
                require(m, causal=mode == "causal", what=f"ListOps ({mode})")
        return C.run_grid(args, "listops", modes, "accuracy",
                          lambda v, m, s: run_listops(task, C.net_config(args, m, v == "causal"),
                                                      C.fit_config(args, s), s),
                          lambda v, m, s: {"task": asdict(task), "fit": asdict(C.fit_config(args, s))})
    return go


def _induction(p: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    from .induction import InductionConfig, run_induction

    C.add_common(p, mixers="yb-spectral,softmax,linear", steps=600, lr=3e-3, batch=32)
    p.add_argument("--kind", default="induction", help="induction | recall")
    p.add_argument("--vocab", type=int, default=16)
    p.add_argument("--train-length", type=int, default=64)
    p.add_argument("--test-lengths", default="64,256,1024")
    p.add_argument("--causal", action="store_true", help="causal mixers (default: bidirectional)")
    p.set_defaults(positions="sincos")  # learned positions cannot run past the training length

    def go(args: argparse.Namespace) -> int:
        lengths = tuple(int(x) for x in args.test_lengths.split(","))
        task = InductionConfig(kind=args.kind, vocab=args.vocab, train_length=args.train_length,
                               test_lengths=lengths)
        for m in C.mixers(args):
            require(m, causal=args.causal, what=f"{args.kind} task")
        variant = f"{task.kind}-train{task.train_length}" + ("-causal" if args.causal else "")
        return C.run_grid(args, "induction", [variant], [f"acc_L{n}" for n in lengths],
                          lambda v, m, s: run_induction(task, C.net_config(args, m, args.causal),
                                                        C.fit_config(args, s), s),
                          lambda v, m, s: {"task": asdict(task), "fit": asdict(C.fit_config(args, s)),
                                           "positions": args.positions})
    return go


def _transport(p: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    from tsmix.models.synthetic.transport import TransportConfig, train

    C.add_common(p, mixers="yb-spectral,softmax", steps=600, lr=1e-2, batch=64, dim=16, layers=1)
    p.add_argument("--length", type=int, default=16)

    def go(args: argparse.Namespace) -> int:
        def cfg(m: str, s: int) -> TransportConfig:
            return TransportConfig(mixer=m, length=args.length, dim=args.dim, depth=args.layers,
                                   heads=args.heads,
                                   mixer_options=parse_options(m, args.mixer_option), steps=args.steps,
                                   batch=args.batch_size, lr=args.lr, seed=s)
        return C.run_grid(args, "transport", [f"N{args.length}"], "acc",
                          lambda v, m, s: train(cfg(m, s))[1], lambda v, m, s: asdict(cfg(m, s)))
    return go


def _channel_select(p: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    from tsmix.models.synthetic.channel_select import ChannelSelectConfig, run

    C.add_common(p, mixers="fem-sm,softmax", steps=3000, lr=3e-3, batch=128, layers=1)
    p.add_argument("--length", type=int, default=16)
    p.add_argument("--channels", type=int, default=4)

    def go(args: argparse.Namespace) -> int:
        def cfg(m: str, s: int) -> ChannelSelectConfig:
            opts = parse_options(m, args.mixer_option)
            if "cond" in option_names(m):
                opts.setdefault("cond", False)  # C off: the parameter count of softmax (the study's setting)
            return replace(ChannelSelectConfig(), mixer=m, mixer_options=tuple(sorted(opts.items())),
                           dim=args.dim, steps=args.steps, batch=args.batch_size, lr=args.lr, seed=s,
                           length=args.length, channels=args.channels)
        return C.run_grid(args, "channel-select", [f"C{args.channels}-L{args.length}"], "accuracy",
                          lambda v, m, s: run(cfg(m, s)), lambda v, m, s: asdict(cfg(m, s)))
    return go


def _lm_overfit(p: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    from tsmix.models.lm.data import load_corpus
    from tsmix.models.lm.model import LMConfig
    from tsmix.models.lm.overfit import run_overfit
    from tsmix.models.lm.train import TrainConfig

    C.add_common(p, mixers="nrgpt,gpt-rec-parallel", steps=400, lr=3e-3, batch=32, layers=1)
    p.add_argument("--norm", default="layer", help="Block norm: layer | rms | none")
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--train-chars", type=int, default=20_000,
                   help="training text: this prefix of the train split")
    p.add_argument("--eval-batches", type=int, default=16, help="windows x batch size scored per loss")
    p.add_argument("--data-dir", default=None, help="folder holding tinyshakespeare/input.txt")

    def go(args: argparse.Namespace) -> int:
        for m in C.mixers(args):
            require(m, causal=True, what="tsmix lm")
        corpus = load_corpus(args.data_dir)

        def configs(m: str, s: int) -> tuple[LMConfig, TrainConfig]:
            lm = LMConfig(mixer=m, mixer_options=parse_options(m, args.mixer_option),
                          vocab_size=corpus.vocab.size, block_size=args.block_size, dim=args.dim,
                          heads=args.heads, layers=args.layers, ffn=args.ffn, norm=args.norm)
            tc = TrainConfig(steps=args.steps, batch_size=args.batch_size, lr=args.lr, warmup=args.warmup,
                             weight_decay=args.weight_decay, eval_every=max(1, args.steps // 4),
                             eval_batches=args.eval_batches, seed=s)
            return lm, tc

        return C.run_grid(args, "lm-overfit", [f"d{args.dim}-{args.train_chars}ch"],
                          ["train_loss", "val_loss", "gap", "best_val"],
                          lambda v, m, s: run_overfit(*configs(m, s), corpus, args.train_chars),
                          lambda v, m, s: {"lm": asdict(configs(m, s)[0]), "train": asdict(configs(m, s)[1]),
                                           "train_chars": args.train_chars},
                          percent=False, digits=3)
    return go


def _curved(p: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    from tsmix.models.synthetic import curved_boundary as cb

    C.add_common(p, mixers="gated,softmax", steps=60, lr=3e-3, batch=128, layers=1)
    p.add_argument("--variant", default="curved", help="curved | linear (the control)")

    def go(args: argparse.Namespace) -> int:
        task = cb.TaskConfig(task=args.variant)

        def one(v: str, m: str, s: int) -> dict:
            data = cb.make_data(task, s)
            torch.manual_seed(s)
            model = cb.CurvedBoundaryModel(m, dim=args.dim, **parse_options(m, args.mixer_option))
            return cb.train(model, data, cb.TrainConfig(epochs=args.steps, batch_size=args.batch_size,
                                                        lr=args.lr, seed=s))
        return C.run_grid(args, "curved-boundary", [args.variant], "test_acc", one,
                          lambda v, m, s: {"task": asdict(task), "epochs": args.steps})
    return go


TASKS: dict[str, Callable[[argparse.ArgumentParser], Callable[[argparse.Namespace], int]]] = {
    "mad": _mad, "listops": _listops, "induction": _induction, "transport": _transport,
    "channel-select": _channel_select, "curved-boundary": _curved, "lm-overfit": _lm_overfit,
}


def _run(args: argparse.Namespace) -> int:
    if args.name not in TASKS:
        raise TsmixError(f"unknown task {args.name!r}; choose one of {', '.join(TASKS)}")
    p = argparse.ArgumentParser(prog=f"tsmix task {args.name}")
    go = TASKS[args.name](p)
    return go(p.parse_args(args.rest))


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``tsmix task``."""
    p = sub.add_parser("task", help=f"run a benchmark task over mixers: {', '.join(TASKS)}",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", help=" | ".join(TASKS))
    p.add_argument("rest", nargs=argparse.REMAINDER, help="the task's flags (tsmix task NAME --help)")
    p.set_defaults(func=_run)


def main(argv: list[str] | None = None) -> int:
    from tsmix.cli import main as tsmix_main

    return tsmix_main(["task", *(sys.argv[1:] if argv is None else argv)])
