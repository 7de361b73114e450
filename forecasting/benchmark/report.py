"""Tables and plots from result rows: what a user reads to pick a mixer.

- ``summary.csv``: one line per (suite, dataset, model, mixer, lookback, horizon) with mean and
  std over seeds of mse/mae (fair and paper protocol), train time, params, the published
  counterpart.
- ``README.md``: per dataset a markdown table, rows model × mixer, columns the horizons and
  their average, ``mean ± std`` over seeds, best of each column in bold, published references
  beside (italic rows, their protocol noted). Fair-protocol MSE and MAE tables, and the
  paper-protocol MSE table next to the published numbers it is comparable with.
- plots: MSE by mixer, MSE vs parameters, MSE vs training time (matplotlib, Agg).
- optional MLflow logging of the tables and plots (mlflow imported only then).
"""

from __future__ import annotations

import csv
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tsmix.atomic import atomic_path, save_figure_atomic, write_text_atomic
from tsmix.errors import TsmixError
from tsmix.provenance import git_commit

from .published import TABLE_REFERENCES, average, counterpart, lookup
from .store import ResultStore
from .suites import ALL_DATASETS, ALL_MODELS, NO_MIXER
from .tracking import benchmark_run

GROUP = ("suite", "dataset", "model", "mixer", "lookback", "horizon")
METRICS = ("mse", "mae", "mse_paper", "mae_paper", "val_mse", "train_seconds", "cpu_seconds", "epochs")


def _mean_std(vals: Sequence[float]) -> tuple[float | None, float | None]:
    vals = [v for v in vals if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not vals:
        return None, None
    return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else 0.0)


def aggregate(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean ± std over seeds per (suite, dataset, model, mixer, lookback, horizon)."""
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[tuple(r[k] for k in GROUP)].append(r)
    out = []
    for key, rs in sorted(groups.items(), key=lambda kv: _sort_key(dict(zip(GROUP, kv[0])))):
        g = dict(zip(GROUP, key))
        for m in METRICS:
            g[f"{m}_mean"], g[f"{m}_std"] = _mean_std([r.get(m) for r in rs])
        if any(r.get("cpu_seconds") is None for r in rs):  # rows written before the column existed
            g["cpu_seconds_mean"] = g["cpu_seconds_std"] = None
        g["per_seed"] = {int(r["seed"]): r for r in rs}  # for horizon averages per seed (not in CSV)
        g["params"] = max((r.get("params") or 0) for r in rs)
        g["seeds"] = len(rs)
        g["protocol"] = ",".join(sorted({str(r.get("protocol")) for r in rs}))
        g["config_hashes"] = ",".join(sorted({str(r.get("config_hash")) for r in rs}))
        ref = counterpart(g["model"], g["mixer"], g["lookback"]) if g["protocol"] == "fair" else None
        pub = lookup(ref, g["dataset"], g["horizon"]) if ref else None
        g["published_reference"] = ref or ""
        g["published_mse"] = pub["mse"] if pub else None
        g["published_mae"] = pub["mae"] if pub else None
        out.append(g)
    return out


def _sort_key(g: dict[str, Any]) -> tuple:
    ds = ALL_DATASETS.index(g["dataset"]) if g["dataset"] in ALL_DATASETS else 99
    mo = ALL_MODELS.index(g["model"]) if g["model"] in ALL_MODELS else 99
    mixer = "" if g["mixer"] in ("softmax", NO_MIXER) else str(g["mixer"])  # reference first
    return (str(g["suite"]), ds, str(g["dataset"]), mo, mixer, int(g["lookback"]), int(g["horizon"]))


def write_summary_csv(groups: list[dict[str, Any]], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cols = list(GROUP) + ["seeds", "protocol", "mse_mean", "mse_std", "mae_mean", "mae_std", "mse_paper_mean",
                          "mse_paper_std", "mae_paper_mean", "mae_paper_std", "val_mse_mean", "epochs_mean",
                          "train_seconds_mean", "cpu_seconds_mean", "params", "published_reference",
                          "published_mse", "published_mae", "config_hashes"]
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for g in groups:
            w.writerow({k: ("" if g.get(k) is None else (f"{g[k]:.6g}" if isinstance(g[k], float) else g[k]))
                        for k in cols})
    return path


# ---------------------------------------------------------------- markdown tables

def _row_label(model: str, mixer: str, lookback: int) -> str:
    return f"{model} (L={lookback})" if mixer == NO_MIXER else f"{model} · {mixer} (L={lookback})"


def _cell(mean: float | None, std: float | None, bold: bool, seeds: int) -> str:
    if mean is None:
        return "—"
    s = f"{mean:.3f} ± {std:.3f}" if seeds > 1 else f"{mean:.3f}"
    return f"**{s}**" if bold else s


def dataset_table(groups: list[dict[str, Any]], dataset: str, metric: str = "mse",
                  horizons: Sequence[int] | None = None, references: Sequence[str] = TABLE_REFERENCES) -> str:
    """Markdown table for one dataset: rows model × mixer (× lookback), columns horizons + avg."""
    gs = [g for g in groups if g["dataset"] == dataset and g[f"{metric}_mean"] is not None]
    if not gs:
        return ""
    hs = sorted(horizons or {int(g["horizon"]) for g in gs})
    rows: dict[tuple, dict[int, dict[str, Any]]] = defaultdict(dict)
    for g in gs:
        rows[(g["model"], g["mixer"], int(g["lookback"]))][int(g["horizon"])] = g
    # Average over horizons per seed (seeds present at every horizon), then mean ± std over seeds.
    avgs: dict[tuple, tuple[float, float, int] | None] = {}
    for k, per in rows.items():
        complete = all(h in per for h in hs)
        seeds = set.intersection(*(set(per[h]["per_seed"]) for h in hs)) if complete else set()
        vals = [statistics.fmean(per[h]["per_seed"][s][metric] for h in hs) for s in sorted(seeds)
                if all(per[h]["per_seed"][s].get(metric) is not None for h in hs)]
        m, sd = _mean_std(vals)
        avgs[k] = (m, sd, len(vals)) if m is not None else None
    best = {h: min((per[h][f"{metric}_mean"] for per in rows.values() if h in per), default=None) for h in hs}
    best_avg = min((a[0] for a in avgs.values() if a), default=None)
    header = "| model · mixer | " + " | ".join(f"H={h}" for h in hs) + " | avg | seeds | CPU s/run |"
    lines = [header, "|---|" + "---:|" * (len(hs) + 3)]
    for k in rows:
        per = rows[k]
        cells = [_cell(per[h][f"{metric}_mean"], per[h][f"{metric}_std"],
                       per[h][f"{metric}_mean"] == best[h], per[h]["seeds"]) if h in per else "—" for h in hs]
        a = avgs[k]
        seeds = min(per[h]["seeds"] for h in per)
        avg_cell = _cell(a[0], a[1], a[0] == best_avg, a[2]) if a else "—"
        cpu = [r["cpu_seconds"] for g in per.values() for r in g["per_seed"].values() if r.get("cpu_seconds")]
        cost = f"{statistics.fmean(cpu):.0f}" if cpu else "—"  # process CPU s of fit(): robust to load
        # a run on an accelerator spent its time there: its CPU seconds are only the driving process's
        accel = sorted({str(r.get("device")) for g in per.values() for r in g["per_seed"].values()}
                       - {"cpu", "None", ""})
        if cpu and accel:
            cost += f" (on {', '.join(accel)})"
        lines.append(f"| {_row_label(*k)} | " + " | ".join(cells) + f" | {avg_cell} | {seeds} | {cost} |")
    pm = "mse" if metric.startswith("mse") else "mae"  # published tables have mse/mae only
    for ref in references:
        vals = [lookup(ref, dataset, h) for h in hs]
        avg = average(ref, dataset, tuple(hs), pm)
        if all(v is None or v[pm] is None for v in vals) and avg is None:
            continue
        proto = next((v for v in vals if v), None) or lookup(ref, dataset, "avg")
        lb = f", L={proto['lookback']}" if proto and proto.get("lookback") else ""
        cells = [f"*{v[pm]:.3f}*" if v and v[pm] is not None else "—" for v in vals]
        lines.append(f"| *published: {ref}{lb}* | " + " | ".join(cells)
                     + f" | {f'*{avg:.3f}*' if avg is not None else '—'} | | |")
    return "\n".join(lines)


def paired_cell(diffs: Sequence[float]) -> str:
    """``+0.004 ± 0.002`` (mean difference ± its standard error, n seeds), bold when |mean| > 2 SE."""
    if not diffs:
        return "—"
    mean = statistics.fmean(diffs)
    if len(diffs) < 2:
        return f"{mean:+.4f} (n=1)"
    se = statistics.stdev(diffs) / math.sqrt(len(diffs))
    cell = f"{mean:+.4f} ± {se:.4f}"
    return f"**{cell}**" if abs(mean) > 2 * se else cell


def paired_table(groups: list[dict[str, Any]], dataset: str, metric: str = "mse",
                 reference: str = "softmax") -> str:
    """Markdown table of each mixer's difference to ``reference`` in the same model and lookback,
    paired over the seeds both have (per horizon, and for the per-seed horizon average): mean
    difference ± standard error; negative is better. Bold: |mean| > 2 SE (more than seed noise)."""
    gs = [g for g in groups if g["dataset"] == dataset and g[f"{metric}_mean"] is not None]
    by: dict[tuple, dict[int, dict[str, Any]]] = defaultdict(dict)
    for g in gs:
        by[(g["model"], g["mixer"], int(g["lookback"]))][int(g["horizon"])] = g
    hs = sorted({int(g["horizon"]) for g in gs})
    lines = []
    for (model, mixer, lookback), per in by.items():
        ref = by.get((model, reference, lookback))
        if mixer in (reference, NO_MIXER) or ref is None:
            continue
        cells, avg_diffs = [], defaultdict(list)
        for h in hs:
            if h not in per or h not in ref:
                cells.append("—")
                continue
            a, b = per[h]["per_seed"], ref[h]["per_seed"]
            shared = sorted(s for s in set(a) & set(b) if a[s].get(metric) is not None
                            and b[s].get(metric) is not None)
            diffs = [a[s][metric] - b[s][metric] for s in shared]
            cells.append(paired_cell(diffs))
            for s, d in zip(shared, diffs):
                avg_diffs[s].append(d)
        full = [statistics.fmean(v) for v in avg_diffs.values() if len(v) == len(hs)]
        label = _row_label(model, mixer, lookback)
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {paired_cell(full)} |")
    if not lines:
        return ""
    header = f"| {metric} − {reference} (same seeds) | " + " | ".join(f"H={h}" for h in hs) + " | avg |"
    return "\n".join([header, "|---|" + "---:|" * (len(hs) + 1), *lines])


def render_markdown(groups: list[dict[str, Any]], suite: str, notes: str = "",
                    plots: Sequence[Path] = ()) -> str:
    datasets = [d for d in ALL_DATASETS if any(g["dataset"] == d for g in groups)]
    datasets += sorted({g["dataset"] for g in groups} - set(datasets))
    n_rows = sum(g["seeds"] for g in groups)
    lines = [f"# Benchmark `{suite}`", ""]
    if notes:
        lines += [notes.strip(), ""]
    protocols = sorted({p for g in groups for p in g["protocol"].split(",")})
    sliced = any(p.startswith("fair/first-") for p in protocols)
    lines += [f"Protocol(s) of these rows: {', '.join(f'`{p}`' for p in protocols)}"
              + (" (`fair/first-N-rows`: only the first N rows of the file, custom 70/10/20 borders)."
                 if sliced else "."), ""]
    lines += [
        f"{n_rows} runs in {len(groups)} groups; mean ± std over seeds of test MSE/MAE on the normalized "
        "scale. **Fair protocol**: standard borders, scaler fit on train rows, every test window scored, "
        "early stopping and best-weight selection on validation only. Best value of each column in bold "
        "(our rows only). The `avg` column averages each seed over the horizons, then takes mean ± std over "
        "seeds. *Published* rows are beside for orientation: PatchTST and DLinear published numbers dropped "
        "the last partial test batch, so they compare with the *paper-protocol* table, not the fair one.",
        "",
    ]
    for d in datasets:
        # Published numbers only beside full-data, standard-border runs (not smoke slices).
        full = all(g["protocol"] == "fair" for g in groups if g["dataset"] == d)
        refs = TABLE_REFERENCES if full else ()
        lines += [f"## {d}", "", "### MSE (fair protocol)", "",
                  dataset_table(groups, d, "mse", references=refs), ""]
        paired = paired_table(groups, d, "mse")
        if paired:
            lines += ["### MSE difference to softmax, paired over seeds (fair protocol; negative is better, "
                      "bold: more than 2 standard errors)", "", paired, ""]
        lines += ["### MAE (fair protocol)", "", dataset_table(groups, d, "mae", references=refs), ""]
        paper = dataset_table(groups, d, "mse_paper", references=("PatchTST/42", "DLinear") if full else ())
        if paper:
            lines += ["### MSE (paper protocol: last partial test batch dropped, as the published tables)",
                      "", paper, ""]
    if plots:
        lines += ["## Plots", ""] + [f"![{p.stem}]({p.as_posix()})" for p in plots] + [""]
    return "\n".join(lines)


# ---------------------------------------------------------------- plots

def _avg_by_row(groups: list[dict[str, Any]], dataset: str) -> dict[tuple, dict[str, float]]:
    """Per (model, mixer, lookback): horizon-averaged mse (+ std), params and mean train seconds."""
    per: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for g in groups:
        if g["dataset"] == dataset and g["mse_mean"] is not None:
            per[(g["model"], g["mixer"], int(g["lookback"]))].append(g)
    hs = sorted({int(g["horizon"]) for g in groups if g["dataset"] == dataset})
    out = {}
    for k, gs in per.items():
        if {int(g["horizon"]) for g in gs} != set(hs):
            continue  # incomplete rows would bias the average
        cpu = [g["cpu_seconds_mean"] for g in gs]
        out[k] = {"mse": statistics.fmean(g["mse_mean"] for g in gs),
                  "std": statistics.fmean(g["mse_std"] or 0.0 for g in gs),
                  "params": statistics.fmean(g["params"] for g in gs),
                  "seconds": statistics.fmean(g["train_seconds_mean"] for g in gs),
                  # CPU seconds are comparable across rows run under different machine load
                  "cpu": statistics.fmean(cpu) if all(c is not None for c in cpu) else None}
    return out


def plot_report(groups: list[dict[str, Any]], out_dir: str | Path, suite: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    datasets = [d for d in ALL_DATASETS if any(g["dataset"] == d for g in groups)]
    datasets += sorted({g["dataset"] for g in groups} - set(datasets))
    if not datasets:
        return []
    paths = []
    marker = {"patchtst": "o", "itransformer": "s", "dlinear": "^"}

    # 1. MSE by mixer: grouped bars per encoder, DLinear and published references as lines.
    fig, axes = plt.subplots(1, len(datasets), figsize=(7.5 * len(datasets), 5.2), squeeze=False)
    for ax, d in zip(axes[0], datasets):
        avg = _avg_by_row(groups, d)
        mixers = sorted({k[1] for k in avg if k[1] != NO_MIXER}, key=lambda m: (m != "softmax", m))
        encs = [(m, lb) for (m, _x, lb) in sorted({(k[0], "", k[2]) for k in avg if k[1] != NO_MIXER})]
        width = 0.8 / max(1, len(encs))
        for j, (model, lb) in enumerate(encs):
            xs, ys, es = [], [], []
            for i, mixer in enumerate(mixers):
                v = avg.get((model, mixer, lb))
                if v:
                    xs.append(i + (j - (len(encs) - 1) / 2) * width)
                    ys.append(v["mse"])
                    es.append(v["std"])
            ax.bar(xs, ys, width, yerr=es, capsize=2, label=f"{model} (L={lb})")
        for (model, mixer, lb), v in avg.items():
            if mixer == NO_MIXER:
                ax.axhline(v["mse"], color="k", ls="--", lw=1, label=f"{model} (L={lb})")
        full = all(g["protocol"] == "fair" for g in groups if g["dataset"] == d)
        for ref, ls in ((("PatchTST/42", ":"), ("iTransformer", "-.")) if full else ()):
            a = average(ref, d)
            if a is not None:
                ax.axhline(a, color="gray", ls=ls, lw=1, label=f"published {ref}")
        ax.set_xticks(range(len(mixers)))
        ax.set_xticklabels(mixers, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("test MSE, mean over horizons")
        ax.set_title(f"{d} ({suite})")
        lo = min([v["mse"] for v in avg.values()] or [0])
        ax.set_ylim(bottom=max(0.0, lo * 0.85))
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    p = out / "mse_by_mixer.png"
    save_figure_atomic(fig, p, dpi=110)
    plt.close(fig)
    paths.append(p)

    # 2./3. accuracy vs parameters and vs training time.
    for key, xlabel, fname in (("params", "trainable parameters", "mse_vs_params.png"),
                               ("seconds", "mean training seconds per run", "mse_vs_train_time.png")):
        fig, axes = plt.subplots(1, len(datasets), figsize=(7.5 * len(datasets), 5.2), squeeze=False)
        for ax, d in zip(axes[0], datasets):
            avg = _avg_by_row(groups, d)
            if key == "seconds" and avg and all(v["cpu"] is not None for v in avg.values()):
                key, xlabel = "cpu", "mean CPU seconds per fit (training + validation)"
            for (model, mixer, _lb), v in avg.items():
                ax.errorbar(v[key], v["mse"], yerr=v["std"], fmt=marker.get(model, "x"), ms=5, capsize=2)
                ax.annotate(model if mixer == NO_MIXER else f"{model[:5]}·{mixer}", (v[key], v["mse"]),
                            fontsize=6, xytext=(3, 3), textcoords="offset points")
            ax.set_xscale("log")
            ax.set_xlabel(xlabel)
            ax.set_ylabel("test MSE, mean over horizons")
            ax.set_title(f"{d} ({suite})")
            ax.grid(True, which="both", alpha=0.3)
        fig.tight_layout()
        p = out / fname
        save_figure_atomic(fig, p, dpi=110)
        plt.close(fig)
        paths.append(p)
    return paths


# ---------------------------------------------------------------- entry point

def stored_rows(results: str | Path, suite: str) -> list[dict[str, Any]]:
    """The rows of ``suite`` under ``results``; TsmixError when there is nothing to report (no
    folder, or no row of that suite): an empty report would look like a finished one."""
    root = Path(results)
    if not root.is_dir():
        raise TsmixError(f"results folder {root} does not exist; pass the --results folder tsmix benchmark "
                         "wrote to")
    rows = ResultStore(root).rows(suite)
    if not rows:
        found = sorted(p.name for p in root.iterdir() if p.is_dir() and any(p.glob("*.csv")))
        raise TsmixError(f"no result rows of suite {suite!r} in {root}; run tsmix benchmark --suite {suite} "
                         f"first or pick a stored suite ({', '.join(found) or 'none stored'})")
    return rows


def write_report(results: str | Path, suite: str, out_dir: str | Path | None = None, notes: str = "",
                 tracking_uri: str | None = None, plots: bool = True) -> dict[str, Path]:
    """Render README.md, summary.csv and plots for ``suite`` from the rows under ``results``
    (into ``RESULTS/SUITE`` unless ``out_dir``); a NOTES.md there is linked from the README."""
    from .suites import SUITES

    rows = stored_rows(results, suite)
    out = Path(out_dir) if out_dir else Path(results) / suite
    if out.exists() and not out.is_dir():
        raise TsmixError(f"report folder {out} is a file; pass another --out")
    if not notes and suite in SUITES:
        notes = f"Suite `{suite}`: {SUITES[suite].description}."
        if (out / "NOTES.md").exists():  # hand-written context kept beside the generated report
            notes += "\n\nSee [NOTES.md](NOTES.md) for how this suite was sized, what ran and what is left."
    out.mkdir(parents=True, exist_ok=True)
    groups = aggregate(rows)
    files: dict[str, Path] = {"summary": write_summary_csv(groups, out / "summary.csv")}
    plot_paths = plot_report(groups, out / "plots", suite) if (plots and groups) else []
    rel = [p.relative_to(out) for p in plot_paths]
    md = render_markdown(groups, suite, notes=notes, plots=rel)
    write_text_atomic(out / "README.md", md)
    files["markdown"] = out / "README.md"
    for p in plot_paths:
        files[p.stem] = p
    if tracking_uri:
        log_report_mlflow(files, groups, suite, tracking_uri)
    return files


def log_report_mlflow(files: dict[str, Path], groups: list[dict[str, Any]], suite: str,
                      tracking_uri: str) -> None:
    import mlflow  # lazy: only when a tracking URI is given

    with benchmark_run(tracking_uri, f"tsmix-benchmark-{suite}", f"report-{suite}"):
        mlflow.log_params({"suite": suite, "groups": len(groups), "commit": git_commit()})
        for g in groups:
            if g["mse_mean"] is not None:
                name = f"{g['dataset']}_{g['model']}_{g['mixer']}_L{g['lookback']}_H{g['horizon']}_mse"
                mlflow.log_metric(name.replace("-", "_").replace("·", "_"), g["mse_mean"])
        for p in files.values():
            mlflow.log_artifact(str(p))
