"""The curved-boundary task of arXiv 2604.14702 and its one-block attention classifier.

Each sample has a latent centre c ~ U([-2, 2]^2) and is seen only through ``seq_len`` noisy
observations x_i = c + noise * N(0, I). With (r, theta) the polar coordinates of c the label is

    curved:  1[sin(k theta) + 0.6 (r - 1.2) > 0]       (a wavy, non-linearly-separable boundary)
    linear:  1[0.6 c_1 + 0.8 c_2 - 0.3 > 0]            (the control: a straight boundary)

with the paper's angular frequency k = 2.5; a larger k (``TaskConfig.frequency``) packs more arms
into the box, a harder boundary that keeps small models below the Bayes ceiling.

The classifier: Linear(2 -> dim), one single-head attention block (any registered mixer, in a
:class:`tsmix.Block` with no FFN so the mixer is the block's only non-affine part), mean pooling
over the sequence, a 2-layer ReLU MLP head -> one logit. Trained with AdamW.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import tsmix
from tsmix.errors import TsmixError
from tsmix.models.loop import train_steps

TASKS = ("curved", "linear")


@dataclass(frozen=True)
class TaskConfig:
    task: str = "curved"  # curved | linear (the control, see module doc)
    n_train: int = 4000  # training samples
    n_test: int = 2000  # held-out samples for accuracy and curvature
    seq_len: int = 8  # noisy observations of c per sample
    noise: float = 0.3  # std of each observation around c: pooling has to average it out
    frequency: float = 2.5  # k in sin(k theta) of the curved rule; the paper's 2.5, larger = harder

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise TsmixError(f"unknown task {self.task!r}; choose one of {', '.join(TASKS)}")
        if min(self.n_train, self.n_test, self.seq_len) < 1 or self.noise < 0:
            raise TsmixError("n_train, n_test and seq_len must be >= 1 and noise >= 0")
        if self.frequency <= 0:
            raise TsmixError(f"frequency must be > 0, got {self.frequency}")


def label(c: torch.Tensor, task: str, frequency: float = 2.5) -> torch.Tensor:
    """Labels {0., 1.} (n,) of latent centres c (n, 2); ``frequency`` is k of the curved rule."""
    if task == "curved":
        r, theta = c.norm(dim=-1), torch.atan2(c[:, 1], c[:, 0])
        score = torch.sin(frequency * theta) + 0.6 * (r - 1.2)
    elif task == "linear":
        score = 0.6 * c[:, 0] + 0.8 * c[:, 1] - 0.3
    else:
        raise TsmixError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    return (score > 0).to(c.dtype)


def observe(c: torch.Tensor, seq_len: int, noise: float, gen: torch.Generator) -> torch.Tensor:
    """Noisy observation sequences (n, seq_len, 2) of the centres c (n, 2)."""
    eps = torch.randn((c.shape[0], seq_len, 2), generator=gen, dtype=c.dtype)
    return c.unsqueeze(1) + noise * eps


def make_data(cfg: TaskConfig, seed: int) -> dict[str, torch.Tensor]:
    """Train/test tensors: x_* (n, seq_len, 2), y_* (n,), c_* (n, 2). Own generator: no global RNG."""
    gen = torch.Generator().manual_seed(10_007 * seed + 1)
    out: dict[str, torch.Tensor] = {}
    for split, n in (("train", cfg.n_train), ("test", cfg.n_test)):
        c = 4.0 * torch.rand((n, 2), generator=gen) - 2.0
        out[f"x_{split}"] = observe(c, cfg.seq_len, cfg.noise, gen)
        out[f"y_{split}"] = label(c, cfg.task, cfg.frequency)
        out[f"c_{split}"] = c
    return out


@torch.no_grad()
def bayes_accuracy(
    cfg: TaskConfig, x: torch.Tensor, y: torch.Tensor, draws: int = 2000, seed: int = 0
) -> float:
    """Accuracy of the Bayes-optimal classifier on (x, y), by Monte Carlo: the ceiling of any model.

    Given the observations, c's posterior is N(mean of x, noise^2 / seq_len) cut to the box [-2, 2]^2
    (uniform prior); P(y = 1 | x) is the posterior mass of label 1, estimated with ``draws`` samples.
    """
    xbar = x.double().mean(dim=1)  # (n, 2): sufficient for c under Gaussian noise
    gen = torch.Generator().manual_seed(seed)
    c = xbar.unsqueeze(1) + cfg.noise / cfg.seq_len**0.5 * torch.randn(
        (x.shape[0], draws, 2), generator=gen, dtype=torch.float64)  # (n, draws, 2)
    inside = (c.abs() <= 2.0).all(-1).double()
    lab = label(c.reshape(-1, 2), cfg.task, cfg.frequency).view(x.shape[0], draws)
    p = (lab * inside).sum(1) / inside.sum(1).clamp_min(1.0)
    return ((p > 0.5).to(y.dtype) == y).float().mean().item()


class CurvedBoundaryModel(nn.Module):
    """2 -> dim projection, one single-head attention block, mean pool, 2-layer MLP head."""

    def __init__(
        self, mixer: str = "gated", dim: int = 64, hidden: int = 64, norm: str = "none", **mixer_options: Any
    ) -> None:
        super().__init__()
        self.proj = nn.Linear(2, dim)
        self.block = tsmix.Block(dim, tsmix.build_mixer(mixer, dim, heads=1, **mixer_options), ffn="none",
                                 norm=norm)
        self.head = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def represent(self, x: torch.Tensor) -> torch.Tensor:  # (B, L, 2) -> (B, dim)
        """Mean-pooled block output: the attention representation whose curvature is measured.

        The residual and the projection are affine, so this has the attention branch's curvature."""
        return self.block(self.proj(x)).mean(dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, L, 2) -> (B,) logits
        return self.head(self.represent(x)).squeeze(-1)


class Representation(nn.Module):
    """``model.represent`` as a module, so curvature tools can copy and cast it."""

    def __init__(self, model: CurvedBoundaryModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.represent(x)


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 60  # passes over the training set
    batch_size: int = 128  # mini-batch size
    lr: float = 3e-3  # AdamW learning rate, cosine-decayed to 0
    weight_decay: float = 1e-2  # AdamW decoupled weight decay
    seed: int = 0  # model init and batch order


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    was = model.training
    model.eval()
    acc = ((model(x) > 0).to(y.dtype) == y).float().mean().item()
    model.train(was)
    return acc


def train(model: nn.Module, data: dict[str, torch.Tensor], cfg: TrainConfig) -> dict[str, float]:
    """AdamW with cosine decay on binary cross-entropy; returns final accuracies, loss, time, steps."""
    gen = torch.Generator().manual_seed(cfg.seed)
    x, y = data["x_train"], data["y_train"]
    steps_per_epoch = math.ceil(len(x) / cfg.batch_size)
    total = cfg.epochs * steps_per_epoch
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / total)))
    last_epoch = {"loss_sum": 0.0, "seen": 0, "size": 0}

    def batches():
        for epoch in range(cfg.epochs):
            perm = torch.randperm(len(x), generator=gen)
            for i in range(0, len(x), cfg.batch_size):
                idx = perm[i : i + cfg.batch_size]
                yield epoch, x[idx], y[idx]

    def loss_fn(batch: tuple[int, torch.Tensor, torch.Tensor]) -> torch.Tensor:
        epoch, xb, yb = batch
        last_epoch["size"] = len(xb) if epoch == cfg.epochs - 1 else 0
        return F.binary_cross_entropy_with_logits(model(xb), yb)

    def tally(step: int, loss: float) -> None:  # the mean training loss over the last epoch
        last_epoch["loss_sum"] += loss * last_epoch["size"]
        last_epoch["seen"] += last_epoch["size"]

    done = train_steps(model, opt, batches(), loss_fn, scheduler=sched, callbacks=[tally])
    loss_sum, seen, seconds = last_epoch["loss_sum"], last_epoch["seen"], done.seconds
    return {
        "train_acc": accuracy(model, x, y),
        "test_acc": accuracy(model, data["x_test"], data["y_test"]),
        "train_loss": loss_sum / max(seen, 1),
        "train_seconds": seconds,
        "steps": float(total),
    }


@torch.no_grad()
def predict_grid(
    model: nn.Module, cfg: TaskConfig, resolution: int = 121, draws: int = 4, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """P(y = 1) over a grid of latent centres: (X, Y, P), each (resolution, resolution).

    Each grid centre is observed like the data (seq_len noisy points), averaged over ``draws``."""
    g = torch.linspace(-2.0, 2.0, resolution)
    cx, cy = torch.meshgrid(g, g, indexing="xy")
    c = torch.stack([cx.flatten(), cy.flatten()], dim=-1)  # (R*R, 2)
    gen = torch.Generator().manual_seed(seed)
    was = model.training
    model.eval()
    p = torch.stack([torch.sigmoid(model(observe(c, cfg.seq_len, cfg.noise, gen))) for _ in range(draws)])
    model.train(was)
    return cx, cy, p.mean(0).view(resolution, resolution)
