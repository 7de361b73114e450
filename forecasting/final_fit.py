"""The final refits: a fixed epoch count on more windows than the selection fit saw.

``train_on="train+val"``: once a study has chosen the settings and the epoch count on validation, the
model it hands on is trained once more on every window before the test rows, for exactly that many
epochs: there is no held-out data left to validate on, so no early stopping and no best-epoch restore.
The scaler stays fit on the training rows (``prepare`` fits it), and the test split is still scored.

``train_on="all"`` (the production refit, ``Forecaster(test_size=0)`` / ``tsmix fit --production``):
every window of the whole series, up to the last row. The scaler is refit on every row
(:func:`scaled_on_all_rows`): nothing is held out, so there is nothing a wider fit could leak into,
and the newest rows' level and spread are exactly what the shipped model forecasts from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from tsmix.engine import Callback, FitResult, Task, WindowBatches, fit
from tsmix.forecasting import trainer as tr
from tsmix.forecasting.config import ForecasterConfig


def train_val_windows(prepared: Any) -> Any:
    """One WindowSet over the rows of train and val together: every training and validation
    window, plus the windows whose target straddles the border."""
    from tsmix.datasets import WindowSet

    t = prepared.train
    return WindowSet(prepared.data, prepared.lookback, prepared.horizon, prepared.features,
                     prepared.target_idx, prepared.borders["train"][0], prepared.borders["val"][1],
                     marks=t.marks)


def all_windows(prepared: Any) -> Any:
    """One WindowSet over every row of the series: all ``T - L - H + 1`` windows, the last ones too."""
    from tsmix.datasets import WindowSet

    return WindowSet(prepared.data, prepared.lookback, prepared.horizon, prepared.features,
                     prepared.target_idx, 0, len(prepared.data), marks=prepared.marks)


def refit_windows(prepared: Any, train_on: str) -> Any:
    """The windows a fixed-epoch refit trains on: ``train+val`` or ``all``."""
    return all_windows(prepared) if train_on == "all" else train_val_windows(prepared)


def scaled_on_all_rows(prepared: Any) -> Any:
    """``prepared`` with its scaler refit on every row and the data and window sets rescaled with it
    (borders unchanged); what ``train_on="all"`` trains and evaluates on."""
    from tsmix.datasets import Scaler

    return scaled_with(prepared, Scaler().fit(prepared.series.values))


def scaled_with(prepared: Any, scaler: Any) -> Any:
    """``prepared`` with its data and window sets rescaled by ``scaler`` (a fitted ``Scaler``)."""
    from tsmix.datasets import WindowSet

    data = torch.from_numpy(np.ascontiguousarray(scaler.transform(prepared.series.values), dtype=np.float32))
    p = prepared
    sets = {k: WindowSet(data, p.lookback, p.horizon, p.features, p.target_idx, *p.borders[k], marks=p.marks)
            for k in ("train", "val", "test")}
    return dataclasses.replace(prepared, scaler=scaler, data=data, **sets)


def train_fixed_epochs(
    model: nn.Module, windows: Any, cfg: ForecasterConfig, device: torch.device, *,
    out_index: int | None = None, callbacks: Sequence[Callback] = (),
    checkpoint_dir: str | Path | None = None, resume: bool = False,
) -> FitResult:
    """Fit ``model`` in place for exactly ``cfg.epochs`` epochs, no validation (``cfg`` resolved).

    The optimizer, schedule, batching, loss and checkpoints are the ones :func:`trainer.train`
    uses; only the validation step, early stopping and the best-weights restore are left out.
    """
    bs = cfg.batch_size
    data = WindowBatches(windows, bs, shuffle=True, drop_last=cfg.drop_last and len(windows) >= bs)
    opt = tr.make_optimizer(model, cfg)
    schedule = tr.make_schedule(opt, cfg, data.steps_in(0))

    loss = tr.head_loss(tr.output_head(model), out_index)
    ident = {} if checkpoint_dir is None else tr.fingerprint(cfg, windows, None, out_index)
    engine = dataclasses.replace(tr.engine_config(cfg, checkpoint_dir, resume), patience=None,
                                 restore_best=False)
    result = fit(Task(model, opt, data, loss, None, schedule, ident), engine, device, callbacks)
    result.best_epoch = len(result.history)  # the weights kept are the last epoch's
    return result
