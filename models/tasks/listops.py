"""ListOps (Nangia & Bowman 2018; the Long Range Arena generator's knobs): nested MAX, MIN, MED
(integer median) and SM (sum modulo ``modulus``) over digits 0-9; classify the value (10 classes
for modulus 10).

A tree is a digit with probability ``1 - op_prob`` (always at ``max_depth``), else an operator
over 2..``max_args`` sub-trees; trees are redrawn until their token count is within
``[min_length, max_length]``. Tokens: ``[MAX [MIN [MED [SM ] 0..9`` (no parentheses), padded
on the left to one length so the last token is always the closing bracket.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from tsmix.errors import TsmixError
from tsmix.models.fit import FitConfig, epoch_indices, fit, predict
from tsmix.models.nets import NetConfig, TokenNet, n_params

OPS = ("MAX", "MIN", "MED", "SM")
VOCAB = ["<pad>", "]"] + [f"[{op}" for op in OPS] + [str(d) for d in range(10)]
INDEX = {t: i for i, t in enumerate(VOCAB)}


@dataclass(frozen=True)
class ListOpsConfig:
    ops: tuple[str, ...] = OPS  # operators drawn uniformly
    max_depth: int = 4  # LRA: 10
    max_args: int = 5  # LRA: 10
    op_prob: float = 0.25  # chance a node is an operator (LRA's VALUE_P)
    min_length: int = 8  # token bounds of accepted trees (LRA: 500..2000)
    max_length: int = 64
    modulus: int = 10  # SM is the sum modulo this (NRGPT's variant: 20, then 20 classes)
    num_train: int = 4000
    num_test: int = 500

    def __post_init__(self) -> None:
        bad = [o for o in self.ops if o not in OPS]
        if bad or not self.ops:
            raise TsmixError(f"unknown ListOps operator(s) {bad}; choose from {', '.join(OPS)}")
        if self.max_depth < 1 or self.max_args < 2 or not 0 < self.op_prob <= 1:
            raise TsmixError("ListOps needs max_depth >= 1, max_args >= 2 and op_prob in (0, 1]")
        if not 1 <= self.min_length <= self.max_length or self.modulus < 2:
            raise TsmixError("ListOps needs 1 <= min_length <= max_length and modulus >= 2")

    @property
    def classes(self) -> int:
        return max(10, self.modulus) if "SM" in self.ops else 10


def _tree(rng: random.Random, depth: int, cfg: ListOpsConfig) -> Any:
    if depth >= cfg.max_depth or rng.random() > cfg.op_prob:
        return rng.randrange(10)
    return (rng.choice(cfg.ops), [_tree(rng, depth + 1, cfg) for _ in range(rng.randint(2, cfg.max_args))])


def evaluate_tree(tree: Any, modulus: int = 10) -> int:
    if isinstance(tree, int):
        return tree
    op, args = tree
    vals = sorted(evaluate_tree(a, modulus) for a in args)
    if op == "MAX":
        return vals[-1]
    if op == "MIN":
        return vals[0]
    if op == "MED":
        n = len(vals)
        return vals[n // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) // 2
    return sum(vals) % modulus


def tokens(tree: Any) -> list[str]:
    if isinstance(tree, int):
        return [str(tree)]
    op, args = tree
    return [f"[{op}"] + [t for a in args for t in tokens(a)] + ["]"]


def sample(cfg: ListOpsConfig, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` expressions as ids (n, max_length), left-padded, and their values (n,)."""
    rng = random.Random(seed)
    ids = torch.zeros(n, cfg.max_length, dtype=torch.long)
    y = torch.zeros(n, dtype=torch.long)
    i, tries = 0, 0
    while i < n:
        tries += 1
        if tries > 200 * n + 10_000:
            raise TsmixError("ListOps: no trees within the length bounds; widen min/max_length or raise "
                             "max_depth")
        t = _tree(rng, 1, cfg)
        toks = tokens(t)
        if not cfg.min_length <= len(toks) <= cfg.max_length:
            continue
        ids[i, cfg.max_length - len(toks):] = torch.tensor([INDEX[s] for s in toks])
        y[i] = evaluate_tree(t, cfg.modulus)
        i += 1
    return ids, y


def run_listops(task: ListOpsConfig, net: NetConfig, fit_cfg: FitConfig, seed: int = 0,
                readout: str = "auto") -> dict[str, Any]:
    """Train a classifier (last token if causal, mean over tokens if bidirectional); test accuracy."""
    x, y = sample(task, task.num_train, seed)
    x_test, y_test = sample(task, task.num_test, 10_000 + seed)
    net = NetConfig(**{**net.__dict__, "max_len": max(net.max_len, task.max_length)})
    torch.manual_seed(seed)
    head = readout if readout != "auto" else ("last" if net.causal else "mean")
    model = TokenNet(len(VOCAB), task.classes, net, readout=head, what="ListOps")
    order = epoch_indices(len(x), fit_cfg.batch_size, torch.Generator().manual_seed(seed))
    t0 = time.perf_counter()
    done = fit(model, lambda *_: next(order), lambda idx: F.cross_entropy(model(x[idx]), y[idx]), fit_cfg)
    acc = float((predict(model, x_test).argmax(-1) == y_test).float().mean())
    majority = float(torch.bincount(y_test).max()) / len(y_test)
    return {"accuracy": acc, "majority": majority, "train_loss": done.last_loss, "params": n_params(model),
            "steps": done.steps, "seconds": round(time.perf_counter() - t0, 2)}
