"""Over-fitting of the char LM: train and validation loss, measured the same way, and their gap.

NRGPT's Shakespeare claim is that at equal size it over-fits less than GPT (training loss close
to validation loss where GPT's falls far below it). The training text here is a prefix of the
train split (``train_chars``), so a CPU budget of a few hundred steps makes many passes over it
and a gap can open at all; validation is the whole held-out tail, as in ``tsmix lm``. Both
losses are :func:`tsmix.models.lm.train.evaluate` in eval mode over fixed random windows: the
running training-batch mean would mix in early, higher losses and dropout.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import torch

from tsmix.errors import TsmixError

from .data import CharCorpus
from .model import CharLM, LMConfig
from .train import TrainConfig, evaluate, train_lm


def prefix_corpus(corpus: CharCorpus, train_chars: int, block_size: int) -> CharCorpus:
    """``corpus`` with its training ids cut to the first ``train_chars`` (validation untouched)."""
    if train_chars <= block_size:
        raise TsmixError(f"train_chars {train_chars} must exceed block_size {block_size}; "
                         f"pass a larger --train-chars")
    return dataclasses.replace(corpus, train=corpus.train[:train_chars])


def run_overfit(lm: LMConfig, tc: TrainConfig, corpus: CharCorpus, train_chars: int) -> dict[str, Any]:
    """Train one model on the first ``train_chars`` training characters; return the end-of-training
    train and val losses (nats/char, same windows count, eval mode), their gap and the best val."""
    data = prefix_corpus(corpus, train_chars, lm.block_size)
    torch.manual_seed(tc.seed)
    model = CharLM(lm)
    t0 = time.process_time()
    history = train_lm(model, data, tc)
    train = evaluate(model, data.train, tc.eval_batches, tc.batch_size)
    val = evaluate(model, data.val, tc.eval_batches, tc.batch_size)
    return {"train_loss": train, "val_loss": val, "gap": val - train,
            "best_val": min(h["val_loss"] for h in history),
            "params": sum(p.numel() for p in model.parameters()), "steps": tc.steps,
            "cpu_seconds": round(time.process_time() - t0, 1)}


__all__ = ["prefix_corpus", "run_overfit"]
