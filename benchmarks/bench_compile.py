"""Does ``torch.compile`` close the mixers' overhead against softmax? (issue #21)

Each mixer eager and ``torch.compile``-d, forward+backward at one encoder shape, all variants
alternating over the rounds (median of process CPU time, 1 thread); ratios to softmax eager and
to softmax compiled, from the same run. Compilation happens in the untimed warm-up.

    OMP_NUM_THREADS=1 python benchmarks/bench_compile.py --out benchmarks/bench_compile.txt
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

import tsmix


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mixers", default="softmax,fem-sm,fem-aft,gla,linear,nrgpt")
    ap.add_argument("--shape", default="32,7,128,8", help="sequences,tokens,width,heads (the variate shape)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--passes", type=int, default=5, help="fwd+bwd passes per timed unit")
    ap.add_argument("--out", default=None, help="also write the report here (atomically)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    b, n, d, h = (int(v) for v in args.shape.split(","))
    names = [m.strip() for m in args.mixers.split(",") if m.strip()]
    if "softmax" not in names:
        names.insert(0, "softmax")
    torch.manual_seed(0)
    x = torch.randn(b, n, d, requires_grad=True)
    g = torch.randn(b, n, d)
    variants = {}
    for name in names:
        m = tsmix.build_mixer(name, d, heads=h)
        variants[name], variants[f"{name}+compile"] = m, torch.compile(m)
    warm = {}
    for key, m in variants.items():  # compiles here
        t0 = time.perf_counter()
        for _ in range(3):
            m(x).backward(g)
        warm[key] = time.perf_counter() - t0
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(args.rounds):
        for key, m in variants.items():
            t0 = time.process_time()
            for _ in range(args.passes):
                m(x).backward(g)
            times[key].append((time.process_time() - t0) / args.passes)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    given = " ".join(argv if argv is not None else sys.argv[1:])
    lines = [f"# bench_compile: {b} x {n} tokens, D={d}, {h} heads, fwd+bwd, 1 thread, process CPU time, "
             f"median of {args.rounds} alternating rounds; torch {torch.__version__}",
             f"# command: python benchmarks/bench_compile.py {given}", "",
             "| mixer | eager ms | compiled ms | eager x softmax | compiled x compiled softmax | warm-up s |",
             "|---|---:|---:|---:|---:|---:|"]
    for name in names:
        e, c = med[name], med[f"{name}+compile"]
        lines.append(f"| {name} | {e:.2f} | {c:.2f} | {e / med['softmax']:.2f} | "
                     f"{c / med['softmax+compile']:.2f} | {warm[f'{name}+compile']:.0f} |")
    print("\n".join(lines))
    if args.out:
        from tsmix.atomic import write_text_atomic

        write_text_atomic(args.out, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
