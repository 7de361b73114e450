"""Training-engine options on CPU (issue #21): bf16-mixed vs fp32, torch.compile vs eager, DDP.

    OMP_NUM_THREADS=1 python benchmarks/bench_engine.py --epochs 2 --out benchmarks/bench_engine.txt

Sections (``--parts``, default ``steps mse``):

  steps  training-step time of the patch encoder at the PatchTST paper preset (ETTh1, L=336,
         H=96, batch 128, Adam): fp32 eager, bf16-mixed (the engine's autocast) and fp32
         torch.compile, process CPU time, median over rounds that alternate between the three,
         so the ratios come from one run and machine-load drift hits all alike.
  mse    ETTh1-96 test MSE (fair protocol) of the same preset trained ``--epochs`` epochs from
         the same seed, fp32 eager vs bf16-mixed vs compile (``Forecaster(precision=...,
         compile=...)``), plus each fit's wall time.
  ddp    optimizer steps/s of 1 process x 2 threads vs 2 DDP processes x 1 thread (torchrun,
         gloo), same global batch, on the first ``--rows`` rows. Needs an idle machine: opt in.

The output names the CPU's bf16 support (AVX512-BF16 / AMX-BF16), the torch version, the load
average at the start, the exact command, and a verdict per option.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

from tsmix.atomic import write_text_atomic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_step import _batches, _preset_cfg, _trainer  # noqa: E402  (same model and batches as bench_step)

SEED = 2021


def cpu_bf16_flags() -> list[str]:
    """The CPU's bf16 instruction sets, from /proc/cpuinfo (empty when none or unreadable)."""
    try:
        flags = next((ln.split(":", 1)[1].split() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                      if ln.startswith("flags")), [])
    except OSError:
        return []
    return [f for f in ("avx512_bf16", "amx_bf16") if f in flags]


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


# ----------------------------------------------------------------------------- steps


def _bf16(step: Callable[[], None]) -> Callable[[], None]:
    """The step under the engine's bf16-mixed context (tsmix.engine.loop: torch.autocast, bf16)."""
    def run() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            step()
    return run


def section_steps(args: argparse.Namespace, log: Callable[[str], None]) -> dict[str, float | str]:
    from tsmix.forecasting import build_model

    cfg = _preset_cfg()
    data, batches = _batches(cfg, args.data_dir, 4)
    torch.manual_seed(SEED)
    base = build_model(cfg, data.x_channels)
    fns: dict[str, Callable[[], None]] = {
        "fp32 eager": _trainer(copy.deepcopy(base), batches),
        "bf16-mixed": _bf16(_trainer(copy.deepcopy(base), batches)),
    }
    result: dict[str, float | str] = {}
    try:  # compile happens on the first call; its cost is reported apart from the step time
        compiled = torch.compile(copy.deepcopy(base))
        step = _trainer(compiled, batches)
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        step()  # a second call: recompilation for the train/grad path settles here
        log(f"  compile: first two steps {time.perf_counter() - t0:.1f} s wall, "
            f"{time.process_time() - c0:.1f} s CPU in this process")
        fns["fp32 compile"] = step
    except Exception as exc:  # no compiler, an unsupported op, ...: recorded, not fatal
        msg = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"
        result["fp32 compile"] = f"failed: {msg}"
        log(f"  compile FAILED: {msg}")
        log("    " + "    ".join(traceback.format_exc().splitlines(keepends=True)[-6:]))
    for f in fns.values():  # warm-up (allocator, autocast caches)
        f()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(args.rounds):
        for k, f in fns.items():
            t0 = time.process_time()
            f()
            times[k].append(time.process_time() - t0)
    ref = statistics.median(times["fp32 eager"])
    log(f"## training step, patch encoder, PatchTST paper preset ETTh1 L=336 H=96 batch 128, Adam; "
        f"median process CPU time of {args.rounds} alternating rounds")
    for k, ts in times.items():
        med = statistics.median(ts)
        result[k] = med / ref
        log(f"  {k:13s} {med * 1e3:8.1f} ms/step  {med / ref:5.2f}x fp32 eager  "
            f"(rounds: {', '.join(f'{t * 1e3:.0f}' for t in ts)})")
    return result


# ----------------------------------------------------------------------------- mse


def _fit_preset(args: argparse.Namespace, **engine: object) -> dict[str, float]:
    from tsmix.forecasting import Forecaster

    f = Forecaster.from_preset("paper", "patchtst", "ETTh1", 96, epochs=args.epochs, seed=SEED,
                               progress=False, threads=args.threads, **engine)
    t0, c0 = time.perf_counter(), time.process_time()
    f.fit("ETTh1", data_dir=args.data_dir)
    m = f.metrics_
    hist = f.history
    return {"mse": float(m["mse"]), "mae": float(m["mae"]), "wall_s": time.perf_counter() - t0,
            "cpu_s": time.process_time() - c0, "epochs": len(hist),
            "last_epoch_train_s": float(hist[-1]["train_seconds"]) if hist else float("nan")}


def section_mse(args: argparse.Namespace, log: Callable[[str], None]) -> dict[str, dict | str]:
    log(f"## ETTh1-96 test MSE (fair protocol), PatchTST paper preset, seed {SEED}, "
        f"{args.epochs} epochs each")
    out: dict[str, dict | str] = {}
    for name, knobs in (("fp32 eager", {}), ("bf16-mixed", {"precision": "bf16-mixed"}),
                        ("fp32 compile", {"compile": True})):
        try:
            r = _fit_preset(args, **knobs)
        except Exception as exc:  # compile may fail here too: record it and go on
            out[name] = f"failed: {type(exc).__name__}: {str(exc).strip()[:300]}"
            log(f"  {name:13s} FAILED {out[name]}")
            continue
        out[name] = r
        log(f"  {name:13s} test mse {r['mse']:.4f}  mae {r['mae']:.4f}  fit {r['wall_s']:6.0f} s wall, "
            f"{r['cpu_s']:6.0f} s CPU (incl. compilation and evaluation); last epoch's training "
            f"{r['last_epoch_train_s']:.0f} s wall")
    return out


# ----------------------------------------------------------------------------- ddp


def _ddp_worker(args: argparse.Namespace) -> None:
    """Run under torchrun or alone; rank 0 prints one JSON line."""
    import pandas as pd

    from tsmix.datasets import resolve_path
    from tsmix.forecasting import Forecaster

    torch.set_num_threads(args.threads)
    frame = pd.read_csv(resolve_path("ETTh1", args.data_dir), nrows=args.rows, parse_dates=["date"])
    f = Forecaster.from_preset("paper", "patchtst", "ETTh1", 96, epochs=args.epochs, seed=SEED,
                               progress=False)
    f.fit(frame, date_col="date")
    last = f.history[-1]["train_seconds"]  # the last epoch: after warm-up
    if int(os.environ.get("RANK", "0")) == 0:  # training windows of one epoch over its seconds
        print(json.dumps({"mse": f.metrics_["mse"], "windows_per_s": f.metrics_["train_windows"] / last}),
              flush=True)


def section_ddp(args: argparse.Namespace, log: Callable[[str], None]) -> None:
    def launch(procs: int, threads: int) -> dict:
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        cmd = [__file__, "--worker", "--threads", str(threads), "--epochs", str(args.epochs),
               "--rows", str(args.rows)]
        if args.data_dir:
            cmd += ["--data-dir", args.data_dir]
        run = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={procs}"]
        cmd = [*run, *cmd] if procs > 1 else [sys.executable, *cmd]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
        return json.loads(out.strip().splitlines()[-1])

    one, two = launch(1, 2), launch(2, 1)
    log(f"## DDP, ETTh1 first {args.rows} rows, {args.epochs} epochs")
    log(f"  1 process x 2 threads : {one['windows_per_s']:7.1f} windows/s  test mse {one['mse']:.4f}")
    log(f"  2 DDP procs x 1 thread: {two['windows_per_s']:7.1f} windows/s  test mse {two['mse']:.4f}  "
        f"({two['windows_per_s'] / one['windows_per_s']:.2f}x)")


# ----------------------------------------------------------------------------- main


def verdicts(steps: dict[str, float | str], mse: dict[str, dict | str], tol: float = 0.02) -> list[str]:
    """One line per option: it wins here when its step is faster than fp32 eager (ratio < 1) and its
    test MSE is within ``tol`` (relative) of fp32 eager's; otherwise it stays off by default."""
    lines = []
    ref = mse.get("fp32 eager")
    for name in ("bf16-mixed", "fp32 compile"):
        s, m = steps.get(name), mse.get(name)
        if isinstance(s, str) or isinstance(m, str):
            lines.append(f"- {name}: does not run here ({s if isinstance(s, str) else m}); not a win.")
            continue
        faster = isinstance(s, float) and s < 1.0
        same = isinstance(m, dict) and isinstance(ref, dict) and abs(m["mse"] / ref["mse"] - 1) <= tol
        parts = [f"step {s:.2f}x fp32 eager" if isinstance(s, float) else "step not measured"]
        if isinstance(m, dict) and isinstance(ref, dict):
            parts.append(f"test MSE {m['mse']:.4f} vs {ref['mse']:.4f} ({m['mse'] / ref['mse'] - 1:+.1%})")
        win = faster and (same or m is None)
        lines.append(f"- {name}: {'; '.join(parts)} -> {'WINS here' if win else 'does not win here'}"
                     + ("" if win else (" (slower)" if not faster else " (MSE differs)")) + ".")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", nargs="+", default=["steps", "mse"], choices=["steps", "mse", "ddp"])
    ap.add_argument("--epochs", type=int, default=2, help="epochs per fit (mse, ddp)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds (steps)")
    ap.add_argument("--rows", type=int, default=4000, help="ddp: ETTh1 rows (a 70/10/20 split of them)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data-dir", default=os.environ.get("TSMIX_DATA_DIR"))
    ap.add_argument("--out", default=None, help="also write the output to this file (atomically)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return _ddp_worker(args)
    torch.set_num_threads(args.threads)
    lines: list[str] = []

    def log(s: str) -> None:
        print(s, flush=True)
        lines.append(s)

    flags = cpu_bf16_flags()
    log("# bench_engine: bf16-mixed and torch.compile vs fp32 eager on CPU (issue #21)")
    log(f"command: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '?')} python "
        + shlex.join(["benchmarks/bench_engine.py", *sys.argv[1:]]))
    bf16 = ", ".join(flags) if flags else "none (neither avx512_bf16 nor amx_bf16)"
    log(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), load average at start "
        f"{_loadavg()}, {os.cpu_count()} CPUs; CPU bf16 support (/proc/cpuinfo): {bf16}")
    t0 = time.perf_counter()
    steps: dict[str, float | str] = {}
    mse: dict[str, dict | str] = {}
    if "steps" in args.parts:
        steps = section_steps(args, log)
    if "mse" in args.parts:
        mse = section_mse(args, log)
    if "ddp" in args.parts:
        section_ddp(args, log)
    if steps or mse:
        log("## verdict (a win: faster step and test MSE within 2% of fp32 eager)")
        for ln in verdicts(steps, mse):
            log(ln)
    log(f"{time.perf_counter() - t0:.0f} s in all; load average at the end {_loadavg()}")
    if args.out:
        out = Path(args.out)
        write_text_atomic(out, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
