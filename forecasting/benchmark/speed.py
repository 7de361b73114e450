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

``run_shapes`` (``tsmix benchmark-speed --shapes patch variate``) times the shapes the encoders
really use instead (``SHAPES``: PatchTST's B·7 sequences of 42 patches at D=16, iTransformer's B
sequences of 7 or 21 variate tokens at D=128), batch as an axis, the mixers of one cell alternating
round by round; its report (speed_shapes.*) marks the issue #21 targets met / not met.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import torch

from tsmix.errors import TsmixError
from tsmix.provenance import git_commit, processor

from .speed_cells import (
    DEFAULT_LENGTHS,
    DEFAULT_WIDTHS,
    FIT_MIN_LENGTH,
    SHAPES,
    Cell,
    ShapeCell,
    ShapesConfig,
    SpeedConfig,
    exponents,
    fit_exponent,
    ratios,
)
from .speed_report import (
    load_shapes_json,
    load_speed_json,
    plot_speed,
    render_shapes_markdown,
    render_speed_markdown,
    save_speed_json,
    write_shapes,
    write_speed,
)
from .speed_timing import alternate, build, device_of, fwd_bwd, measure


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


def _mixer_names(wanted: tuple[str, ...] | None) -> list[str]:
    """The mixers to measure, softmax first (every ratio needs it in the same run)."""
    from tsmix import available_mixers

    registered = available_mixers()
    mixers = list(wanted or registered)
    bad = [m for m in mixers if m not in registered]
    if bad:
        raise TsmixError(f"unknown mixer(s) {', '.join(bad)}; registered: {', '.join(registered)}")
    if "softmax" in registered:
        mixers = ["softmax", *(m for m in mixers if m != "softmax")]
    return mixers


def run_speed(cfg: SpeedConfig | None = None, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Measure every (mixer, width, length) cell (default config: ``SpeedConfig()``); returns cells,
    exponents and run metadata."""
    cfg = SpeedConfig() if cfg is None else cfg
    mixers = _mixer_names(cfg.mixers)
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
            "commit": git_commit(), "malloc": _malloc(), "processor": processor(str(dev))}


def _energy_steps(name: str) -> int | None:
    """The mixer's ``steps`` option (energy / recurrence steps per layer), read generically from its
    registered options; None when it has none."""
    from tsmix.registry import mixer_options

    steps = getattr(mixer_options(name), "steps", None)
    return int(steps) if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else None


def run_shapes(cfg: ShapesConfig | None = None, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Forward+backward of every mixer at the encoders' real shapes (``SHAPES``), batch as an axis.

    Within one (shape, batch, tokens) cell the mixers alternate round by round (``alternate``), and
    each ratio to softmax comes from that cell, so load drift on a shared machine cancels out."""
    cfg = ShapesConfig() if cfg is None else cfg
    unknown = [s for s in cfg.shapes if s not in SHAPES]
    if unknown:
        raise TsmixError(f"unknown shape(s) {', '.join(unknown)}; choose from {', '.join(SHAPES)}")
    if not cfg.batches or any(b <= 0 for b in cfg.batches) or cfg.rounds <= 0:
        raise TsmixError("--batches must be positive integers and --rounds positive")
    mixers = _mixer_names(cfg.mixers)
    dev = device_of(cfg.device)
    cells: list[ShapeCell] = []
    t_start = time.perf_counter()
    load_start = _loadavg()
    for shape_name in cfg.shapes:
        shape = SHAPES[shape_name]
        # build() reads heads/causal/seed from a SpeedConfig: the shape's heads, the suite's rest
        bcfg = SpeedConfig(heads=shape.heads, causal=cfg.causal, seed=cfg.seed)
        modules: dict[str, torch.nn.Module | str] = {}
        for name in mixers:
            try:
                modules[name] = build(name, shape.width, bcfg, dev)
            except Exception as exc:  # a mixer that cannot be built at this shape is reported
                modules[name] = f"error: {type(exc).__name__}: {exc}"
        for batch in sorted(cfg.batches):
            for tokens in shape.tokens:
                seqs = batch * shape.channels
                gen = torch.Generator().manual_seed(cfg.seed + seqs + tokens)
                x = torch.randn(seqs, tokens, shape.width, generator=gen).to(dev).requires_grad_(True)
                g = torch.randn(seqs, tokens, shape.width, generator=gen).to(dev)
                fns = {n: fwd_bwd(m, x, g) for n, m in modules.items() if not isinstance(m, str)}
                timed = alternate(fns, cfg.rounds, dev, warmup=cfg.warmup, min_pass_s=cfg.min_pass_s)
                ref = timed.get("softmax")
                for name in mixers:
                    c = ShapeCell(shape_name, name, batch, seqs, tokens, shape.width, shape.heads,
                                  steps=_energy_steps(name))
                    v = modules[name] if isinstance(modules[name], str) else timed[name]
                    if isinstance(v, str):
                        c.status = v
                    else:
                        c.ms = v
                        c.ratio = v / ref if isinstance(ref, float) and ref > 0 else None
                    cells.append(c)
                    log(_shape_line(c))
    return {"kind": "shapes", "cells": cells, "mixers": mixers, "config": asdict(cfg), "device": dev.type,
            "torch": torch.__version__, "threads": torch.get_num_threads(),
            "seconds": time.perf_counter() - t_start, "load_start": load_start, "load": _loadavg(),
            "commit": git_commit(), "malloc": _malloc(), "processor": processor(str(dev))}


def _shape_line(c: ShapeCell) -> str:
    head = f"{c.shape:>8} B={c.batch:<4} ({c.sequences}x{c.tokens}, D={c.width}) {c.mixer:>16}"
    if c.status != "ok":
        return f"{head} {c.status}"
    per = f"  {c.per_step:5.2f}x per step" if c.steps and c.per_step is not None else ""
    rat = f"{c.ratio:6.2f}x softmax" if c.ratio is not None else ""
    return f"{head} {c.ms:9.2f} ms {rat}{per}"


def _cell_line(c: Cell) -> str:
    if c.status != "ok":
        return f"{c.mixer:>14} D={c.width:<4} N={c.length:<5} {c.status}"
    mem = f" peak {c.peak_mb:8.1f} MiB" if c.peak_mb is not None else ""
    return f"{c.mixer:>14} D={c.width:<4} N={c.length:<5} {c.ms:10.2f} ms{mem}"


def _malloc() -> str:
    """How this process's C allocator treats freed memory (it changes CPU timings: tsmix.engine.memory)."""
    from tsmix.engine.memory import retained

    return "freed memory kept" if retained() else "allocator as it comes"


def _loadavg() -> str:
    try:
        with open("/proc/loadavg") as fh:
            return " ".join(fh.read().split()[:3])
    except OSError:
        return "n/a"


__all__ = ["DEFAULT_LENGTHS", "DEFAULT_WIDTHS", "FIT_MIN_LENGTH", "SHAPES", "Cell", "ShapeCell",
           "ShapesConfig", "SpeedConfig", "exponents", "fit_exponent", "load_shapes_json",
           "load_speed_json", "plot_speed", "ratios", "render_shapes_markdown", "render_speed_markdown",
           "run_shapes", "run_speed", "save_speed_json", "write_shapes", "write_speed"]
