"""Outputs of the speed suite: speed.csv (every cell), speed.md (tables, exponents, skips),
speed.png (log-log plots) and speed.json (everything needed to re-render them later)."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tsmix.atomic import save_figure_atomic, write_text_atomic
from tsmix.errors import TsmixError
from tsmix.provenance import git_commit

from .speed_cells import (
    FIT_MIN_LENGTH,
    SHAPES,
    TARGETS,
    Cell,
    ShapeCell,
    exponents,
    ratios,
    target_text,
    target_verdict,
)


def _processor_text(result: dict[str, Any]) -> str:
    """`` (AMD EPYC, 2 logical cores)`` where the run recorded its hardware (older JSON did not)."""
    return f" ({result['processor']})" if result.get("processor") else ""


def _malloc_text(result: dict[str, Any]) -> str:
    """``, freed memory kept`` (or the other setting) where the run recorded it, else nothing."""
    return f", {result['malloc']}" if result.get("malloc") else ""


def save_speed_json(result: dict[str, Any], path: str | Path) -> Path:
    """Everything needed to re-render the tables and plot later (``load_speed_json``)."""
    data = {k: v for k, v in result.items() if k not in ("cells", "exponents")}
    data["cells"] = [asdict(c) for c in result["cells"]]
    return write_text_atomic(Path(path), json.dumps(data, indent=1, default=str))


def load_speed_json(path: str | Path) -> dict[str, Any]:
    if not Path(path).is_file():
        raise TsmixError(f"no speed results at {path}; run `tsmix benchmark-speed` (it writes speed.json)")
    data = json.loads(Path(path).read_text())
    data["cells"] = [Cell(**c) for c in data["cells"]]
    data["config"]["lengths"] = tuple(data["config"]["lengths"])
    data["config"]["widths"] = tuple(data["config"]["widths"])
    data["exponents"] = exponents(data["cells"], data["mixers"], data["config"]["widths"])
    return data


def write_speed(result: dict[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """speed.csv (every cell), speed.md (tables + exponents + skips), speed.png (log-log plots)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rat = ratios(result)
    csv_path = out / "speed.csv"
    cols = ["mixer", "width", "length", "batch", "heads", "ms_fwd_bwd", "peak_mib", "time_vs_softmax",
            "mem_vs_softmax", "status", "device", "torch", "threads", "commit"]
    cfg = result["config"]
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(cols)
    for c in result["cells"]:
        t, m = rat[(c.mixer, c.width, c.length)]
        w.writerow([c.mixer, c.width, c.length, cfg["batch"], cfg["heads"], _f(c.ms), _f(c.peak_mb),
                    _f(t), _f(m), c.status, result["device"], result["torch"], result["threads"],
                    result.get("commit") or git_commit()])
    write_text_atomic(csv_path, buf.getvalue())
    md_path = write_text_atomic(out / "speed.md", render_speed_markdown(result))
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
        f"device {result['device']}{_processor_text(result)}, torch {result['torch']}, "
        f"{result['threads']} thread(s), commit {result.get('commit') or git_commit()}"
        f"{_malloc_text(result)}; load average at the end {result['load']}; "
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
    save_figure_atomic(fig, path, dpi=110)
    plt.close(fig)
    return Path(path)


# ----------------------------------------------------------------------------- shape presets

SHAPES_STEM = "speed_shapes"  # beside speed.* so the length sweep's files stay as they are


def write_shapes(result: dict[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """speed_shapes.csv (every cell), speed_shapes.md (a ratio table per shape, with the issue #21
    targets marked met / not met) and speed_shapes.json (for ``load_shapes_json``), written atomically."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["shape", "mixer", "batch", "sequences", "tokens", "width", "heads", "ms_fwd_bwd",
                "time_vs_softmax", "energy_steps", "per_step_vs_softmax", "target", "verdict", "status",
                "device", "torch", "threads", "commit"])
    for c in result["cells"]:
        target, verdict = target_verdict(c)
        w.writerow([c.shape, c.mixer, c.batch, c.sequences, c.tokens, c.width, c.heads, _f(c.ms),
                    _f(c.ratio), c.steps or "", _f(c.per_step), target, verdict, c.status, result["device"],
                    result["torch"], result["threads"], result.get("commit") or ""])
    data = {k: v for k, v in result.items() if k != "cells"}
    data["cells"] = [asdict(c) for c in result["cells"]]
    return {"csv": write_text_atomic(out / f"{SHAPES_STEM}.csv", buf.getvalue()),
            "markdown": write_text_atomic(out / f"{SHAPES_STEM}.md", render_shapes_markdown(result)),
            "json": write_text_atomic(out / f"{SHAPES_STEM}.json", json.dumps(data, indent=1, default=str))}


def load_shapes_json(path: str | Path) -> dict[str, Any]:
    data = json.loads(Path(path).read_text())
    if data.get("kind") != "shapes":
        raise TsmixError(f"{path} holds no shape-preset results (run `tsmix benchmark-speed --shapes patch`)")
    data["cells"] = [ShapeCell(**c) for c in data["cells"]]
    return data


def render_shapes_markdown(result: dict[str, Any]) -> str:
    cfg = result["config"]
    clock = "wall time" if result["device"] == "cuda" else _CPU_CLOCK
    lines = [
        "# Mixer speed at the encoders' shapes (issue #21)",
        "",
        f"Forward+backward of one mixer layer, {'causal' if cfg['causal'] else 'bidirectional'}; in each "
        f"cell the mixers alternate over {cfg['rounds']} rounds (median reported; passes shorter than "
        f"{cfg['min_pass_s'] * 1e3:g} ms repeat within a round) so machine-load drift hits all alike, and "
        f"each ratio is to softmax in the same cell. Timed as {clock}; device {result['device']}"
        f"{_processor_text(result)}, torch {result['torch']}, {result['threads']} thread(s), "
        f"commit {result.get('commit') or '?'}"
        f"{_malloc_text(result)}; load average at the start {result.get('load_start', '?')}, "
        f"at the end {result['load']}; "
        f"{result['seconds']:.0f} s in all.",
        "Per step: the ratio divided by the mixer's energy-step count (its `steps` option). Target: the "
        "issue's bound on the ratio (per step where marked); *met* / *not met* in every cell.",
        "",
    ]
    for shape in dict.fromkeys(c.shape for c in result["cells"]):
        cells = [c for c in result["cells"] if c.shape == shape]
        cols = list(dict.fromkeys((c.batch, c.sequences, c.tokens) for c in cells))
        what = SHAPES[shape].what if shape in SHAPES else shape
        ex = cells[0]
        lines += [f"## {shape}: {what}", "",
                  f"D={ex.width}, {ex.heads} heads. Columns: B windows per batch → sequences × tokens. "
                  "Cells: × softmax (per step); softmax row: its milliseconds.", "",
                  "| mixer | " + " | ".join(f"B={b} ({s}×{n})" for b, s, n in cols) + " | target | verdict |",
                  "|---|" + "---:|" * len(cols) + "---|---|"]
        for name in result["mixers"]:
            row, verdicts = [], []
            by_col = {(c.batch, c.sequences, c.tokens): c for c in cells if c.mixer == name}
            for col in cols:
                c = by_col.get(col)
                if c is None or c.status != "ok":
                    row.append("—" if c is None else "error")
                    continue
                if name == "softmax":
                    row.append(f"{c.ms:.3g} ms")
                    continue
                txt = "—" if c.ratio is None else f"{c.ratio:.2f}"
                if c.steps and c.per_step is not None:
                    txt += f" ({c.per_step:.2f}/step)"
                verdicts.append(target_verdict(c)[1])
                row.append(txt)
            verdict = _summarise(verdicts) if name in TARGETS else ""
            target = target_text(name)
            lines.append(f"| {name} | " + " | ".join(row) + f" | {target} | {verdict} |")
        errors = [f"- {c.mixer}, B={c.batch}, N={c.tokens}: {c.status}" for c in cells if c.status != "ok"]
        lines += ["", *errors, *([""] if errors else [])]
    return "\n".join(lines)


def _summarise(verdicts: list[str]) -> str:
    """One verdict over a mixer's cells of a shape: met only where every cell meets the target."""
    known = [v for v in verdicts if v]
    if not known:
        return "not measured"
    met = sum(v == "met" for v in known)
    if met == len(known):
        return "**met**"
    return "not met" if met == 0 else f"not met ({met}/{len(known)} cells met)"
