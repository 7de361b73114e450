"""Training-engine speed on CPU: threads vs DDP processes, bf16-mixed vs fp32, compile vs eager.

    python benchmarks/bench_engine.py [--epochs 2] [--rows 4000]

Prints, in one run: optimizer steps/s of 1 process x 2 threads vs 2 DDP processes x 1 thread
(torchrun, gloo) with the same global batch; step time and ETTh1 test MSE of a patch encoder in
fp32 vs bf16-mixed; step time of eager vs torch.compile. Times are the last epoch's (after
compilation and warm-up), so use --epochs >= 2. CPU heavy: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import torch

PATCH = dict(model="patchtst", lookback=336, horizon=96, d_model=16, heads=4, layers=3, d_ff=128, dropout=0.3,
             batch_size=128, lr=1e-4, lr_schedule="type3", progress=False, seed=2021)


def fit(frame: pd.DataFrame, epochs: int, **engine: object) -> dict:
    """One Forecaster fit with engine knobs (precision, compile, ...) applied to its EngineConfig."""
    from tsmix.forecasting import Forecaster
    from tsmix.forecasting import trainer as tr

    original, seen = tr.fit, {}

    def engine_fit(task, cfg, device, callbacks):
        seen["result"] = original(task, dataclasses.replace(cfg, **engine), device, callbacks)
        return seen["result"]

    tr.fit = engine_fit  # until ForecasterConfig carries precision / compile (then pass them directly)
    try:
        f = Forecaster(epochs=epochs, **PATCH).fit(frame)
    finally:
        tr.fit = original
    res = seen["result"]
    per_epoch = res.steps / len(res.history)
    last = res.history[-1]["train_seconds"]  # the last epoch: after compilation / warm-up
    return {"mse": f.metrics_["mse"], "step_ms": 1000 * last / per_epoch, "steps_per_s": per_epoch / last}


def worker(args: argparse.Namespace) -> None:
    """Run under torchrun or alone; rank 0 prints one JSON line."""
    torch.set_num_threads(args.threads)
    frame = pd.read_csv(Path(os.environ["TSMIX_DATA_DIR"]) / "ETT-small" / "ETTh1.csv", nrows=args.rows,
                        parse_dates=["date"])
    r = fit(frame, args.epochs)
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps(r), flush=True)


def run_worker(args: argparse.Namespace, procs: int, threads: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    cmd = [sys.executable, __file__, "--worker", "--threads", str(threads), "--epochs", str(args.epochs),
           "--rows", str(args.rows)]
    if procs > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={procs}",
               *cmd[1:]]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--rows", type=int, default=4000, help="ETTh1 rows (a 70/10/20 split of them)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    os.environ.setdefault("TSMIX_DATA_DIR", str(Path.home() / ".cache" / "tsmix"))
    print(f"patch encoder (PatchTST ETTh recipe), ETTh1 first {args.rows} rows, {args.epochs} epochs, "
          f"global batch {PATCH['batch_size']}, torch {torch.__version__}")
    one = run_worker(args, 1, 2)
    two = run_worker(args, 2, 1)
    print(f"1 process x 2 threads : {one['steps_per_s']:7.2f} steps/s  test mse {one['mse']:.4f}")
    print(f"2 DDP procs x 1 thread: {two['steps_per_s']:7.2f} steps/s  test mse {two['mse']:.4f}  "
          f"({two['steps_per_s'] / one['steps_per_s']:.2f}x)")
    torch.set_num_threads(2)
    frame = pd.read_csv(Path(os.environ["TSMIX_DATA_DIR"]) / "ETT-small" / "ETTh1.csv", nrows=args.rows,
                        parse_dates=["date"])
    for name, knobs in (("fp32 eager", {}), ("bf16-mixed", {"precision": "bf16-mixed"}),
                        ("fp32 compile", {"compile": True})):
        t0 = time.perf_counter()
        r = fit(frame, args.epochs, **knobs)
        print(f"{name:<13}: {r['step_ms']:7.1f} ms/step  test mse {r['mse']:.4f}  "
              f"(fit wall {time.perf_counter() - t0:.1f}s incl. compilation)")


if __name__ == "__main__":
    main()
