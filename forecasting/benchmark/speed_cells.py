"""The cells of the speed suite and what is fitted from them: config, cell record, scaling
exponents (least-squares slope of log cost vs log N) and ratios to softmax in the same cell."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

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


def fit_exponent(points: Sequence[tuple[int, float]], min_length: int = FIT_MIN_LENGTH) -> float | None:
    """Least-squares slope of log(cost) vs log(N) over N >= min_length (None with < 2 points)."""
    pts = [(math.log(n), math.log(c)) for n, c in points if n >= min_length and c and c > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx if sxx > 0 else None


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
