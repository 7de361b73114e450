"""Timing and peak memory of one (mixer, width, length) cell of the speed suite.

CPU: process CPU time (other jobs on a shared machine do not inflate it) and the profiler's
allocation timeline; CUDA: synchronised wall time and ``max_memory_allocated``.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator

import torch

from .speed_cells import Cell, SpeedConfig


def device_of(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def build(name: str, width: int, cfg: SpeedConfig, dev: torch.device) -> torch.nn.Module:
    from tsmix import build_mixer, mixer_spec

    spec = mixer_spec(name)
    causal = cfg.causal or not spec.supports_bidirectional
    if causal and not spec.supports_causal:
        causal = False
    torch.manual_seed(cfg.seed)
    return build_mixer(name, width, heads=cfg.heads, causal=causal).to(dev)


def _pass(module: torch.nn.Module, x: torch.Tensor, g: torch.Tensor) -> None:
    module.zero_grad(set_to_none=True)
    x.grad = None
    y = module(x)  # (B, N, D)
    y.backward(g)


def _time(module: torch.nn.Module, x: torch.Tensor, g: torch.Tensor, cfg: SpeedConfig,
          dev: torch.device) -> float:
    """Median milliseconds of one forward+backward. CPU: process CPU time (every thread of this
    process), which other jobs on a shared machine do not inflate the way they inflate wall
    time; CUDA: wall time with synchronisation. Fast cells repeat until ``min_seconds``."""
    clock = time.perf_counter if dev.type == "cuda" else time.process_time
    for _ in range(cfg.warmup):
        _pass(module, x, g)
    _sync(dev)
    times: list[float] = []
    while len(times) < cfg.reps or (sum(times) < cfg.min_seconds and len(times) < 50):
        t0 = clock()
        _pass(module, x, g)
        _sync(dev)
        times.append(clock() - t0)
    return statistics.median(times) * 1e3


def _peak_memory_mb(module: torch.nn.Module, x: torch.Tensor, g: torch.Tensor, dev: torch.device) -> float:
    """Peak of live allocator bytes during one forward+backward, above what was live before."""
    if dev.type == "cuda":
        _sync(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        base = torch.cuda.memory_allocated(dev)
        _pass(module, x, g)
        _sync(dev)
        return (torch.cuda.max_memory_allocated(dev) - base) / 2**20
    from torch.profiler import ProfilerActivity, profile

    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        _pass(module, x, g)
    # Every allocation happens inside some op (its self memory); frees outside ops show up as
    # "[memory]" events. Replaying them in start order gives the live-bytes curve.
    events = sorted(prof.events(), key=lambda e: e.time_range.start)
    live = peak = 0
    for e in events:
        live += e.self_cpu_memory_usage if e.name != "[memory]" else e.cpu_memory_usage
        peak = max(peak, live)
    return peak / 2**20


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence the profiler's C++ start/stop chatter on fd 2 (Python exceptions still raise)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def measure(cell: Cell, mod: torch.nn.Module, x0: torch.Tensor, g: torch.Tensor, cfg: SpeedConfig,
            dev: torch.device) -> None:
    """Fill ``cell`` with the time (and peak memory) of ``mod`` on ``x0`` (B, N, D); errors: its status."""
    x = x0.to(dev).requires_grad_(True)
    try:
        cell.ms = _time(mod, x, g, cfg, dev)
        if cfg.memory:
            cell.peak_mb = _peak_memory_mb(mod, x, g, dev)
    except (RuntimeError, torch.OutOfMemoryError) as exc:  # OOM or a shape the mixer refuses
        cell.ms, cell.peak_mb = None, None
        cell.status = f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"


def alternate(fns: dict[str, Callable[[], None]], rounds: int, dev: torch.device, warmup: int = 1,
              min_pass_s: float = 0.0) -> dict[str, float | str]:
    """Median milliseconds of one call of each fn, timed in ``rounds`` rounds that cycle through all
    fns, so that a drift of machine load hits every fn of the cell alike (a ratio between two of
    them is then fair even when absolute times are not). CPU: process CPU time; CUDA: synchronised
    wall time. A fn whose warm-up pass is shorter than ``min_pass_s`` runs several calls per round
    (clock resolution and timer overhead stop mattering). A fn that raises gets its error text."""
    clock = time.perf_counter if dev.type == "cuda" else time.process_time
    out: dict[str, float | str] = {}
    inner: dict[str, int] = {}
    for k, f in fns.items():
        try:
            t0 = clock()
            for _ in range(max(1, warmup)):
                f()
            _sync(dev)
            once = (clock() - t0) / max(1, warmup)
            inner[k] = max(1, min(100, int(min_pass_s / once) if once > 0 else 100))
        except (RuntimeError, torch.OutOfMemoryError) as exc:  # a shape the mixer refuses, or OOM
            out[k] = f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    times: dict[str, list[float]] = {k: [] for k in inner}
    for _ in range(rounds):
        for k in inner:
            t0 = clock()
            for _ in range(inner[k]):
                fns[k]()
            _sync(dev)
            times[k].append((clock() - t0) / inner[k])
    for k, ts in times.items():
        out[k] = statistics.median(ts) * 1e3
    return {k: out[k] for k in fns}


def fwd_bwd(module: torch.nn.Module, x: torch.Tensor, g: torch.Tensor) -> Callable[[], None]:
    """One forward+backward of ``module`` on ``x`` with output gradient ``g``, as a closure."""
    return lambda: _pass(module, x, g)
