"""Subprocess / torchrun target of the engine tests: one small Forecaster fit on an ETTh1 slice.

    python run_fit.py OUT.json MODEL[,MODEL...] [--ckpt DIR] [--resume] [--epochs N]

Prints ``epoch N`` (flushed) after every epoch; rank 0 writes OUT.json, ``{model: summary}`` with
the exact metrics, history and final weights of each fit (checkpoints in DIR/MODEL, through
``Forecaster.fit(checkpoint_dir=..., resume=...)``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path

import pandas as pd
import torch

MODELS = {
    # dropout + batch norm + type3 with the first-epoch quirk: every kind of state a resume must restore
    "patchtst": dict(model="patchtst", d_model=16, heads=2, layers=1, d_ff=32, patch_len=16, stride=8,
                     dropout=0.3, lr=1e-3, lr_schedule="type3", first_epoch_lr_scale=1 / 25),
    # a per-step scheduler (OneCycleLR) and gradient clipping
    "dlinear": dict(model="dlinear", lr=5e-3, lr_schedule="onecycle", grad_clip=1.0),
    # DDP comparisons: no dropout, layer norm (per-rank batch statistics would change the math)
    "patch-ddp": dict(model="patchtst", d_model=16, heads=2, layers=1, d_ff=32, patch_len=16, stride=8,
                      dropout=0.0, norm="layer", lr=1e-3, lr_schedule="type1"),
}


def weights_hash(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def fit_summary(model: str, ckpt: str | None = None, resume: bool = False, epochs: int = 4,
                rows: int = 1200) -> dict:
    """Fit, then the exact metrics, history (train/val loss, lr per epoch) and weights."""
    from tsmix.forecasting import Forecaster

    data = Path(os.environ["TSMIX_DATA_DIR"]) / "ETT-small" / "ETTh1.csv"
    frame = pd.read_csv(data, nrows=rows, parse_dates=["date"])

    def announce(epoch: int, logs: dict) -> None:
        print(f"epoch {epoch}", flush=True)

    f = Forecaster(lookback=96, horizon=24, epochs=epochs, batch_size=64, seed=11, progress=False,
                   patience=10, **MODELS[model])
    f.fit(frame, callbacks=[announce], checkpoint_dir=ckpt, resume=resume)
    m = f.metrics_
    out = {k: m[k] for k in ("mse", "mae", "val_mse", "epochs", "best_epoch")}
    out["history"] = [[r["epoch"], r["train_loss"], r["val_loss"], r["lr"]] for r in f.history]
    out["weights"] = weights_hash(f.model_)
    out["state"] = {k: v.detach().cpu().double().flatten().tolist() for k, v in f.model_.state_dict().items()
                    if v.is_floating_point()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("models", help=f"comma-separated, from {sorted(MODELS)}")
    ap.add_argument("--ckpt")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--rows", type=int, default=1200)
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = {m: fit_summary(m, args.ckpt and str(Path(args.ckpt) / m), args.resume, args.epochs, args.rows)
           for m in args.models.split(",")}
    if int(os.environ.get("RANK", "0")) == 0:  # one output per job: rank 0's
        Path(args.out).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
