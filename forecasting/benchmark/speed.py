"""Speed suite: forward+backward time and peak memory of every registered mixer vs length and width.

For each width D and length N (ascending), every mixer is measured in turn (interleaved, so a
change of machine load hits all mixers of one (N, D) cell alike) on a (batch, N, D) input:
median time of ``reps`` forward+backward passes after a warm-up (CPU: process CPU time, so
other jobs on a shared machine do not inflate it; CUDA: synchronised wall time), the peak of live
allocator memory during one pass (CUDA: ``max_memory_allocated``; CPU: the profiler's
allocation timeline). Ratios to softmax come from the same cell of the same run. The scaling
exponent is the least-squares slope of log time (and log memory) vs log N over N >= 256; the
"tail" exponent is the slope between the two largest measured N (the asymptotic regime).

A cell is skipped, and the output says so, when the extrapolation from the mixer's two
largest measured lengths predicts more than ``time_budget_s`` per pass or more than
``mem_budget_mb`` (the machine this runs on is shared; long cells would not finish), and
every larger N of that mixer and width is then skipped as well.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import torch

from tsmix.errors import TsmixError
from tsmix.provenance import git_commit

from .speed_cells import (
    DEFAULT_LENGTHS,
    DEFAULT_WIDTHS,
    FIT_MIN_LENGTH,
    Cell,
    SpeedConfig,
    exponents,
    fit_exponent,
    ratios,
)
from .speed_report import load_speed_json, plot_speed, render_speed_markdown, save_speed_json, write_speed
from .speed_timing import build, device_of, measure


def _predict(points: list[tuple[int, float]], n: int) -> float | None:
    """Extrapolate a cost to length n from the two largest measured lengths (power law)."""
    if not points:
        return None
    if len(points) == 1:
        n0, c0 = points[-1]
        return c0 * (n / n0) ** 2  # assume the worst common case (quadratic) from one point
    (n0, c0), (n1, c1) = points[-2], points[-1]
    if c0 <= 0 or c1 <= 0:
        return c1
    slope = max(1.0, math.log(c1 / c0) / math.log(n1 / n0))
    return c1 * (n / n1) ** slope


def run_speed(cfg: SpeedConfig | None = None, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Measure every (mixer, width, length) cell (default config: ``SpeedConfig()``); returns cells,
    exponents and run metadata."""
    cfg = SpeedConfig() if cfg is None else cfg
    from tsmix import available_mixers

    registered = available_mixers()
    mixers = list(cfg.mixers or registered)
    bad = [m for m in mixers if m not in registered]
    if bad:
        raise TsmixError(f"unknown mixer(s) {', '.join(bad)}; registered: {', '.join(registered)}")
    if "softmax" in registered and "softmax" not in mixers:
        mixers.insert(0, "softmax")  # ratios need the reference in the same run
    dev = device_of(cfg.device)
    cells: list[Cell] = []
    t_start = time.perf_counter()
    for width in cfg.widths:
        if width % cfg.heads:
            raise TsmixError(f"width {width} is not divisible by heads {cfg.heads}; pick widths that are")
        modules: dict[str, torch.nn.Module | str] = {}
        for name in mixers:
            try:
                modules[name] = build(name, width, cfg, dev)
            except Exception as exc:  # a mixer that cannot be built at this width is reported
                modules[name] = f"error: {type(exc).__name__}: {exc}"
        time_pts: dict[str, list[tuple[int, float]]] = {m: [] for m in mixers}
        mem_pts: dict[str, list[tuple[int, float]]] = {m: [] for m in mixers}
        stopped: dict[str, str] = {}
        for n in sorted(cfg.lengths):
            gen = torch.Generator().manual_seed(cfg.seed + n)
            x0 = torch.randn(cfg.batch, n, width, generator=gen)
            g = torch.randn(cfg.batch, n, width, generator=gen).to(dev)
            for name in mixers:
                cell = Cell(name, width, n)
                mod = modules[name]
                if isinstance(mod, str):
                    cell.status = mod
                elif name in stopped:
                    cell.status = stopped[name]
                else:
                    pt = _predict(time_pts[name], n)
                    pm = _predict(mem_pts[name], n) if cfg.memory else None
                    if pt is not None and pt / 1e3 > cfg.time_budget_s:
                        stopped[name] = (f"skipped: predicted {pt / 1e3:.1f}s per pass > "
                                         f"{cfg.time_budget_s:g}s budget at N={n}")
                        cell.status = stopped[name]
                    elif pm is not None and pm > cfg.mem_budget_mb:
                        stopped[name] = (f"skipped: predicted {pm:.0f} MiB > {cfg.mem_budget_mb:g} MiB "
                                         f"budget at N={n}")
                        cell.status = stopped[name]
                    else:
                        measure(cell, mod, x0, g, cfg, dev)
                        if cell.status == "ok":
                            time_pts[name].append((n, cell.ms))
                            if cell.peak_mb is not None:
                                mem_pts[name].append((n, max(cell.peak_mb, 1e-3)))
                        else:
                            stopped[name] = cell.status
                cells.append(cell)
                log(_cell_line(cell))
    return {"cells": cells, "exponents": exponents(cells, mixers, cfg.widths), "mixers": mixers,
            "config": asdict(cfg), "device": dev.type, "torch": torch.__version__,
            "threads": torch.get_num_threads(), "seconds": time.perf_counter() - t_start, "load": _loadavg(),
            "commit": git_commit()}


def _cell_line(c: Cell) -> str:
    if c.status != "ok":
        return f"{c.mixer:>14} D={c.width:<4} N={c.length:<5} {c.status}"
    mem = f" peak {c.peak_mb:8.1f} MiB" if c.peak_mb is not None else ""
    return f"{c.mixer:>14} D={c.width:<4} N={c.length:<5} {c.ms:10.2f} ms{mem}"


def _loadavg() -> str:
    try:
        with open("/proc/loadavg") as fh:
            return " ".join(fh.read().split()[:3])
    except OSError:
        return "n/a"


__all__ = ["DEFAULT_LENGTHS", "DEFAULT_WIDTHS", "FIT_MIN_LENGTH", "Cell", "SpeedConfig", "exponents",
           "fit_exponent", "load_speed_json", "plot_speed", "ratios", "render_speed_markdown", "run_speed",
           "save_speed_json", "write_speed"]
