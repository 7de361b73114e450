"""Forward+backward time of ``yb-spectral`` vs ``softmax`` at equal width, N = 64 … 8192.

Both mixers come from ``tsmix.build_mixer`` with default options; one step is
``mixer(x)`` -> sum of squares -> ``backward()`` (input and parameter gradients). Each
cell is the median of repeated steps after a warm-up, all in one run, so the ratios are
comparable. The spectral mixer is O(N log N · D), softmax attention O(N² · D).

    python benchmarks/bench_yb.py                       # D = 64, batch 1, 1 thread
    python benchmarks/bench_yb.py --dim 128 --threads 2 --lengths 64 1024 4096
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import tsmix


def step_time(mixer: torch.nn.Module, x: torch.Tensor, min_seconds: float, max_reps: int) -> float:
    """Median seconds of one forward+backward, repeated until ``min_seconds`` or ``max_reps``."""

    def step() -> None:
        xi = x.detach().requires_grad_(True)
        mixer(xi).square().sum().backward()
        mixer.zero_grad(set_to_none=True)

    step()  # warm-up: allocations, kernel selection
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max_reps and (len(times) < 3 or time.perf_counter() - start < min_seconds):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 256, 512, 1024, 2048, 4096, 8192])
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--min-seconds", type=float, default=1.0, help="time budget per cell")
    ap.add_argument("--max-reps", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    mixers = {
        name: tsmix.build_mixer(name, args.dim, heads=args.heads) for name in ("softmax", "yb-spectral")
    }
    params = {name: sum(p.numel() for p in m.parameters()) for name, m in mixers.items()}
    print(
        f"# forward+backward, float32, batch {args.batch}, width {args.dim}, heads {args.heads}, "
        f"{args.threads} thread(s), torch {torch.__version__}; params: {params}"
    )
    print("| N | softmax ms | yb-spectral ms | speed-up |")
    print("|---:|---:|---:|---:|")
    for n in args.lengths:
        x = torch.randn(args.batch, n, args.dim)
        t = {name: step_time(m, x, args.min_seconds, args.max_reps) for name, m in mixers.items()}
        ratio = t["softmax"] / t["yb-spectral"]
        print(f"| {n} | {1e3 * t['softmax']:.2f} | {1e3 * t['yb-spectral']:.3f} | {ratio:.1f}x |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
