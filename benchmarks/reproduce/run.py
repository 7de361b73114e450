"""Reproduce the published DLinear and PatchTST (softmax mixer) numbers with the paper presets.

Every (model, dataset, horizon, seed) is trained once with ``Forecaster.from_preset("paper", ...)``
and scored under BOTH evaluation protocols from the same trained weights:

* ``fair``: every test window (the default everywhere in tsmix);
* ``paper``: the official test loader's ``drop_last`` at the official test batch size (128 for
  PatchTST, the training batch size for DLinear), which is what the published tables used.

One CSV row is appended per finished run (flushed), so the script is resumable: rerunning it
skips the runs already in the CSV with the same recipe key. Runs go seed-major, so a first
complete table (one seed) exists early. With ``--checkpoints DIR`` a run also keeps its epochs:
it checkpoints after every epoch into a folder of its own under DIR, a rerun continues a killed
run from its last epoch (ending exactly as an uninterrupted run would, CPU time of the killed
processes counted), and the folder is removed once the row is written.

    OMP_NUM_THREADS=1 nohup python benchmarks/reproduce/run.py --models dlinear,patchtst \\
        --data-dir ../shared/data > benchmarks/reproduce/run.log 2>&1 &
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from tsmix.forecasting.benchmark.runner import checkpoint_epoch
from tsmix.provenance import git_commit

HERE = Path(__file__).resolve().parent
FIELDS = [
    "dataset", "horizon", "lookback", "model", "mixer", "seed", "patience", "epochs_max",
    "mse", "mae", "mse_paper", "mae_paper", "windows", "windows_paper", "test_batch_size",
    "val_mse", "epochs", "best_epoch", "train_seconds", "seconds_per_epoch", "fit_seconds", "params",
    "device", "threads", "torch", "commit", "host", "finished_at", "cpu_seconds",
]
KEY = ("dataset", "horizon", "lookback", "model", "mixer", "seed", "patience", "epochs_max")


def mixer_label(mixer: str, options: dict) -> str:
    """The row's mixer column: the name, plus the options given on the command line, e.g.
    ``nrgpt[steps=1]`` (so a variant is its own key and its own table section)."""
    return mixer + ("[" + ",".join(f"{k}={v}" for k, v in sorted(options.items())) + "]" if options else "")


def checkpoint_folder(root: str | Path, key: tuple) -> Path:
    """The checkpoint folder of the run with row key ``key`` under ``root``: one per key, so another
    recipe never continues this one's weights (the fit refuses a checkpoint of another config too)."""
    name = re.sub(r"[^A-Za-z0-9._=-]", "_", "-".join(f"{k}={v}" for k, v in zip(KEY, key)))
    return Path(root).expanduser() / "reproduce" / name


def run_one(model: str, dataset: str, horizon: int, seed: int, mixer: str, patience: int | None,
            epochs: int | None, threads: int, data_dir: str | None, lookback: int | None = None,
            mixer_options: dict | None = None, checkpoint_dir: Path | None = None,
            callbacks: tuple = ()) -> dict:
    """Train and score one run; its result row. ``checkpoint_dir``: checkpoint there after every
    epoch and continue from the checkpoint already there (same recipe only, else a TsmixError);
    ``callbacks``: extra per-epoch callbacks (``fn(epoch, logs)``) after the log line."""
    from tsmix.forecasting import Forecaster

    overrides = dict(seed=seed, threads=threads, progress=False)
    if model != "dlinear":
        overrides["mixer"] = mixer
        if mixer_options:
            overrides["mixer_options"] = dict(mixer_options)
    if patience is not None:
        overrides["patience"] = patience
    if epochs is not None:
        overrides["epochs"] = epochs
    if lookback is not None:
        overrides["lookback"] = lookback
    f = Forecaster.from_preset("paper", model, dataset, horizon, **overrides)

    def log_epoch(epoch: int, logs: dict) -> None:  # one line per epoch in the run log
        if model != "dlinear":
            print(f"    epoch {epoch:3d} train {logs['train_loss']:.4f} val {logs['val_loss']:.4f} "
                  f"lr {logs['lr']:.2e} {logs['train_seconds']:.1f}s", flush=True)

    t0, c0 = time.perf_counter(), time.process_time()
    ck = {} if checkpoint_dir is None else dict(checkpoint_dir=checkpoint_dir, resume=True)
    f.fit(dataset, data_dir=data_dir, callbacks=[log_epoch, *callbacks], **ck)
    fit_seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    # a resumed fit: the killed processes' CPU time up to their last checkpoint counts too
    cpu_seconds += float(f.metrics_.get("resumed_cpu_seconds") or 0.0)
    fair = f.evaluate("test", protocol="fair")
    paper = f.evaluate("test", protocol="paper")
    m, cfg = f.metrics_, f.config.resolved()
    return {
        "dataset": dataset, "horizon": horizon, "lookback": cfg.lookback, "model": model,
        "mixer": mixer_label(cfg.mixer, cfg.mixer_options) if model != "dlinear" else "-", "seed": seed,
        "patience": cfg.patience,
        "epochs_max": cfg.epochs, "mse": fair["mse"], "mae": fair["mae"], "mse_paper": paper["mse"],
        "mae_paper": paper["mae"], "windows": fair["windows"], "windows_paper": paper["windows"],
        "test_batch_size": cfg.test_batch_size, "val_mse": m["val_mse"], "epochs": m["epochs"],
        "best_epoch": m["best_epoch"], "train_seconds": round(m["train_seconds"], 2),
        "seconds_per_epoch": round(m["seconds_per_epoch"], 3), "fit_seconds": round(fit_seconds, 2),
        "params": m["params"], "device": m["device"], "threads": torch.get_num_threads(),
        "torch": torch.__version__, "commit": git_commit(), "host": platform.node(),
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        # the cost on a shared machine: process CPU time of the fit (wall time counts the other jobs)
        "cpu_seconds": round(cpu_seconds, 2),
    }


def main(argv: list[str] | None = None) -> int:
    from tsmix.engine.memory import retain_unless_disabled
    from tsmix.forecasting.benchmark.store import append_csv, csv_keys

    retain_unless_disabled()  # as the tsmix command does: no page faults per step (TSMIX_MALLOC)

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="dlinear,patchtst")
    ap.add_argument("--datasets", default="ETTh1,ETTh2")
    ap.add_argument("--horizons", default="96,192,336,720")
    ap.add_argument("--seeds", default="2021,2022,2023")
    ap.add_argument("--mixer", default="softmax", help="token mixer of PatchTST")
    ap.add_argument("--mixer-option", action="append", default=[], metavar="K=V",
                    help="a mixer option (repeatable), typed by the mixer's options dataclass; the rows' "
                         "mixer column names it, e.g. nrgpt[steps=1]")
    ap.add_argument("--patchtst-patience", type=int, default=10,
                    help="early-stopping patience for PatchTST (the ETTh scripts use 100)")
    ap.add_argument("--epochs", type=int, default=None, help="override the preset's max epochs")
    ap.add_argument("--lookback", type=int, default=None,
                    help="override the preset's lookback L (the long-lookback study; default: the preset's)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data-dir", default=os.environ.get("TSMIX_DATA_DIR"))
    ap.add_argument("--out", default=str(HERE / "results.csv"))
    ap.add_argument("--checkpoints", default=None, metavar="DIR",
                    help="checkpoint every run after each epoch under DIR (a folder per run) and continue "
                         "a killed run from there; a run's folder is removed once its row is written")
    args = ap.parse_args(argv)
    from tsmix.errors import TsmixError
    from tsmix.registry import parse_mixer_options

    try:  # a bad name or value is a usage error: argparse's one line, not a traceback
        options = parse_mixer_options(args.mixer, args.mixer_option) if args.mixer_option else {}
    except TsmixError as err:
        ap.error(f"--mixer-option: {err}")
    if args.checkpoints is not None:  # an unusable folder (a file, no permission) fails now, not mid-grid
        try:
            Path(args.checkpoints).expanduser().mkdir(parents=True, exist_ok=True)
        except OSError as err:
            ap.error(f"--checkpoints: cannot use {args.checkpoints} as the checkpoint folder ({err}); "
                     "give a folder that exists or can be created")
    out = Path(args.out)
    done = csv_keys(out, KEY)
    seeds = [int(s) for s in args.seeds.split(",")]
    horizons = [int(h) for h in args.horizons.split(",")]
    for model in args.models.split(","):
        patience = args.patchtst_patience if model == "patchtst" else None
        for seed in seeds:  # seed-major: one complete seed first
            for dataset in args.datasets.split(","):
                for horizon in horizons:
                    from tsmix.forecasting.presets import paper_preset

                    preset = paper_preset(model, dataset, horizon)
                    lookback = args.lookback if args.lookback is not None else preset["lookback"]
                    mixer = mixer_label(args.mixer, options) if model != "dlinear" else "-"
                    key = (dataset, str(horizon), str(lookback), model, mixer, str(seed),
                           str(patience if patience is not None else preset["patience"]),
                           str(args.epochs if args.epochs is not None else preset["epochs"]))
                    if key in done:
                        continue
                    label = f"{model} {dataset} L={lookback} H={horizon} seed={seed}"
                    folder = None if args.checkpoints is None else checkpoint_folder(args.checkpoints, key)
                    done_at = None if folder is None else checkpoint_epoch(folder)
                    at = f" (resuming after epoch {done_at[0]} from {folder})" if done_at else ""
                    print(f"[{datetime.now():%H:%M:%S}] start {label}{at}", flush=True)
                    row = run_one(model, dataset, horizon, seed, args.mixer, patience, args.epochs,
                                  args.threads, args.data_dir, args.lookback, options, checkpoint_dir=folder)
                    append_csv(out, FIELDS, [row])
                    done.add(key)
                    if folder is not None:  # the row holds the result now: the weights are not needed
                        shutil.rmtree(folder, ignore_errors=True)
                    print(f"[{datetime.now():%H:%M:%S}] done  {label}: fair mse {row['mse']:.4f} "
                          f"mae {row['mae']:.4f} | paper mse {row['mse_paper']:.4f} "
                          f"mae {row['mae_paper']:.4f} | epochs {row['epochs']} (best {row['best_epoch']}) "
                          f"{row['seconds_per_epoch']:.1f}s/epoch", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
