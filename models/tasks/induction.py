"""Induction heads and associative recall, trained at one length and tested at longer ones.

induction: random tokens with a trigger token at one random position followed by the target;
the sequence ends with the trigger again and the model names the token that followed its first
occurrence. recall: key-value pairs (per-sequence map), the last token is a key seen before;
name its value. Both are scored at the last position only, so causal and bidirectional mixers
solve the same problem (the answer is never in the input).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from tsmix.errors import TsmixError
from tsmix.models.fit import FitConfig, fit, predict
from tsmix.models.nets import NetConfig, TokenNet, n_params

KINDS = ("induction", "recall")


@dataclass(frozen=True)
class InductionConfig:
    kind: str = "induction"  # induction | recall
    vocab: int = 16  # content tokens (the trigger is one more)
    train_length: int = 64
    test_lengths: tuple[int, ...] = (64, 256, 1024)
    num_test: int = 256  # test sequences per length

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise TsmixError(f"unknown kind {self.kind!r}; choose one of {', '.join(KINDS)}")
        if self.vocab < 2 or min((self.train_length, *self.test_lengths)) < 4:
            raise TsmixError("induction needs vocab >= 2 and every length >= 4")


def make_batch(
    cfg: InductionConfig, n: int, length: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences (n, length) and their answers (n,)."""
    if cfg.kind == "induction":
        x = torch.randint(0, cfg.vocab, (n, length), generator=gen)
        trigger = cfg.vocab
        at = torch.randint(0, length - 2, (n,), generator=gen)  # trigger position; target right after
        rows = torch.arange(n)
        x[rows, at] = trigger
        x[:, -1] = trigger
        return x, x[rows, at + 1].clone()
    half = cfg.vocab // 2  # keys [0, half), values [half, vocab)
    keys = torch.randint(0, half, (n, length // 2), generator=gen)
    values = torch.randint(half, cfg.vocab, (n, half), generator=gen)  # the per-sequence map
    pairs = torch.stack([keys, values.gather(1, keys)], dim=2).reshape(n, -1)[:, : length - 1]
    pick = torch.randint(0, (length - 1) // 2, (n,), generator=gen)
    query = keys.gather(1, pick[:, None])  # (n, 1): a key that occurs in the sequence
    return torch.cat([pairs, query], dim=1), values.gather(1, query)[:, 0]


def run_induction(task: InductionConfig, net: NetConfig, fit_cfg: FitConfig, seed: int = 0) -> dict[str, Any]:
    """Train at ``train_length``; accuracy at each test length (``acc_L<len>``)."""
    torch.manual_seed(seed)
    model = TokenNet(task.vocab + 1, task.vocab, net, readout="last", what=f"{task.kind} task")
    t0 = time.perf_counter()
    done = fit(model, lambda b, g: make_batch(task, b, task.train_length, g),
               lambda batch: F.cross_entropy(model(batch[0]), batch[1]), fit_cfg)
    out: dict[str, Any] = {"train_loss": done.last_loss, "params": n_params(model), "steps": done.steps}
    for length in task.test_lengths:
        x, y = make_batch(task, task.num_test, length, torch.Generator().manual_seed(7919 + length))
        try:
            out[f"acc_L{length}"] = float((predict(model, x, 64).argmax(-1) == y).float().mean())
        except TsmixError:  # learned positions cannot run longer than trained: no score, said in the row
            out[f"acc_L{length}"] = None
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out
