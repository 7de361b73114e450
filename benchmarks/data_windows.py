"""Time and peak memory of loading ETTm1 and building all its training windows, vs the raw array.

    python benchmarks/data_windows.py [--data-dir ../shared/data] [--lookback 336] [--horizon 96]

Windows are views of one (T, C) tensor, so the bytes they hold stay at the raw array's size while
materialized windows would take n_windows * (L + H) * C * 4 bytes. One epoch of ``batches()``
(one gather per batch) is compared with a DataLoader over ``__getitem__`` (per-window slicing).
Peak memory: tracemalloc (Python/numpy allocations) and the process RSS high-water mark (all).
"""

from __future__ import annotations

import argparse
import os
import resource
import time
import tracemalloc

import torch

from tsmix.datasets import WindowSet, load, prepare


def rss_mb() -> float:
    with open("/proc/self/status") as f:  # current resident set (Linux)
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def held_bytes(ws: WindowSet) -> int:
    """Bytes of the distinct storages the window set references (views share their base's)."""
    seen = {}
    for t in vars(ws).values():
        if isinstance(t, torch.Tensor):
            s = t.untyped_storage()
            seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=os.environ.get("TSMIX_DATA_DIR", "../shared/data"))
    ap.add_argument("--lookback", type=int, default=336)
    ap.add_argument("--horizon", type=int, default=96)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    L, H, bs = args.lookback, args.horizon, args.batch_size
    prepare("ETTm1", L, H, data_dir=args.data_dir)  # warm-up: lazy imports (sklearn), file cache

    t0 = time.perf_counter()
    series = load("ETTm1", data_dir=args.data_dir)  # read + validate
    t_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    prep = prepare("ETTm1", L, H, data_dir=args.data_dir)  # read + validate + scale + all windows
    t_prep = time.perf_counter() - t0
    t0 = time.perf_counter()
    WindowSet(prep.data, L, H, start=0, end=prep.borders["train"][1])
    t_win = time.perf_counter() - t0

    rss0 = rss_mb()  # memory in a second pass: tracemalloc slows Python down, so not timed
    tracemalloc.start()
    prep = prepare("ETTm1", L, H, data_dir=args.data_dir)
    _, tm_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_prep = peak_rss_mb() - rss0

    train = prep.train
    raw = series.values.nbytes
    dense = len(train) * (L + H) * train.x_channels * 4  # materialized float32 windows
    print(f"ETTm1 {series.n_rows} x {series.n_channels}, raw array {raw / 2**20:.2f} MiB; "
          f"L={L} H={H}: {len(train)} training windows")
    print(f"load {t_load * 1e3:.0f} ms; prepare (load, scale, 3 window sets) {t_prep * 1e3:.0f} ms; "
          f"training WindowSet alone {t_win * 1e6:.0f} us")
    print(f"bytes held by the training windows: {held_bytes(train) / 2**20:.2f} MiB "
          f"= {held_bytes(train) / raw:.2f} x raw; materialized they would take {dense / 2**20:.0f} MiB "
          f"= {dense / raw:.0f} x raw")
    print(f"peak during prepare: tracemalloc {tm_peak / 2**20:.1f} MiB = {tm_peak / raw:.1f} x raw; "
          f"RSS high-water +{rss_prep:.1f} MiB")
    for rows in (2_000, 10_000, 34_560):
        ws = WindowSet(prep.data, L, H, end=rows)
        print(f"  rows [0, {rows}): {len(ws):6d} windows hold {held_bytes(ws) / 2**20:.2f} MiB")

    rss1 = rss_mb()
    g = torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    n = sum(len(x) for x, _ in train.batches(bs, shuffle=True, generator=g))
    t_fast = time.perf_counter() - t0
    rss_epoch = peak_rss_mb() - rss1
    loader = torch.utils.data.DataLoader(train, batch_size=bs, shuffle=True, generator=torch.Generator())
    t0 = time.perf_counter()
    n_ref = sum(len(x) for x, _ in loader)
    t_ref = time.perf_counter() - t0
    assert n == n_ref == len(train)
    print(f"one epoch, batch {bs}, shuffled: batches() {t_fast:.2f} s, DataLoader(__getitem__) {t_ref:.2f} s "
          f"-> {t_ref / t_fast:.1f}x faster; RSS high-water during the epoch +{max(rss_epoch, 0):.1f} MiB "
          f"(one batch = {bs * (L + H) * train.x_channels * 4 / 2**20:.2f} MiB)")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
