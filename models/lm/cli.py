"""``python -m tsmix.models.lm`` (and ``tsmix lm`` once listed): train a char LM, report, sample.

Examples::

    python -m tsmix.models.lm --mixer softmax --layers 2 --steps 300
    python -m tsmix.models.lm --mixer nrgpt --layers 1 --ffn none --norm none -o steps=4
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict

import torch

from tsmix.atomic import write_text_atomic
from tsmix.errors import TsmixError
from tsmix.models.capabilities import parse_options, require

from .data import load_corpus
from .model import CharLM, LMConfig
from .train import TrainConfig, train_lm

_LM, _TRAIN = LMConfig(), TrainConfig()


def configure(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    m = parser.add_argument_group("model")
    m.add_argument("--mixer", default=_LM.mixer, help="a registered mixer with causal support")
    m.add_argument("-o", "--mixer-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a mixer option (repeatable, typed by the mixer's options), e.g. -o steps=4")
    for name in ("block_size", "dim", "heads", "layers"):
        m.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(_LM, name))
    m.add_argument("--ffn", default=_LM.ffn, help="Block FFN: gelu | relu | swiglu | none")
    m.add_argument("--norm", default=_LM.norm, help="Block norm: layer | rms | none")
    m.add_argument("--dropout", type=float, default=_LM.dropout)
    m.add_argument("--embed-std", type=float, default=_LM.embed_std, help="embedding init std")
    t = parser.add_argument_group("training")
    for name in ("steps", "batch_size", "warmup", "eval_every", "eval_batches", "seed"):
        t.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(_TRAIN, name))
    for name in ("lr", "weight_decay", "grad_clip"):
        t.add_argument(f"--{name.replace('_', '-')}", type=float, default=getattr(_TRAIN, name))
    d = parser.add_argument_group("data and output")
    d.add_argument("--data-dir", default=None, help="folder holding tinyshakespeare/input.txt "
                   "(default: $TSMIX_DATA_DIR)")
    d.add_argument("--text", default=None, help="train on this text file instead")
    d.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    d.add_argument("--sample", type=int, default=200, help="characters to generate at the end (0: none)")
    d.add_argument("--json", default=None, help="write config, history and sample to this JSON file")
    return parser


def run(args: argparse.Namespace) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    require(args.mixer, causal=True, what="tsmix lm")
    corpus = load_corpus(args.data_dir, path=args.text)
    lm = LMConfig(
        mixer=args.mixer, mixer_options=parse_options(args.mixer, args.mixer_option),
        vocab_size=corpus.vocab.size,
        block_size=args.block_size, dim=args.dim, heads=args.heads, layers=args.layers, ffn=args.ffn,
        norm=args.norm, dropout=args.dropout, embed_std=args.embed_std,
    )
    tc = TrainConfig(
        steps=args.steps, batch_size=args.batch_size, lr=args.lr, warmup=args.warmup,
        weight_decay=args.weight_decay, grad_clip=args.grad_clip, eval_every=args.eval_every,
        eval_batches=args.eval_batches, seed=args.seed,
    )
    torch.manual_seed(args.seed)
    model = CharLM(lm)
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"mixer={lm.mixer} options={lm.mixer_options} layers={lm.layers} ffn={lm.ffn} norm={lm.norm} "
          f"dim={lm.dim} params={params}")

    def log(row: dict) -> None:
        print(f"step {row['step']:5d}  train {row['train_loss']:.4f}  val {row['val_loss']:.4f}  "
              f"{row['seconds']:.1f}s", flush=True)

    history = train_lm(model, corpus, tc, log)
    diagnostics = {}
    for i, mixer in enumerate(model.mixers()):
        if hasattr(mixer, "diagnostics"):
            diagnostics.update({f"layer{i}.{k}": v for k, v in mixer.diagnostics().items()})
    for k, v in diagnostics.items():
        print(f"  {k} = {v:.4g}")
    sample = ""
    if args.sample > 0:
        model.eval()
        gen = torch.Generator().manual_seed(args.seed)
        out = model.generate(torch.zeros(1, 1, dtype=torch.long), args.sample, top_k=10, generator=gen)
        sample = corpus.vocab.decode(out[0])
        print("---- sample ----\n" + sample)
    if args.json:
        result = {"lm": asdict(lm), "train": asdict(tc), "params": params, "history": history,
                  "diagnostics": diagnostics, "sample": sample}
        write_text_atomic(args.json, json.dumps(result, indent=2))
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``tsmix lm`` (for tsmix.models.cli to call)."""
    p = sub.add_parser("lm", help="train a small causal char LM over any mixer (Tiny Shakespeare)")
    configure(p).set_defaults(func=run)


def main(argv: Sequence[str] | None = None) -> int:
    parser = configure(argparse.ArgumentParser(prog="python -m tsmix.models.lm", description=__doc__,
                                               formatter_class=argparse.RawDescriptionHelpFormatter))
    args = parser.parse_args(argv)
    try:
        return run(args)
    except TsmixError as exc:
        print(f"tsmix lm: error: {exc}", file=sys.stderr)
        return 2
