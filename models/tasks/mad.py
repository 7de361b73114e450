"""MAD on the shared mixer core: the six tasks, scaled to CPU, trained and scored per mixer.

Paper settings (mad-lab task configs, baseline difficulty) beside the CPU scale used here;
``MAD_SCALED`` is what ``tsmix task mad`` runs. MAD itself trains 2 mixer + 2 SwiGLU blocks of
width 128 for 200 epochs over 12,800 sequences at batch 128 and reports the best of six
(lr, weight decay) settings averaged over several difficulty levels; here one difficulty, one
recipe, ``FitConfig.steps`` steps over a fixed training set.

Models: next-token tasks use a causal :class:`TokenNet`; compression uses MAD's auto-encoder
layout (the mixer stack encodes, the last token's vector plus sinusoidal positions feeds a
2-layer MLP decoder that reconstructs every token).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tsmix.errors import TsmixError
from tsmix.models.fit import IGNORE, FitConfig, epoch_indices, fit, predict, token_accuracy
from tsmix.models.nets import NetConfig, Positions, TokenNet, n_params, sincos

from . import mad_data as D


@dataclass(frozen=True)
class MADTask:
    generator: Callable[..., D.Instance]
    paper: dict[str, Any]  # mad-lab baseline settings (with num_train)
    scaled: dict[str, Any]  # what runs here (with num_train)
    test_kwargs: dict[str, Any] = field(default_factory=dict)  # extra generator args of test sequences


MAD_TASKS: dict[str, MADTask] = {
    "in-context-recall": MADTask(D.in_context_recall, dict(vocab=16, seq_len=128, num_train=12800),
                                 dict(vocab=16, seq_len=64, num_train=2048)),
    "fuzzy-in-context-recall": MADTask(
        D.fuzzy_in_context_recall, dict(vocab=16, seq_len=128, k_motif=3, v_motif=3, num_train=12800),
        dict(vocab=16, seq_len=64, k_motif=3, v_motif=3, num_train=2048), dict(is_training=False)),
    "noisy-in-context-recall": MADTask(
        D.noisy_in_context_recall,
        dict(vocab=32, seq_len=128, noise_vocab=16, frac_noise=0.2, num_train=12800),
        dict(vocab=32, seq_len=64, noise_vocab=16, frac_noise=0.2, num_train=2048)),
    "selective-copying": MADTask(
        D.selective_copying, dict(vocab=16, seq_len=256, n_copy=16, num_train=12800),
        dict(vocab=16, seq_len=64, n_copy=8, num_train=2048)),
    "compression": MADTask(D.compression, dict(vocab=16, seq_len=32, num_train=12800),
                           dict(vocab=16, seq_len=32, num_train=2048)),
    "memorization": MADTask(D.memorization, dict(vocab=256, seq_len=32, num_train=256),
                            dict(vocab=256, seq_len=32, num_train=256)),
}
TEST_SIZE = 256  # test sequences per task (MAD: 1,280)


def make_split(task: str, n: int, seed: int, test: bool = False,
               settings: dict[str, Any] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` sequences of ``task``: inputs (n, L) and targets (n, L) (test: only scored positions)."""
    spec = MAD_TASKS[task]
    kwargs = {k: v for k, v in (settings or spec.scaled).items() if k != "num_train"}
    if test:
        kwargs |= spec.test_kwargs
    if task == "memorization":
        kwargs["kv_map"] = D.memorization_map(kwargs["vocab"], 12345)  # one fixed map for train and test
    rng = np.random.default_rng([seed, int(test)])
    xs, ys = [], []
    for _ in range(n):
        x, y_train, y_test = spec.generator(rng, **kwargs)
        xs.append(x)
        ys.append(y_test if test else y_train)
    return torch.from_numpy(np.stack(xs)), torch.from_numpy(np.stack(ys))


class CompressionNet(nn.Module):
    """MAD's auto-encoder: mixer stack -> last token's vector -> + positions -> MLP -> logits (B, L, V)."""

    def __init__(self, vocab: int, cfg: NetConfig) -> None:
        super().__init__()
        self.encoder = TokenNet(vocab, cfg.dim, cfg, readout="last", what="MAD compression")
        d = cfg.dim
        self.decoder = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, d), nn.GELU(), nn.LayerNorm(d),
                                     nn.Linear(d, d), nn.GELU(), nn.LayerNorm(d), nn.Linear(d, vocab))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # (B, L) -> (B, L, V)
        code = self.encoder.features(ids)  # (B, D)
        return self.decoder(code[:, None, :] + sincos(ids.shape[1], code.shape[-1], ids.device))


def build_model(task: str, net: NetConfig, settings: dict[str, Any] | None = None) -> nn.Module:
    s = settings or MAD_TASKS[task].scaled
    if task == "compression":
        return CompressionNet(s["vocab"], net)
    return TokenNet(s["vocab"], s["vocab"], net, readout="tokens", what=f"MAD {task}")


def run_mad(task: str, net: NetConfig, fit_cfg: FitConfig, seed: int = 0) -> dict[str, Any]:
    """Train one model on ``task`` and return the result metrics (accuracy on the scored test positions)."""
    if task not in MAD_TASKS:
        raise TsmixError(f"unknown MAD task {task!r}; choose one of {', '.join(MAD_TASKS)}")
    settings = MAD_TASKS[task].scaled
    net = NetConfig(**{**net.__dict__, "max_len": max(net.max_len, settings["seq_len"])})
    x, y = make_split(task, settings["num_train"], seed)
    x_test, y_test = make_split(task, TEST_SIZE, seed, test=True)
    torch.manual_seed(seed)
    model = build_model(task, net)
    order = epoch_indices(len(x), fit_cfg.batch_size, torch.Generator().manual_seed(seed))

    def sample(_: int, __: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        idx = next(order)
        return x[idx], y[idx]

    def loss_fn(batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        logits = model(batch[0])
        return F.cross_entropy(logits.flatten(0, 1), batch[1].flatten(), ignore_index=IGNORE)

    t0 = time.perf_counter()
    done = fit(model, sample, loss_fn, fit_cfg)
    acc = token_accuracy(predict(model, x_test), y_test)
    return {"accuracy": acc, "train_loss": done.last_loss, "params": n_params(model), "steps": done.steps,
            "seconds": round(time.perf_counter() - t0, 2)}


__all__ = ["MAD_TASKS", "CompressionNet", "Positions", "build_model", "make_split", "run_mad"]
