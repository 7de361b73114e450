"""Training and scoring a covariate model on panel windows, through the engine (:mod:`tsmix.engine`).

Channel-independent, as neuralforecast: every window is one series' (L, 1) lookback (+ its
covariates), so series of any number and length share one model. The optimizer, schedules and
engine knobs are the forecasting trainer's (``make_optimizer``, ``make_schedule``, ``engine_config``).
The loss is the model's output head's (``model.head``: literally ``F.mse_loss`` for ``loss="mse"``);
early stopping watches the validation MSE of point heads and the mean head loss of the others, as the
wide trainer does. With a ``checkpoint_dir`` the engine writes ``last.safetensors`` after every epoch;
``resume`` continues from it bit-exactly, and :func:`panel_fingerprint` makes it refuse a checkpoint
of another config or panel.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from tsmix.engine import Callback, FitResult, Task, WindowBatches, fit
from tsmix.forecasting import trainer as tr
from tsmix.forecasting.config import ForecasterConfig
from tsmix.forecasting.probabilistic import Head, PointHead

Inputs = tuple[torch.Tensor, ...]  # x (B, L, 1), hist (B, L, Ch), futr (B, L+H, Cf), static, static_cat
BatchHook = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]  # (head output, y (B, H, 1), series)


class PanelTuples:
    """A ``PanelWindows`` as an engine dataset: ``gather`` gives plain tensor tuples (the engine moves
    tuples to the device), ``(y, *inputs)``."""

    def __init__(self, windows: Any) -> None:
        self.windows = windows

    def __len__(self) -> int:
        return len(self.windows)

    def gather(self, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        b = self.windows.gather(idx)
        return b.y, b.x, b.hist, b.futr, b.static, b.static_cat


def _batches(windows: Any, batch_size: int, rank: int = 0, world: int = 1
             ) -> Iterator[tuple[torch.Tensor, Any]]:
    """(window indices (B,), PanelBatch) in order over this rank's contiguous share of the windows."""
    share = torch.arange(len(windows), device=windows.cum.device).tensor_split(world)[rank]
    for s in range(0, len(share), batch_size):
        idx = share[s : s + batch_size]
        yield idx, windows.gather(idx)


def _forward(model: nn.Module, b: Any) -> torch.Tensor:
    return model(b.x, b.hist, b.futr, b.static, b.static_cat)  # head output: (B, H, 1) or (B, H, K, 1)


def model_head(model: nn.Module) -> Head:
    """The output head of a covariate model (or of a bare network: an ``mse`` point head)."""
    return tr.output_head(getattr(model, "base", model))


@dataclass
class PanelErrors:
    """Per-series sums of squared and absolute scaled errors over the windows of one split."""

    se: np.ndarray  # (S,) float64
    ae: np.ndarray  # (S,) float64
    windows: np.ndarray  # (S,) int64 windows scored per series
    horizon: int

    def metrics(self, ids: Sequence[str]) -> dict[str, Any]:
        n = self.windows * self.horizon  # (S,) scored steps
        total = max(int(n.sum()), 1)
        scored = np.flatnonzero(self.windows)
        return {"mse": float(self.se.sum() / total), "mae": float(self.ae.sum() / total),
                "per_series": {ids[s]: {"mse": float(self.se[s] / n[s]), "mae": float(self.ae[s] / n[s]),
                                        "windows": int(self.windows[s])} for s in scored},
                "windows": int(self.windows.sum())}


@torch.no_grad()
def panel_errors(model: nn.Module, windows: Any, batch_size: int, n_series: int, rank: int = 0,
                 world: int = 1, on_batch: BatchHook | None = None, head: Head | None = None) -> PanelErrors:
    """Errors of ``model``'s point forecast over every window (this rank's share under DDP), summed
    per series. ``on_batch`` also sees every batch's head output, targets and series (further scores).
    ``head``: the model's output head (default: read off the model; pass it for a wrapped model)."""
    head = head if head is not None else model_head(model)
    was = model.training
    model.eval()
    dev = windows.cum.device
    se = torch.zeros(n_series, dtype=torch.float64, device=dev)
    ae, cnt = torch.zeros_like(se), torch.zeros(n_series, dtype=torch.int64, device=dev)
    for _, b in _batches(windows, batch_size, rank, world):
        out = _forward(model, b).float()
        err = (head.point(out) - b.y)[..., 0].double()  # (B, H)
        se.index_add_(0, b.series, err.square().sum(1))
        ae.index_add_(0, b.series, err.abs().sum(1))
        cnt.index_add_(0, b.series, torch.ones_like(b.series))
        if on_batch is not None:
            on_batch(out, b.y, b.series)
    model.train(was)
    return PanelErrors(se.cpu().numpy(), ae.cpu().numpy(), cnt.cpu().numpy(), windows.horizon)


@torch.no_grad()
def head_loss_sum(model: nn.Module, windows: Any, batch_size: int, head: Head, rank: int = 0,
                  world: int = 1) -> tuple[torch.Tensor, int]:
    """(sum over batches of the head's mean loss x batch size, windows): the mean head loss over a
    split, summable over DDP ranks (validation of quantile / distribution heads)."""
    was = model.training
    model.eval()
    total, count = torch.zeros((), dtype=torch.float64, device=windows.cum.device), 0
    for idx, b in _batches(windows, batch_size, rank, world):
        total += head.loss(_forward(model, b).float(), b.y).double() * len(idx)
        count += len(idx)
    model.train(was)
    return total, count


@torch.no_grad()
def window_outputs(model: nn.Module, windows: Any, batch_size: int
                   ) -> tuple[np.ndarray, np.ndarray, torch.Tensor, np.ndarray]:
    """Every window's (series (n,), start row (n,), scaled head output (n, H[, K], 1) on the CPU,
    scaled truth (n, H))."""
    was = model.training
    model.eval()
    out, truth = [], []
    for _, b in _batches(windows, batch_size):
        out.append(_forward(model, b).float().cpu())
        truth.append(b.y[..., 0].cpu())
    model.train(was)
    series, start = windows.index()
    return series, start, torch.cat(out), torch.cat(truth).numpy()


def window_forecasts(model: nn.Module, windows: Any, batch_size: int) -> tuple[np.ndarray, ...]:
    """Every window's (series (n,), start row (n,), scaled point forecast (n, H), scaled truth (n, H))."""
    series, start, out, truth = window_outputs(model, windows, batch_size)
    return series, start, model_head(model).point(out)[..., 0].numpy(), truth


def _windows_identity(windows: Any) -> dict[str, Any]:
    """Which rows of the buffer a window set covers (series, first start, window count per series)."""
    rows = torch.stack([windows.series, windows.first, windows.counts]).cpu().contiguous()
    return {"sha256": hashlib.sha256(rows.numpy().tobytes()).hexdigest(), "windows": len(windows)}


def panel_fingerprint(cfg: ForecasterConfig, train: Any, val: Any | None, options: dict[str, Any]
                      ) -> dict[str, Any]:
    """The identity of a panel fit for resume: the config fields that change the numbers, the panel
    options, a hash of every scaled buffer the windows view and of the train/val window rows."""
    t = train.tensors
    digest = hashlib.sha256()
    for f in fields(t):  # shapes and dtypes too: the same bytes in another layout are another panel
        a = getattr(t, f.name).detach().cpu().contiguous()
        digest.update(f"{f.name}{tuple(a.shape)}{a.dtype}".encode())
        digest.update(a.numpy().tobytes())
    return {
        "config": {k: v for k, v in cfg.to_dict().items() if k not in tr._NOT_IDENTITY},
        "options": options,
        "data": {"sha256": digest.hexdigest(), "train": _windows_identity(train),
                 "val": None if val is None else _windows_identity(val)},
    }


def train_panel(model: nn.Module, train: Any, val: Any | None, cfg: ForecasterConfig, device: torch.device,
                callbacks: Sequence[Callback] = (), *, checkpoint_dir: str | Path | None = None,
                resume: bool = False, options: dict[str, Any] | None = None) -> FitResult:
    """Fit ``model`` in place on ``train`` windows (``cfg`` resolved).

    With ``val``: early stopping on the validation MSE (point heads) or mean head loss (quantile /
    distribution heads), best weights restored (``trainer.train``'s rules). Without: exactly
    ``cfg.epochs`` epochs, the last epoch's weights (the production refit).

    ``checkpoint_dir``: a checkpoint after every epoch; with ``resume`` continue from it (same config,
    ``options`` and data, else a TsmixError) and end exactly as an uninterrupted fit.
    """
    head = model_head(model)  # read before the engine wraps the model
    bs = cfg.batch_size
    data = WindowBatches(PanelTuples(train), bs, shuffle=True, drop_last=cfg.drop_last and len(train) >= bs)
    opt = tr.make_optimizer(model, cfg)
    schedule = tr.make_schedule(opt, cfg, data.steps_in(0))

    def loss(m: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        y, *inputs = batch  # (B, H, 1), then the model's inputs
        return head.loss(m(*inputs), y)

    def validate(m: nn.Module, rank: int, world: int) -> tuple[torch.Tensor, int]:
        if not isinstance(head, PointHead):
            return head_loss_sum(m, val, cfg.test_batch_size, head, rank, world)
        err = panel_errors(m, val, cfg.test_batch_size, int(val.series.max()) + 1, rank, world, head=head)
        return torch.tensor(err.se.sum(), dtype=torch.float64), int(err.windows.sum()) * err.horizon

    engine = tr.engine_config(cfg, checkpoint_dir, resume)
    if val is None:
        engine = dataclasses.replace(engine, patience=None, restore_best=False)
    # hashing the buffers costs a pass over the data: only when a checkpoint will carry it
    ident = {} if checkpoint_dir is None else panel_fingerprint(cfg, train, val, options or {})
    result = fit(Task(model, opt, data, loss, None if val is None else validate, schedule, ident), engine,
                 device, callbacks)
    if val is None:
        result.best_epoch = len(result.history)  # the weights kept are the last epoch's
    return result
