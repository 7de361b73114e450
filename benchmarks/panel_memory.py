"""Build time and memory of a ragged long-format panel: windows are views, memory follows the rows.

    python benchmarks/panel_memory.py [--series 2000] [--lookback 72] [--horizon 24] [--seed 0]

A generated hourly panel (``synthetic_panel``: lengths 200..2,000, random starts, daily + weekly
seasonality, trend, noise, a past-only and a future-known covariate, static attributes) is built from a long
pandas frame, split per series (val/test = the last 2 horizons) and windowed. Printed: rows, windows,
the bytes the window sets hold vs the raw values and vs materialized windows, build seconds, and one
shuffled training epoch of ``batches()``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
import torch

from tsmix.datasets.panel import Panel
from tsmix.datasets.panel_prepare import prepare_panel
from tsmix.datasets.panel_split import PanelSplit
from tsmix.datasets.panel_synthetic import synthetic_panel


def generate(n_series: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(long frame, static frame) of a ragged hourly panel, rows shuffled (the build sorts them)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(200, 2001, n_series)
    starts = rng.integers(0, 24 * 365, n_series)  # ragged starts and ends over a year
    long, static = synthetic_panel(lengths, starts, freq="h", seed=seed)
    return long.sample(frac=1.0, random_state=seed), static


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--series", type=int, default=2000)
    ap.add_argument("--lookback", type=int, default=72)
    ap.add_argument("--horizon", type=int, default=24)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    L, H = args.lookback, args.horizon
    df, static = generate(args.series, args.seed)
    split = PanelSplit(val_size=2 * H, test_size=2 * H)
    few = df[df["unique_id"].isin(static["unique_id"].head(20))]
    prepare_panel(Panel.from_long(few, hist_exog=["load"], futr_exog=["promo"]), L, H, split,
                  drop_short=True)  # warm-up: lazy imports (sklearn), first-call costs

    t0 = time.perf_counter()
    panel = Panel.from_long(df, hist_exog=["load"], futr_exog=["promo"], static_df=static,
                            static_categorical=["region"])
    t_read = time.perf_counter() - t0
    t0 = time.perf_counter()
    prep = prepare_panel(panel, L, H, split)
    t_prep = time.perf_counter() - t0

    n_rows = panel.n_rows
    raw = panel.target.nbytes + panel.hist.nbytes + panel.futr.nbytes  # float32 values as read
    t = prep.tensors
    buffers = sum(x.untyped_storage().nbytes() for x in (t.y, t.hist, t.futr, t.stamps))
    windows = {k: len(prep.split(k)) for k in ("train", "val", "test")}
    held = prep.train.held_bytes()
    cf = t.futr.shape[1]
    dense = windows["train"] * ((L + H) * 4 + L * t.hist.shape[1] * 4 + (L + H) * cf * 4)
    lens = panel.lengths
    print(f"panel: {panel.n_series} series, lengths {lens.min()}..{lens.max()}, {n_rows} rows, "
          f"freq {panel.freq}, hist 1, futr 1 + {len(prep.schema.calendar)} calendar, static 1 numeric + "
          f"1 categorical")
    print(f"windows L={L} H={H}: train {windows['train']}, val {windows['val']}, test {windows['test']}")
    print(f"raw values (y + covariates, float32): {raw / 2**20:.2f} MiB; scaled buffers + stamps: "
          f"{buffers / 2**20:.2f} MiB ({buffers / n_rows:.0f} bytes per row: y, hist, futr, calendar, stamp)")
    print(f"bytes held by the training windows: {held / 2**20:.2f} MiB = {held / buffers:.2f} x the buffers "
          f"= {held / raw:.2f} x raw values; "
          f"as copies (x, y, hist, futr) they would take {dense / 2**20:.0f} MiB = {dense / raw:.0f} x raw")
    print(f"build: read + validate + sort {t_read:.2f} s, split + scale + windows {t_prep:.2f} s, "
          f"total {t_read + t_prep:.2f} s")
    g = torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    n = sum(len(b.x) for b in prep.train.batches(args.batch_size, shuffle=True, generator=g))
    t_epoch = time.perf_counter() - t0
    assert n == windows["train"]
    print(f"one shuffled training epoch, batches({args.batch_size}), gather only (no model): {t_epoch:.2f} s")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
