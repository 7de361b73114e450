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


# ----------------------------------------------------------------------------- shape presets
# The shapes a user of the encoders actually pays for (issue #21): the speed sweep above times
# one long sequence, where per-call overhead is amortised and the ratios look better.


@dataclass(frozen=True)
class ShapePreset:
    """A token-mixer workload of an encoder: ``channels`` sequences per window of a batch, each of
    ``tokens`` tokens of width ``width``. ``batches`` (CLI) counts windows, so a cell holds
    ``batch * channels`` sequences."""

    name: str
    channels: int  # sequences per window: channel-independent patching gives one per variate
    tokens: tuple[int, ...]  # token counts measured (one cell each)
    width: int
    heads: int
    what: str  # one line for the report


SHAPES: dict[str, ShapePreset] = {
    # PatchTST ETTh paper preset: L=336, patch 16, stride 8 -> 42 patches; ETTh has 7 channels.
    "patch": ShapePreset("patch", channels=7, tokens=(42,), width=16, heads=4,
                         what="PatchTST ETTh paper preset: B·7 sequences of 42 patches, D=16, 4 heads"),
    # iTransformer: one token per variate (ETTh 7, Weather 21), one sequence per window.
    "variate": ShapePreset("variate", channels=1, tokens=(7, 21), width=128, heads=8,
                           what="iTransformer: B sequences of 7 or 21 variate tokens, D=128, 8 heads"),
}
SHAPE_CHOICES = ("lengths", *SHAPES)  # "lengths" = the length/width sweep above
DEFAULT_BATCHES = (32, 128)  # windows per batch (128 = the paper presets' batch size)

# Issue #21 targets: fwd+bwd time over softmax in the same cell. ``per_step``: divided by the
# mixer's energy-step count (its ``steps`` option), so a recurrent mixer is judged per step.
TARGETS: dict[str, tuple[float, bool]] = {
    "fem-sm": (1.3, False), "fem-aft": (1.2, False), "linear": (1.2, False), "gla": (1.5, False),
    "fem-gla": (1.5, False), "fem-ssm": (3.0, False), "nrgpt": (1.3, True), "gpt-rec-parallel": (1.3, True),
}


@dataclass(frozen=True)
class ShapesConfig:
    shapes: tuple[str, ...] = ("patch", "variate")  # keys of SHAPES
    batches: tuple[int, ...] = DEFAULT_BATCHES  # windows per batch
    rounds: int = 5  # alternating rounds per cell (median reported)
    min_pass_s: float = 0.02  # a mixer's timed unit repeats passes until this much CPU time
    warmup: int = 1
    causal: bool = False
    mixers: tuple[str, ...] | None = None  # None = every registered mixer
    device: str = "auto"
    seed: int = 0


@dataclass
class ShapeCell:
    shape: str
    mixer: str
    batch: int  # windows per batch
    sequences: int  # batch * channels
    tokens: int
    width: int
    heads: int
    ms: float | None = None  # median forward+backward milliseconds of one pass
    ratio: float | None = None  # ms / softmax ms in the same cell
    steps: int | None = None  # energy steps (the mixer's ``steps`` option), when it has one
    status: str = "ok"

    @property
    def per_step(self) -> float | None:
        return self.ratio / self.steps if self.ratio is not None and self.steps else None


def target_text(mixer: str) -> str:
    """The issue #21 target of a mixer as report text ("" when it has none)."""
    t = TARGETS.get(mixer)
    return "" if t is None else f"≤ {t[0]:g}×" + (" per step" if t[1] else "")


def target_verdict(cell: ShapeCell) -> tuple[str, str]:
    """(target text, "met" / "not met" / "") of a cell against the issue #21 target of its mixer."""
    t = TARGETS.get(cell.mixer)
    if t is None:
        return "", ""
    limit, per_step = t
    value = cell.per_step if per_step and cell.steps else cell.ratio  # no steps option: one step
    text = target_text(cell.mixer)
    if value is None:
        return text, ""
    return text, "met" if value <= limit else "not met"
