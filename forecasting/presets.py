"""Named hyper-parameter presets: ``paper`` = the official scripts' settings per dataset.

A preset is a function ``(model, dataset, horizon) -> dict`` of ForecasterConfig fields; the
caller's explicit arguments are applied on top. The mixer is never part of a preset.

Sources: PatchTST ``scripts/PatchTST/*.sh`` + ``run_longExp.py`` defaults, DLinear
``scripts/EXP-LongForecasting/Linear/*.sh`` (LTSF-Linear).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tsmix.errors import TsmixError

DATASETS = ("ETTh1", "ETTh2", "ETTm1", "ETTm2", "Weather")

# The official PatchTST loop builds a OneCycleLR before training even when lradj != 'TST'; its
# constructor sets the lr to max_lr / div_factor (25), and the per-epoch "type3" rule only
# overwrites that after epoch 1. So epoch 1 of every non-one-cycle PatchTST run used lr / 25.
PATCHTST_FIRST_EPOCH_LR_SCALE = 1 / 25

_PATCHTST_COMMON: dict[str, Any] = dict(
    lookback=336, patch_len=16, stride=8, padding_patch="end", layers=3, revin=True, revin_affine=False,
    norm="batch", prenorm=False, ffn="gelu", head_dropout=0.0, batch_size=128, test_batch_size=128,
    lr=1e-4, optimizer="adam", epochs=100, drop_last=True, grad_clip=None,
)
_PATCHTST_SMALL = dict(d_model=16, heads=4, d_ff=128, dropout=0.3)  # ETTh scripts
_PATCHTST_LARGE = dict(d_model=128, heads=16, d_ff=256, dropout=0.2)  # ETTm / Weather scripts
_PATCHTST: dict[str, dict[str, Any]] = {
    "ETTh1": dict(_PATCHTST_SMALL, lr_schedule="type3", patience=100,
                  first_epoch_lr_scale=PATCHTST_FIRST_EPOCH_LR_SCALE),
    "ETTh2": dict(_PATCHTST_SMALL, lr_schedule="type3", patience=100,
                  first_epoch_lr_scale=PATCHTST_FIRST_EPOCH_LR_SCALE),
    "ETTm1": dict(_PATCHTST_LARGE, lr_schedule="onecycle", pct_start=0.4, patience=20),
    "ETTm2": dict(_PATCHTST_LARGE, lr_schedule="onecycle", pct_start=0.4, patience=20),
    "Weather": dict(_PATCHTST_LARGE, lr_schedule="type3", patience=20,
                    first_epoch_lr_scale=PATCHTST_FIRST_EPOCH_LR_SCALE),
}

_DLINEAR_COMMON: dict[str, Any] = dict(
    lookback=336, kernel_size=25, individual=False, epochs=10, patience=3, lr_schedule="type1",
    optimizer="adam", first_epoch_lr_scale=1.0, drop_last=True, grad_clip=None,
)
_DLINEAR_BATCH_LR: dict[str, tuple[int, float]] = {
    "ETTh1": (32, 0.005), "ETTh2": (32, 0.05), "ETTm1": (8, 1e-4), "ETTm2": (32, 0.001),
    "Weather": (16, 1e-4),
}


def canonical_dataset(dataset: str | Path) -> str:
    """Benchmark name for a name or a file path (``.../ETTh1.csv`` -> ``ETTh1``), any case."""
    stem = Path(str(dataset)).stem if str(dataset).lower().endswith((".csv", ".parquet")) else str(dataset)
    for name in DATASETS:
        if stem.lower() == name.lower():
            return name
    raise TsmixError(
        f"no paper preset for dataset {str(dataset)!r}; presets exist for {', '.join(DATASETS)} "
        "(or drop --preset and set the hyper-parameters yourself)"
    )


def paper_preset(model: str, dataset: str | Path, horizon: int) -> dict[str, Any]:
    """The official hyper-parameters of ``model`` on ``dataset`` at ``horizon`` (config fields)."""
    name = canonical_dataset(dataset)
    if model == "patchtst":
        return dict(_PATCHTST_COMMON, **_PATCHTST[name], horizon=horizon)
    if model == "dlinear":
        batch, lr = _DLINEAR_BATCH_LR[name]
        if name == "ETTm2" and horizon in (336, 720):
            lr = 0.01  # the ETTm2 script raises the lr for the two long horizons
        return dict(_DLINEAR_COMMON, batch_size=batch, test_batch_size=batch, lr=lr, horizon=horizon)
    raise TsmixError(
        f"no paper preset for model {model!r}; presets exist for patchtst and dlinear"
    )


PRESETS: dict[str, Callable[[str, str | Path, int], dict[str, Any]]] = {"paper": paper_preset}


def preset_params(preset: str, model: str, dataset: str | Path, horizon: int) -> dict[str, Any]:
    if preset not in PRESETS:
        raise TsmixError(f"unknown preset {preset!r}; available: {', '.join(PRESETS)}")
    return PRESETS[preset](model, dataset, horizon)
