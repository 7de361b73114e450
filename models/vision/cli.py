"""``tsmix vision``: train an image classifier over any mixer (patch tokens or sequential pixels).

    tsmix vision --dataset digits --mixer yb-spectral --epochs 2
    tsmix vision --dataset digits --mode pixel --causal --mixers softmax,gla --epochs 1
    tsmix vision --dataset mnist --data-dir ~/data/mnist --mixers softmax --patch 7
"""

from __future__ import annotations

import argparse
from dataclasses import asdict

from tsmix.models import common_cli as C
from tsmix.models.capabilities import require

from .data import DATASETS, load_images
from .model import VisionConfig, run_vision

_V = VisionConfig()


def _run(args: argparse.Namespace) -> int:
    if args.mixer:
        args.mixers = args.mixer
    vision = VisionConfig(mode=args.mode, patch=args.patch, epochs=args.epochs)
    causal = bool(args.causal)
    for m in C.mixers(args):
        require(m, causal=causal, what=f"vision {vision.mode} mode" + (" (causal)" if causal else ""))
    train = load_images(args.dataset, "train", args.data_dir)
    test = load_images(args.dataset, "test", args.data_dir)
    variant = f"{args.dataset}-{vision.mode}" + (f"{vision.patch}" if vision.mode == "patch" else "")
    variant += "-causal" if causal else ""
    return C.run_grid(args, "vision", [variant], "accuracy",
                      lambda v, m, s: run_vision(train, test, vision, C.net_config(args, m, causal),
                                                 C.fit_config(args, s), s),
                      lambda v, m, s: {"vision": asdict(vision), "fit": asdict(C.fit_config(args, s)),
                                       "dim": args.dim, "layers": args.layers})


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``tsmix vision``."""
    p = sub.add_parser("vision", help="image classification over any mixer (digits, MNIST, CIFAR-10)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="digits", help=" | ".join(DATASETS))
    p.add_argument("--data-dir", default=None, help="folder holding the MNIST / CIFAR-10 files")
    p.add_argument("--mode", default=_V.mode, help="patch | pixel")
    p.add_argument("--patch", type=int, default=_V.patch)
    p.add_argument("--epochs", type=int, default=_V.epochs)
    p.add_argument("--causal", action="store_true", help="causal mixers (last-token readout)")
    p.add_argument("--mixer", default=None, help="one mixer (same as --mixers NAME)")
    C.add_common(p, mixers="yb-spectral", steps=1, lr=5e-3, batch=16)  # steps: set by --epochs
    p.set_defaults(func=_run)
