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

import contextlib
import csv
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from tsmix.errors import TsmixError

DEFAULT_LENGTHS = (64, 128, 256, 512, 1024, 2048, 4096, 8192)
DEFAULT_WIDTHS = (64, 256)
FIT_MIN_LENGTH = 256  # below this fixed per-call overhead dominates and flattens the slope


@dataclass(frozen=True)
class SpeedConfig:
    lengths: tuple[int, ...] = DEFAULT_LENGTHS  # sequence lengths N
    widths: tuple[int, ...] = DEFAULT_WIDTHS  # model widths D
    batch: int = 1  # batch size B
    heads: int = 4  # heads passed to build_mixer
    reps: int = 3  # timed passes per cell at least (median reported)
    min_seconds: float = 0.2  # fast cells repeat (up to 50 passes) until this much time is measured
    warmup: int = 1  # untimed passes first (allocator, lazy init)
    causal: bool = False  # bidirectional by default; causal-only mixers are built causal anyway
    time_budget_s: float = 4.0  # skip cells predicted slower than this per pass
    mem_budget_mb: float = 3000.0  # skip cells predicted to need more peak memory than this
    mixers: tuple[str, ...] | None = None  # None = every registered mixer
    device: str = "auto"  # "auto" -> cuda when present, else cpu
    seed: int = 0  # weights and inputs
    memory: bool = True  # measure peak memory (one extra profiled pass per cell on CPU)


@dataclass
class Cell:
    mixer: str
    width: int
    length: int
    ms: float | None = None  # median forward+backward milliseconds
    peak_mb: float | None = None  # peak live memory of one pass, MiB
    status: str = "ok"  # "ok" | "skipped: ..." | "error: ..."
    extra: dict[str, Any] = field(default_factory=dict)


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _build(name: str, width: int, cfg: SpeedConfig, dev: torch.device) -> torch.nn.Module:
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


def fit_exponent(points: Sequence[tuple[int, float]], min_length: int = FIT_MIN_LENGTH) -> float | None:
    """Least-squares slope of log(cost) vs log(N) over N >= min_length (None with < 2 points)."""
    pts = [(math.log(n), math.log(c)) for n, c in points if n >= min_length and c and c > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx if sxx > 0 else None


def run_speed(cfg: SpeedConfig = SpeedConfig(), log: Callable[[str], None] = print) -> dict[str, Any]:
    """Measure every (mixer, width, length) cell; returns cells, exponents and run metadata."""
    from tsmix import available_mixers

    registered = available_mixers()
    mixers = list(cfg.mixers or registered)
    bad = [m for m in mixers if m not in registered]
    if bad:
        raise TsmixError(f"unknown mixer(s) {', '.join(bad)}; registered: {', '.join(registered)}")
    if "softmax" in registered and "softmax" not in mixers:
        mixers.insert(0, "softmax")  # ratios need the reference in the same run
    dev = _device(cfg.device)
    cells: list[Cell] = []
    t_start = time.perf_counter()
    for width in cfg.widths:
        if width % cfg.heads:
            raise TsmixError(f"width {width} is not divisible by heads {cfg.heads}; pick widths that are")
        modules: dict[str, torch.nn.Module | str] = {}
        for name in mixers:
            try:
                modules[name] = _build(name, width, cfg, dev)
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
                        _measure(cell, mod, x0, g, cfg, dev)
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
            "commit": _commit()}


def _commit() -> str:
    from .runner import git_commit

    return git_commit()


def exponents(cells: Sequence[Cell], mixers: Sequence[str], widths: Sequence[int]) -> dict:
    """(mixer, width) -> fitted time/memory exponents over N >= 256 and the tail time exponent."""
    out = {}
    for name in mixers:
        for width in widths:
            tp = [(c.length, c.ms) for c in cells if c.mixer == name and c.width == width and c.ms]
            mp = [(c.length, c.peak_mb) for c in cells if c.mixer == name and c.width == width and c.peak_mb]
            tail = sorted(tp)[-2:]
            out[(name, width)] = {"time": fit_exponent(tp), "memory": fit_exponent(mp),
                                  "time_tail": fit_exponent(tail, min_length=0) if len(tail) == 2 else None}
    return out


def save_speed_json(result: dict[str, Any], path: str | Path) -> Path:
    """Everything needed to re-render the tables and plot later (``load_speed_json``)."""
    data = {k: v for k, v in result.items() if k not in ("cells", "exponents")}
    data["cells"] = [asdict(c) for c in result["cells"]]
    Path(path).write_text(json.dumps(data, indent=1, default=str))
    return Path(path)


def load_speed_json(path: str | Path) -> dict[str, Any]:
    if not Path(path).is_file():
        raise TsmixError(f"no speed results at {path}; run `tsmix benchmark-speed` (it writes speed.json)")
    data = json.loads(Path(path).read_text())
    data["cells"] = [Cell(**c) for c in data["cells"]]
    data["config"]["lengths"] = tuple(data["config"]["lengths"])
    data["config"]["widths"] = tuple(data["config"]["widths"])
    data["exponents"] = exponents(data["cells"], data["mixers"], data["config"]["widths"])
    return data


def _measure(cell: Cell, mod: torch.nn.Module, x0: torch.Tensor, g: torch.Tensor, cfg: SpeedConfig,
             dev: torch.device) -> None:
    x = x0.to(dev).requires_grad_(True)
    try:
        cell.ms = _time(mod, x, g, cfg, dev)
        if cfg.memory:
            cell.peak_mb = _peak_memory_mb(mod, x, g, dev)
    except (RuntimeError, torch.OutOfMemoryError) as exc:  # OOM or a shape the mixer refuses
        cell.ms, cell.peak_mb = None, None
        cell.status = f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"


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


def ratios(result: dict[str, Any]) -> dict[tuple[str, int, int], tuple[float | None, float | None]]:
    """(mixer, width, length) -> (time ratio, memory ratio) to softmax in the same cell."""
    ref = {(c.width, c.length): c for c in result["cells"] if c.mixer == "softmax" and c.status == "ok"}
    out = {}
    for c in result["cells"]:
        r = ref.get((c.width, c.length))
        t = c.ms / r.ms if (r and c.ms and r.ms) else None
        m = c.peak_mb / r.peak_mb if (r and c.peak_mb and r.peak_mb) else None
        out[(c.mixer, c.width, c.length)] = (t, m)
    return out


def write_speed(result: dict[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """speed.csv (every cell), speed.md (tables + exponents + skips), speed.png (log-log plots)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rat = ratios(result)
    csv_path = out / "speed.csv"
    cols = ["mixer", "width", "length", "batch", "heads", "ms_fwd_bwd", "peak_mib", "time_vs_softmax",
            "mem_vs_softmax", "status", "device", "torch", "threads", "commit"]
    cfg = result["config"]
    with open(csv_path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        for c in result["cells"]:
            t, m = rat[(c.mixer, c.width, c.length)]
            w.writerow([c.mixer, c.width, c.length, cfg["batch"], cfg["heads"], _f(c.ms), _f(c.peak_mb),
                        _f(t), _f(m), c.status, result["device"], result["torch"], result["threads"],
                        result.get("commit") or _commit()])
    md_path = out / "speed.md"
    md_path.write_text(render_speed_markdown(result))
    png_path = out / "speed.png"
    plot_speed(result, png_path)
    json_path = save_speed_json(result, out / "speed.json")
    return {"csv": csv_path, "markdown": md_path, "plot": png_path, "json": json_path}


def _f(v: float | None) -> str:
    return "" if v is None else f"{v:.6g}"


_CPU_CLOCK = "process CPU time (robust to other jobs on a shared machine)"


def render_speed_markdown(result: dict[str, Any]) -> str:
    cfg = result["config"]
    rat = ratios(result)
    lengths = sorted(cfg["lengths"])
    lines = [
        "# Mixer speed suite",
        "",
        f"Forward+backward of one mixer layer on a (B={cfg['batch']}, N, D) input, {cfg['heads']} heads, "
        f"{'causal' if cfg['causal'] else 'bidirectional'}; median of at least {cfg['reps']} passes "
        f"(fast cells repeat until {cfg.get('min_seconds', 0.2):g} s) after {cfg['warmup']} warm-up, "
        "timed as "
        f"{'wall time' if result['device'] == 'cuda' else _CPU_CLOCK}; "
        f"device {result['device']}, torch {result['torch']}, "
        f"{result['threads']} thread(s), commit {result.get('commit') or _commit()}; "
        f"load average at the end {result['load']}; "
        f"{result['seconds']:.0f} s in all.",
        "Cells: milliseconds (× softmax in the same cell). Peak memory: live allocator MiB during one pass "
        "(CPU: profiler allocation timeline; CUDA: max_memory_allocated) (× softmax).",
        f"Exponents: least-squares slope of log cost vs log N over N ≥ {FIT_MIN_LENGTH}; *tail*: the slope "
        "between the two largest measured N (closest to the asymptotic scaling).",
        f"Cells predicted above {cfg['time_budget_s']:g} s per pass or {cfg['mem_budget_mb']:g} MiB are "
        "skipped (listed below), as are larger N of the same mixer and width.",
        "",
    ]
    skipped = []
    for width in cfg["widths"]:
        for what, key, unit in (("time", "ms", "ms"), ("peak memory", "peak_mb", "MiB")):
            lines += [f"## D = {width}: {what} ({unit})", "",
                      "| mixer | " + " | ".join(f"N={n}" for n in lengths)
                      + (" | exponent | tail |" if key == "ms" else " | exponent |"),
                      "|---|" + "---:|" * (len(lengths) + (2 if key == "ms" else 1))]
            for name in result["mixers"]:
                cells = {c.length: c for c in result["cells"] if c.mixer == name and c.width == width}
                row = []
                for n in lengths:
                    c = cells.get(n)
                    if c is None or c.status != "ok" or getattr(c, key) is None:
                        row.append("—")
                        if c is not None and c.status != "ok" and what == "time":
                            skipped.append(f"- {name}, D={width}, N={n}: {c.status}")
                        continue
                    r = rat[(name, width, n)][0 if key == "ms" else 1]
                    val = getattr(c, key)
                    row.append(f"{val:.3g}" + (f" (×{r:.2f})" if r is not None and name != "softmax" else ""))
                ex = result["exponents"][(name, width)]
                es = [ex["time"], ex["time_tail"]] if key == "ms" else [ex["memory"]]
                row += ["—" if e is None else f"{e:.2f}" for e in es]
                lines.append(f"| {name} | " + " | ".join(row) + " |")
            lines.append("")
    if skipped:
        lines += ["## Skipped or failed cells", "", *_collapse(skipped), ""]
    return "\n".join(lines)


def _collapse(items: list[str]) -> list[str]:
    """Keep the first skipped N per (mixer, width): the rest are skipped for the same reason."""
    seen, out = set(), []
    for s in items:
        head = s.split(", N=")[0]
        if head not in seen:
            seen.add(head)
            out.append(s + " (and every larger N)")
    return out


def plot_speed(result: dict[str, Any], path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    widths = result["config"]["widths"]
    fig, axes = plt.subplots(2, len(widths), figsize=(6.5 * len(widths), 9), squeeze=False)
    cmap = plt.get_cmap("tab20")
    style = {name: dict(color="k", lw=2.2) if name == "softmax" else
             dict(color=cmap(i % 20), ls=("-", "--", ":")[i // 20 % 3], lw=1.2)
             for i, name in enumerate(m for m in result["mixers"] if m != "softmax")}
    style.setdefault("softmax", dict(color="k", lw=2.2))
    for j, width in enumerate(widths):
        for name in result["mixers"]:
            cs = [c for c in result["cells"] if c.mixer == name and c.width == width and c.status == "ok"]
            cs.sort(key=lambda c: c.length)
            if not cs:
                continue
            e = result["exponents"][(name, width)]
            lt = f"{name} (N^{e['time']:.2f})" if e["time"] is not None else name
            axes[0][j].loglog([c.length for c in cs], [c.ms for c in cs], marker="o", label=lt, ms=3,
                              **style[name])
            mem = [(c.length, c.peak_mb) for c in cs if c.peak_mb]
            if mem:
                axes[1][j].loglog(*zip(*mem), marker="o", label=name, ms=3, **style[name])
        axes[0][j].set_title(f"forward+backward time, D={width}")
        axes[0][j].set_ylabel("ms")
        axes[1][j].set_title(f"peak memory, D={width}")
        axes[1][j].set_ylabel("MiB")
        for ax in (axes[0][j], axes[1][j]):
            ax.set_xlabel("sequence length N")
            ax.grid(True, which="both", alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
    fig.suptitle(f"tsmix mixers on {result['device']} ({result['threads']} thread(s), "
                 f"torch {result['torch']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
