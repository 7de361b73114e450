"""The image classifier: patch tokens (ViT-style) or sequential pixels over one mixer stack.

patch: non-overlapping ``patch`` x ``patch`` patches -> Linear -> tokens (H/p * W/p of them).
pixel: one token per pixel in raster order (sMNIST / sCIFAR style, up to 1,024 tokens).
Positions follow the mixer's capabilities (see :mod:`tsmix.models.nets`); the readout is the
mean over tokens when bidirectional, the last token when causal (the only one that saw all).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tsmix.errors import TsmixError
from tsmix.models.fit import FitConfig, epoch_indices, fit, predict
from tsmix.models.nets import MixerStack, NetConfig, Positions, n_params, pool

from .data import Images

MODES = ("patch", "pixel")


@dataclass(frozen=True)
class VisionConfig:
    mode: str = "patch"  # patch | pixel
    patch: int = 4  # patch side in pixels (patch mode; 4: a 2x2 grid on digits, 7x7 on MNIST)
    epochs: int = 2  # passes over the training images

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise TsmixError(f"unknown vision mode {self.mode!r}; choose one of {', '.join(MODES)}")
        if self.patch < 1 or self.epochs < 1:
            raise TsmixError(f"patch and epochs must be >= 1, got {self.patch}, {self.epochs}")


class ImageClassifier(nn.Module):
    """Images (B, C, H, W) -> class logits (B, classes)."""

    def __init__(
        self, shape: tuple[int, int, int], classes: int, vision: VisionConfig, net: NetConfig
    ) -> None:
        super().__init__()
        c, h, w = shape
        if vision.mode == "patch" and (h % vision.patch or w % vision.patch):
            raise TsmixError(f"patch {vision.patch} does not tile {h}x{w} images; pick a divisor of both "
                             f"sides")
        self.vision = vision
        tokens = h * w // vision.patch**2 if vision.mode == "patch" else h * w
        width = c * vision.patch**2 if vision.mode == "patch" else c
        self.embed = nn.Linear(width, net.dim)
        net = NetConfig(**{**net.__dict__, "max_len": max(net.max_len, tokens)})
        self.positions = Positions(net.position_kind(), net.dim, net.max_len)
        self.stack = MixerStack(net, f"vision ({vision.mode} mode)")
        self.readout = "last" if net.causal else "mean"
        self.head = nn.Linear(net.dim, classes)

    def tokens(self, img: torch.Tensor) -> torch.Tensor:  # (B, C, H, W) -> (B, N, width)
        if self.vision.mode == "pixel":
            return img.flatten(2).transpose(1, 2)  # raster order
        p = self.vision.patch
        return F.unfold(img, kernel_size=p, stride=p).transpose(1, 2)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        h = self.stack(self.positions(self.embed(self.tokens(img))))  # (B, N, D)
        return self.head(pool(h, self.readout))


def run_vision(train: Images, test: Images, vision: VisionConfig, net: NetConfig, fit_cfg: FitConfig,
               seed: int = 0) -> dict[str, Any]:
    """Train for ``vision.epochs`` (``fit_cfg.steps`` is derived from it); test accuracy and timing."""
    mean, std = train.x.mean(), train.x.std().clamp_min(1e-6)  # scaling fit on training images only
    x, x_test = (train.x - mean) / std, (test.x - mean) / std
    steps = vision.epochs * math.ceil(len(x) / fit_cfg.batch_size)
    fit_cfg = FitConfig(**{**fit_cfg.__dict__, "steps": steps, "warmup": min(fit_cfg.warmup, steps // 4)})
    torch.manual_seed(seed)
    model = ImageClassifier(tuple(x.shape[1:]), train.classes, vision, net)
    order = epoch_indices(len(x), fit_cfg.batch_size, torch.Generator().manual_seed(seed))
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    done = fit(model, lambda *_: next(order), lambda i: F.cross_entropy(model(x[i]), train.y[i]), fit_cfg)
    acc = float((predict(model, x_test, 256).argmax(-1) == test.y).float().mean())
    return {"accuracy": acc, "train_loss": done.last_loss, "params": n_params(model), "steps": done.steps,
            "seconds": round(time.perf_counter() - t0, 2),
            "cpu_seconds": round(time.process_time() - cpu0, 2)}
