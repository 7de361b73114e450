"""Gating and curvature on the curved-boundary task (arXiv 2604.14702), with a linear control.

For each task (curved, linear), attention variant and seed: build the one-block classifier of
``tsmix.models.synthetic.curved_boundary``, measure the curvature of its attention representation
at init, train it with AdamW, then measure test accuracy and the curvature again (eps sweep over
[1e-4, 1e-2], plateau value; isotropic and anisotropic metrics of condition number 2...20).

Writes into --out: ``results.csv`` (one row per run), ``summary.md`` (tables: ablation, kappa vs
alpha, accuracy vs curvature with Pearson r, anisotropic orders, linear control), and the plots
``decision_boundaries.png`` (seed 0, curved task) and ``curvature_vs_accuracy.png``.

    OMP_NUM_THREADS=1 python benchmarks/curvature/run.py --seeds 6
    python benchmarks/curvature/run.py --summarize-only      # tables and scatter from results.csv
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from tsmix.diagnostics import CONDS, curvature, curvature_metrics, curvature_sweep
from tsmix.models.synthetic.curved_boundary import (
    CurvedBoundaryModel,
    Representation,
    TaskConfig,
    TrainConfig,
    bayes_accuracy,
    make_data,
    predict_grid,
    train,
)
from tsmix.provenance import git_commit

# label -> (mixer, options, alpha on the mult axis or None)
VARIANTS: dict[str, tuple[str, dict, float | None]] = {
    "ungated": ("gated", {"variant": "none"}, 0.0),
    "silu": ("gated", {"variant": "silu"}, None),
    "mult a=0.25": ("gated", {"variant": "mult", "alpha": 0.25}, 0.25),
    "mult a=0.5": ("gated", {"variant": "mult", "alpha": 0.5}, 0.5),
    "mult a=0.75": ("gated", {"variant": "mult", "alpha": 0.75}, 0.75),
    "sigmoid (mult a=1)": ("gated", {"variant": "sigmoid"}, 1.0),
    "g1 headwise": ("gated-g1", {"granularity": "headwise"}, None),
    "g1 elementwise": ("gated-g1", {"granularity": "elementwise"}, None),
}
# nonsparse, Y * (0.5 + 0.5 sigmoid(W Y)), is the same function as mult a=0.5, Y * (1 + 0.5 (sigmoid - 1)):
# not run twice; the tables say so.
PLOT_LABELS = ("ungated", "silu", "mult a=0.5", "sigmoid (mult a=1)", "g1 elementwise")
CURV_INPUTS, CURV_DIRECTIONS = 256, 8  # test inputs and random directions per curvature sweep
PAPER_EPS = 1e-3  # the paper's finite-difference step
LINEAR_LABELS = ("ungated", "silu", "mult a=0.5", "sigmoid (mult a=1)", "g1 headwise", "g1 elementwise")
GATED = [k for k in VARIANTS if k not in ("ungated", "silu")]


def run_one(task: str, label: str, seed: int, tcfg: TaskConfig, trcfg: TrainConfig,
            data: dict) -> tuple[dict, CurvedBoundaryModel]:
    mixer, opts, alpha = VARIANTS[label]
    torch.manual_seed(seed)
    model = CurvedBoundaryModel(mixer, **opts)
    xs = data["x_test"][:CURV_INPUTS]
    init = curvature_metrics(curvature_sweep(Representation(model), xs, directions=CURV_DIRECTIONS, conds=()))
    res = train(model, data, trcfg)
    sweep = curvature_sweep(Representation(model), xs, directions=CURV_DIRECTIONS, conds=CONDS)
    met = curvature_metrics(sweep)
    # the paper's kappa as it defines it: || f(x + eps v) - 2 f(x) + f(x - eps v) || / eps^2 at its
    # eps = 1e-3, averaged over the inputs and random unit directions (no plateau search)
    met["kappa_paper"] = curvature(Representation(model), xs, eps=PAPER_EPS, directions=CURV_DIRECTIONS)
    mix = model.block.mixer
    model.eval()
    with torch.no_grad():
        model(data["x_test"])  # refresh the gate statistics on the test set
    gate = mix.diagnostics().get("gate_mean", float("nan"))
    row = {
        "task": task, "variant": label, "mixer": mixer,
        "options": ";".join(f"{k}={v}" for k, v in opts.items()),
        "alpha": "" if alpha is None else alpha, "seed": seed,
        "params": sum(p.numel() for p in model.parameters()),
        "train_acc": res["train_acc"], "test_acc": res["test_acc"], "train_loss": res["train_loss"],
        "kappa_init_iso": init["kappa_iso"], "kappa_init_relative": init["kappa_iso_relative"],
        **met, "gate_mean": gate, "train_seconds": res["train_seconds"],
        "epochs": trcfg.epochs, "n_train": tcfg.n_train, "noise": tcfg.noise, "frequency": tcfg.frequency,
        "torch": torch.__version__, "device": "cpu",
    }
    return row, model


def _meta(rows: list[dict]) -> str:
    """The setup line of the summary, read off the rows (so --summarize-only reproduces it)."""
    r, tr = rows[0], TrainConfig()
    return (f"Setup: n_train {r['n_train']}, n_test {TaskConfig().n_test}, seq_len 8, noise {r['noise']}, "
            f"boundary sin({_freq(r):g} theta) + 0.6 (r - 1.2), "
            f"dim 64, 1 head, AdamW lr {tr.lr} wd {tr.weight_decay} batch {tr.batch_size}, {r['epochs']} "
            f"epochs, cosine decay; torch {r['torch']}, CPU, commit {r['commit']}.")


def _fmt(xs: list[float], digits: int = 4) -> str:
    a = np.asarray(xs, dtype=float)
    return f"{a.mean():.{digits}f} ± {a.std(ddof=1) if len(a) > 1 else 0.0:.{digits}f}"


def _pearson(a: list[float], b: list[float]) -> float:
    return float(np.corrcoef(np.asarray(a, float), np.asarray(b, float))[0, 1])


def _centered(rows: list[dict], key: str) -> list[float]:
    """Values minus their seed's mean: removes what a seed (its data and init) does to every variant."""
    by_seed: dict[int, list[float]] = {}
    for r in rows:
        by_seed.setdefault(int(r["seed"]), []).append(float(r[key]))
    means = {s: float(np.mean(v)) for s, v in by_seed.items()}
    return [float(r[key]) - means[int(r["seed"])] for r in rows]


def _freq(row: dict) -> float:
    """The curved rule's frequency of a row (rows written before it was a setting: the paper's 2.5)."""
    return float(row.get("frequency") or 2.5)


def _bayes(rows: list[dict], task: str) -> list[float]:
    """Bayes-optimal test accuracy per seed of ``task`` (Monte Carlo), from the rows' data settings."""
    accs = []
    for seed in sorted({int(r["seed"]) for r in rows if r["task"] == task}):
        r = next(r for r in rows if r["task"] == task and int(r["seed"]) == seed)
        cfg = TaskConfig(task=task, n_train=int(r["n_train"]), noise=float(r["noise"]), frequency=_freq(r))
        data = make_data(cfg, seed)
        accs.append(bayes_accuracy(cfg, data["x_test"], data["y_test"]))
    return accs


def summarize(rows: list[dict], out: Path, meta: str) -> str:
    f = lambda rs, k: [float(r[k]) for r in rs]  # noqa: E731
    curved = [r for r in rows if r["task"] == "curved"]
    linear = [r for r in rows if r["task"] == "linear"]
    seeds = sorted({int(r["seed"]) for r in rows})
    paper = all(r.get("kappa_paper") not in (None, "") for r in rows)  # absent in rows of older runs
    pk = (lambda rs: f" {_fmt(f(rs, 'kappa_paper'))} |") if paper else (lambda rs: "")  # noqa: E731
    pk_head, pk_rule = (" paper kappa (eps 1e-3) |", "---|") if paper else ("", "")
    lines = ["# Gating and curvature on the curved-boundary task", "", meta, ""]
    lines += [
        "kappa: finite-difference curvature of the mean-pooled attention representation (64-d) over",
        f"{CURV_INPUTS} test inputs x {CURV_DIRECTIONS} unit directions, plateau of the eps sweep over",
        "[1e-4, 1e-2] in float64. relative = kappa / slope (invariant to rescaling the output).",
        *(["paper kappa: the paper's definition, the same mean of || f(x + eps v) - 2 f(x) + f(x - eps v) "
           "|| / eps^2 at its eps = 1e-3 (no plateau search)."] if paper else []),
        f"Mean ± std over seeds {seeds}.", "",
        "## Ablation (curved task)", "",
        "| variant | test acc | paired gain vs ungated | better / worse | train acc | kappa (trained) | "
        "relative kappa | kappa at init | mean gate |" + pk_head,
        "|---|---|---|---|---|---|---|---|---|" + pk_rule,
    ]
    base_c = {int(r["seed"]): float(r["test_acc"]) for r in curved if r["variant"] == "ungated"}
    for label in VARIANTS:
        rs = [r for r in curved if r["variant"] == label]
        if not rs:
            continue
        gate = f(rs, "gate_mean")
        d = [float(r["test_acc"]) - base_c[int(r["seed"])] for r in rs if int(r["seed"]) in base_c]
        lines.append(
            f"| {label} | {_fmt(f(rs, 'test_acc'))} | {_fmt(d)} | {sum(x > 0 for x in d)} / "
            f"{sum(x < 0 for x in d)} | {_fmt(f(rs, 'train_acc'))} | "
            f"{_fmt(f(rs, 'kappa_iso'))} | {_fmt(f(rs, 'kappa_iso_relative'))} | "
            f"{_fmt(f(rs, 'kappa_init_iso'))} | "
            f"{'-' if all(math.isnan(g) for g in gate) else f'{np.nanmean(gate):.3f}'} |" + pk(rs)
        )
    lines += ["", f"Bayes-optimal test accuracy (Monte Carlo posterior, same test sets): "
              f"{_fmt(_bayes(rows, 'curved'))}: the ceiling every variant is measured against."]
    lines += ["", "nonsparse, Y * (0.5 + 0.5 sigmoid(W Y)) as the issue and the paper's table write it, is "
              "the same function as mult a=0.5, Y * (1 + 0.5 (sigmoid(W Y) - 1)): see its row."]
    # curvature vs alpha
    lines += ["", "## Curvature vs gate strength alpha (curved task, mult; 0 = ungated, 1 = sigmoid)", "",
              "| alpha | kappa iso | " + " | ".join(f"kappa cond {c:g}" for c in CONDS)
              + " | relative | kappa at init | test acc |" + pk_head,
              "|---|---|" + "---|" * len(CONDS) + "---|---|---|" + pk_rule]
    alpha_means = []
    for label, (_, _, alpha) in VARIANTS.items():
        if alpha is None or label == "silu":
            continue
        rs = [r for r in curved if r["variant"] == label]
        if not rs:
            continue
        alpha_means.append((alpha, np.mean(f(rs, "kappa_iso")),
                            np.mean(f(rs, "kappa_paper")) if paper else math.nan))
        lines.append(f"| {alpha:g} | {_fmt(f(rs, 'kappa_iso'))} | "
                     + " | ".join(_fmt(f(rs, f"kappa_cond{c:g}")) for c in CONDS)
                     + f" | {_fmt(f(rs, 'kappa_iso_relative'))} | {_fmt(f(rs, 'kappa_init_iso'))} | "
                     f"{_fmt(f(rs, 'test_acc'))} |" + pk(rs))
    if len(alpha_means) > 1:
        for col, name in ((1, "kappa"), (2, "paper kappa"))[: 1 + paper]:
            ks = [m[col] for m in sorted(alpha_means)]
            mono = all(a < b for a, b in zip(ks, ks[1:]))
            lines += [""] * (col == 1) + [f"Mean trained {name} strictly increasing in alpha: **{mono}**."]
        lo, hi = min(m[0] for m in alpha_means), max(m[0] for m in alpha_means)
        by = {(int(r["seed"]), float(r["alpha"])): r for r in curved
              if r["alpha"] != "" and r["variant"] != "silu"}
        paired = [s for s in seeds if (s, lo) in by and (s, hi) in by]
        keys = [("kappa_iso", "kappa"), ("kappa_iso_relative", "relative kappa"),
                ("kappa_init_iso", "kappa at init")] + [("kappa_paper", "paper kappa")] * paper
        for key, name in keys:
            up = sum(float(by[(s, hi)][key]) > float(by[(s, lo)][key]) for s in paired)
            lines.append(f"Paired by seed, {name} at alpha={hi:g} > alpha={lo:g}: {up}/{len(paired)} seeds.")
    flat = [r for r in rows if float(r["kappa_iso_plateau_points"]) == 9]
    spread = max(float(r["kappa_iso_plateau_spread"]) for r in rows)
    lines += ["", f"eps plateau: flat over the whole grid [1e-4, 1e-2] in {len(flat)}/{len(rows)} trained "
              f"sweeps; largest spread (max/min - 1) {spread:.1e}."]
    # anisotropic orders
    order = {}
    for metric in ["iso"] + [f"cond{c:g}" for c in CONDS]:
        means = {lab: np.mean(f([r for r in curved if r["variant"] == lab], f"kappa_{metric}"))
                 for lab in VARIANTS if any(r["variant"] == lab for r in curved)}
        order[metric] = [lab for lab, _ in sorted(means.items(), key=lambda kv: kv[1])]
    same = all(o == order["iso"] for o in order.values())
    lines += ["", "## Anisotropic metrics", "",
              f"Order of the variants by mean kappa, lowest first, isotropic: {', '.join(order['iso'])}.",
              "Same order under every diagonal precision of condition number "
              f"{', '.join(f'{c:g}' for c in CONDS)}: **{same}**."]
    if not same:
        for m, o in order.items():
            lines.append(f"- {m}: {', '.join(o)}")
    # accuracy vs curvature
    r_all = _pearson(f(curved, "kappa_iso"), f(curved, "test_acc"))
    r_rel = _pearson(f(curved, "kappa_iso_relative"), f(curved, "test_acc"))
    r_c = _pearson(_centered(curved, "kappa_iso"), _centered(curved, "test_acc"))
    labs = [lab for lab in VARIANTS if any(r["variant"] == lab for r in curved)]
    mk = [np.mean(f([r for r in curved if r["variant"] == lab], "kappa_iso")) for lab in labs]
    ma = [np.mean(f([r for r in curved if r["variant"] == lab], "test_acc")) for lab in labs]
    lines += ["", "## Test accuracy vs curvature (curved task)", "",
              "| Pearson r (test acc, kappa) | value | n |", "|---|---|---|",
              f"| all runs, kappa iso | {r_all:+.3f} | {len(curved)} |",
              f"| all runs, relative kappa | {r_rel:+.3f} | {len(curved)} |",
              f"| seed-centred runs, kappa iso | {r_c:+.3f} | {len(curved)} |",
              f"| variant means, kappa iso | {_pearson(mk, ma):+.3f} | {len(labs)} |"]
    if paper:
        mp = [np.mean(f([r for r in curved if r["variant"] == lab], "kappa_paper")) for lab in labs]
        r_paper = _pearson(f(curved, "kappa_paper"), f(curved, "test_acc"))
        lines += [f"| all runs, paper kappa | {r_paper:+.3f} | {len(curved)} |",
                  f"| variant means, paper kappa | {_pearson(mp, ma):+.3f} | {len(labs)} |"]
    lines += ["", "The paper reports r = 0.7886 (test accuracy vs isotropic attention curvature).",
              "See curvature_vs_accuracy.png."]
    # linear control
    if linear:
        lines += ["", "## Linear-boundary control (label 1[0.6 c1 + 0.8 c2 - 0.3 > 0])", "",
                  "| variant | test acc | paired gain vs ungated | seeds better / worse | kappa |",
                  "|---|---|---|---|---|"]
        base = {int(r["seed"]): float(r["test_acc"]) for r in linear if r["variant"] == "ungated"}
        for label in VARIANTS:
            rs = [r for r in linear if r["variant"] == label]
            if not rs:
                continue
            d = [float(r["test_acc"]) - base[int(r["seed"])] for r in rs if int(r["seed"]) in base]
            better, worse = sum(x > 0 for x in d), sum(x < 0 for x in d)
            lines.append(f"| {label} | {_fmt(f(rs, 'test_acc'))} | {_fmt(d)} | {better} / {worse} | "
                         f"{_fmt(f(rs, 'kappa_iso'))} |")
        lines += ["", f"Bayes-optimal test accuracy (Monte Carlo): {_fmt(_bayes(rows, 'linear'))}."]
        cb = {int(r["seed"]): float(r["test_acc"]) for r in curved if r["variant"] == "ungated"}
        gain_c = [float(r["test_acc"]) - cb[int(r["seed"])] for r in curved if r["variant"] in GATED]
        gain_l = [float(r["test_acc"]) - base[int(r["seed"])] for r in linear if r["variant"] in GATED]
        lines += ["", "Paired gain of the multiplicative gates (every variant except ungated and SiLU) over "
                  f"ungated: curved {_fmt(gain_c)} (better in {sum(g > 0 for g in gain_c)}/{len(gain_c)}), "
                  f"linear {_fmt(gain_l)} (better in {sum(g > 0 for g in gain_l)}/{len(gain_l)})."]
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    _scatter(curved, out / "curvature_vs_accuracy.png", r_all)
    return text


def _scatter(curved: list[dict], path: Path, r: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for label in VARIANTS:
        rs = [x for x in curved if x["variant"] == label]
        if rs:
            axes[0].scatter([float(x["kappa_iso"]) for x in rs], [float(x["test_acc"]) for x in rs], s=18,
                            label=label)
    axes[0].set(xlabel="kappa (isotropic, trained)", ylabel="test accuracy",
                title=f"curved task, Pearson r = {r:+.3f}")
    axes[0].legend(fontsize=7)
    on_axis = [x for x in curved if x["alpha"] != "" and x["variant"] != "silu"]
    pts = sorted((float(x["alpha"]), float(x["kappa_iso"]), float(x["kappa_init_iso"]),
                  float(x["kappa_iso_relative"])) for x in on_axis)
    al = sorted({p[0] for p in pts})
    mean = lambda col: [np.mean([p[col] for p in pts if p[0] == a]) for a in al]  # noqa: E731
    axes[1].plot(al, mean(1), "o-", label="kappa, trained")
    axes[1].plot(al, mean(2), "o-", label="kappa, init")
    axes[1].set(xlabel="alpha", ylabel="mean kappa (isotropic, log)", yscale="log",
                title="curvature vs gate strength (mult)")
    twin = axes[1].twinx()
    twin.plot(al, mean(3), "s--", color="C3", label="relative kappa, trained")
    twin.set_ylabel("mean kappa / slope", color="C3")
    h1, l1 = axes[1].get_legend_handles_labels()
    h2, l2 = twin.get_legend_handles_labels()
    axes[1].legend(h1 + h2, l1 + l2, fontsize=8, loc="center right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_boundaries(models: dict[str, CurvedBoundaryModel], tcfg: TaskConfig, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tsmix.models.synthetic.curved_boundary import label as true_label

    panels = ["ground truth", *models]
    fig, axes = plt.subplots(2, math.ceil(len(panels) / 2), figsize=(3.3 * math.ceil(len(panels) / 2), 6.6))
    for ax, name in zip(axes.flat, panels):
        if name == "ground truth":
            g = torch.linspace(-2, 2, 201)
            cx, cy = torch.meshgrid(g, g, indexing="xy")
            p = true_label(torch.stack([cx.flatten(), cy.flatten()], -1), tcfg.task, tcfg.frequency)
            p = p.view(201, 201)
        else:
            cx, cy, p = predict_grid(models[name], tcfg, resolution=121, draws=4)
        ax.contourf(cx.numpy(), cy.numpy(), p.numpy(), levels=[0, 0.5, 1], colors=["#d6e4f0", "#f4d6c6"])
        g = torch.linspace(-2, 2, 201)
        tx, ty = torch.meshgrid(g, g, indexing="xy")
        tp = true_label(torch.stack([tx.flatten(), ty.flatten()], -1), tcfg.task, tcfg.frequency)
        tp = tp.view(201, 201)
        ax.contour(tx.numpy(), ty.numpy(), tp.numpy(), levels=[0.5], colors="k", linewidths=0.8)
        if name != "ground truth":
            ax.contour(cx.numpy(), cy.numpy(), p.numpy(), levels=[0.5], colors="C3", linewidths=1.0)
        ax.set_title(name, fontsize=9)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"{tcfg.task} task, seed 0: orange P(y=1) > 0.5, blue < 0.5; true boundary black, "
                 "learned boundary red", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--n-train", type=int, default=4000)
    ap.add_argument("--noise", type=float, default=0.3)
    ap.add_argument("--frequency", type=float, default=2.5, help="k in sin(k theta) of the curved rule")
    ap.add_argument("--tasks", default="curved,linear")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated labels, curved task")
    ap.add_argument("--linear-variants", default=",".join(LINEAR_LABELS), help="labels, linear control")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent)
    ap.add_argument("--summarize-only", action="store_true", help="re-read results.csv, rewrite summary")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    csv_path = args.out / "results.csv"
    if args.summarize_only:
        with csv_path.open() as fh:
            rows = list(csv.DictReader(fh))
        print(summarize(rows, args.out, _meta(rows)))
        return 0
    labels = {"curved": [v.strip() for v in args.variants.split(",")],
              "linear": [v.strip() for v in args.linear_variants.split(",")]}
    unknown = [v for vs in labels.values() for v in vs if v not in VARIANTS]
    if unknown:
        ap.error(f"unknown variants {unknown}; choose from {list(VARIANTS)}")
    rows: list[dict] = []
    commit = git_commit()
    t0 = time.perf_counter()
    for task in args.tasks.split(","):
        tcfg = TaskConfig(task=task, n_train=args.n_train, noise=args.noise, frequency=args.frequency)
        for seed in range(args.seeds):
            data = make_data(tcfg, seed)
            keep = {}
            for label in labels[task]:
                trcfg = TrainConfig(epochs=args.epochs, seed=seed)
                row, model = run_one(task, label, seed, tcfg, trcfg, data)
                row["commit"] = commit
                rows.append(row)
                if task == "curved" and seed == 0 and label in PLOT_LABELS:
                    keep[label] = model
                print(f"[{time.perf_counter() - t0:7.1f}s] {task:6s} seed {seed} {label:20s} "
                      f"acc {row['test_acc']:.4f} kappa {row['kappa_iso']:.4f} "
                      f"rel {row['kappa_iso_relative']:.4f}",
                      flush=True)
                with csv_path.open("w", newline="") as fh:  # rewritten each run: a crash keeps what finished
                    w = csv.DictWriter(fh, fieldnames=list(rows[0]))
                    w.writeheader()
                    w.writerows(rows)
            if keep:
                plot_boundaries(keep, tcfg, args.out / "decision_boundaries.png")
    print(summarize(rows, args.out, _meta(rows)))
    print(f"total {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
