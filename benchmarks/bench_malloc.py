"""Where the step time goes with glibc's malloc as it comes vs with freed memory kept (issue #21).

One training step of the patch encoder (paper preset of ``--dataset``, batch ``--batch``) per
lookback, in a fresh process per malloc mode (the setting is process-wide and not undone):
user and system CPU seconds and minor page faults per step (``getrusage``, the mean of
``--steps`` steps after two warm-up steps). ``retain`` is what the tsmix command runs
(``tsmix.engine.memory``); ``default`` is glibc untouched.

    OMP_NUM_THREADS=1 python benchmarks/bench_malloc.py --out benchmarks/bench_malloc.txt
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def measure(mode: str, dataset: str, mixer: str, lookback: int, batch: int, steps: int) -> dict:
    """In this process: one (mode, lookback) cell -> user/system seconds and faults per step."""
    import torch

    sys.path.insert(0, str(HERE))
    import bench_step as bs  # the lookback section's model and batches, so both measure the same

    from tsmix.engine.memory import retain_freed_memory
    from tsmix.forecasting import build_model

    if mode == "retain":
        retain_freed_memory()
    torch.set_num_threads(1)
    cfg = dataclasses.replace(bs._preset_cfg(lookback=lookback, dataset=dataset), batch_size=batch)
    data, batches = bs._batches(cfg, None, 2, dataset)
    torch.manual_seed(0)
    step = bs._trainer(build_model(bs._preset_cfg(mixer=mixer, lookback=lookback, dataset=dataset),
                                   data.x_channels), batches)
    step()
    step()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(steps):
        step()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    return {"user": (r1.ru_utime - r0.ru_utime) / steps, "sys": (r1.ru_stime - r0.ru_stime) / steps,
            "faults": (r1.ru_minflt - r0.ru_minflt) / steps}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="ETTm1")
    ap.add_argument("--mixer", default="yb-spectral")
    ap.add_argument("--lookbacks", type=int, nargs="*", default=[336, 1440, 2880])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", default=None, help="also write the report here (atomically)")
    ap.add_argument("--cell", default=None, help=argparse.SUPPRESS)  # internal: one cell, JSON out
    args = ap.parse_args(argv)
    if args.cell:
        mode, lookback = args.cell.split(":")
        print(json.dumps(measure(mode, args.dataset, args.mixer, int(lookback), args.batch, args.steps)))
        return 0
    given = " ".join(argv if argv is not None else sys.argv[1:])
    lines = [f"# bench_malloc: {args.dataset} patch encoder paper preset, mixer {args.mixer}, batch "
             f"{args.batch}, 1 thread, mean of {args.steps} steps after 2 warm-up steps, a fresh "
             "process per cell",
             f"# command: python benchmarks/bench_malloc.py {given}", "",
             "| L | malloc | user s/step | system s/step | total | minor faults/step |",
             "|---:|---|---:|---:|---:|---:|"]
    print("\n".join(lines), flush=True)
    for lookback in args.lookbacks:
        for mode in ("default", "retain"):
            cmd = [sys.executable, __file__, "--cell", f"{mode}:{lookback}", "--dataset", args.dataset,
                   "--mixer", args.mixer, "--batch", str(args.batch), "--steps", str(args.steps)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=dict(os.environ))
            r = json.loads(out.stdout.strip().splitlines()[-1])
            line = (f"| {lookback} | {mode} | {r['user']:.2f} | {r['sys']:.2f} | {r['user'] + r['sys']:.2f} "
                    f"| {r['faults']:,.0f} |")
            print(line, flush=True)
            lines.append(line)
    if args.out:
        from tsmix.atomic import write_text_atomic

        write_text_atomic(args.out, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
