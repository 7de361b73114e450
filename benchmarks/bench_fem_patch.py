"""Issue #21: FEM mixer overhead relative to softmax at the encoders' shapes, before vs after.

One process, one thread, process CPU time; in every cell the variants alternate round by round
(median), so load drift on the shared machine hits them alike and only the ratios are read.

* **Ratios**: fwd+bwd of one bidirectional mixer layer (as ``tsmix benchmark-speed --shapes``)
  at the patch shape (B·7 sequences × 42 patches, D=16, 4 heads) and the variate shape
  (B sequences × 7/21 tokens, D=128, 8 heads), each × softmax in the same cell. *before* is the
  pre-#21 forward rebuilt from the plain building blocks the mixers keep for ``reference`` and
  ``step`` (``cond.forward``, ``_project``, ``_pack``, ``_unpack``, ``_mix``): the same
  module and weights, the old data flow; *token-major* is the shared fast path
  (``FreeEnergyMixer.forward``: fem-aft's scans, what fem-aft ran before the channel-major
  path); *after* is ``forward`` (both channel-major on CPU at these shapes).
* **Breakdown**: the channel-major fast path cut into stages (fused projection, C's gain and
  modulation, gates/values/packing, prior read, unpack + combine, out projection), each timed
  fwd+bwd on detached inputs with a fixed upstream gradient, beside softmax's total.
* **Components** (``--sections components``): each FEM component (C, L, T, G) switched off in
  turn and all at once, at the paper batch of both shapes, × softmax in the same cell.

    OMP_NUM_THREADS=1 python benchmarks/bench_fem_patch.py --out benchmarks/bench_fem_patch.txt
    OMP_NUM_THREADS=1 python benchmarks/bench_fem_patch.py --sections components \\
        --out benchmarks/bench_fem_components.txt
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import torch

import tsmix
from tsmix.mixers._fem_core import FreeEnergyMixer

SHAPES = {  # name -> (D, heads, [(label, sequences, tokens)])
    "patch": (16, 4, [("B=32 (224×42)", 224, 42), ("B=128 (896×42)", 896, 42)]),
    "variate": (
        128,
        8,
        [
            ("B=32 (32×7)", 32, 7),
            ("B=32 (32×21)", 32, 21),
            ("B=128 (128×7)", 128, 7),
            ("B=128 (128×21)", 128, 21),
        ],
    ),
}
FEM = ("fem-sm", "fem-aft")


def before_forward(m, x: torch.Tensor) -> torch.Tensor:
    """The FEM forward before the fast path: the plain layout end to end."""
    s = m.cond(x) if m.cond is not None else None
    pin, v, lam, g, beta = m._project(x, s)
    r = m._prior_read(pin, m._pack(v, beta))
    return m.out(m._mix(*m._unpack(r, beta), lam, g))


def fwd_bwd(fn: Callable[[], object], leaves: list[torch.Tensor], grads: list[torch.Tensor] | None):
    """A closure running ``fn`` forward and backward against fixed random upstream gradients."""
    state: dict[str, list[torch.Tensor]] = {}

    def run() -> None:
        for t in leaves:
            t.grad = None
        out = fn()
        outs = [
            o
            for o in (out if isinstance(out, (tuple, list)) else [out])
            if isinstance(o, torch.Tensor) and o.requires_grad
        ]
        if "g" not in state:
            state["g"] = grads or [torch.randn_like(o) for o in outs]
        torch.autograd.backward(outs, state["g"])

    return run


def alternate(fns: dict[str, Callable[[], None]], rounds: int) -> dict[str, float]:
    """Median ms of each fn over ``rounds`` rounds cycling through all of them (process CPU time;
    each round: one untimed call, then two timed)."""
    for f in fns.values():
        f()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            f()  # untimed: the allocator settles on this variant's sizes (page faults not counted)
            t0 = time.process_time()
            f()
            f()
            times[k].append((time.process_time() - t0) / 2)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def build(name: str, dim: int, heads: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return tsmix.build_mixer(name, dim, heads=heads, causal=False)


def _cell(
    mods: dict[str, torch.nn.Module], seqs: int, tokens: int, dim: int, rounds: int
) -> dict[str, float]:
    x = torch.randn(seqs, tokens, dim, requires_grad=True)
    gy = [torch.randn(seqs, tokens, dim)]
    fns = {"softmax": fwd_bwd(lambda: mods["softmax"](x), [x], gy)}
    for n in FEM:
        m = mods[n]
        fns[f"{n}/before"] = fwd_bwd(lambda m=m: before_forward(m, x), [x], gy)
        fns[f"{n}/token-major"] = fwd_bwd(lambda m=m: FreeEnergyMixer.forward(m, x), [x], gy)
        fns[f"{n}/after"] = fwd_bwd(lambda m=m: m(x), [x], gy)
    return alternate(fns, rounds)


def ratios(rounds: int, log: Callable[[str], None]) -> None:
    log("## fwd+bwd × softmax in the same cell (before → token-major fast path → after)\n")
    for shape, (dim, heads, cells) in SHAPES.items():
        log(f"### {shape}: D={dim}, {heads} heads\n")
        cols = " | ".join(f"{n} before | {n} token-major | {n} after" for n in FEM)
        log(f"| cell | softmax ms | {cols} |")
        log("|---|---:|" + "---:|---:|---:|" * len(FEM))
        mods = {n: build(n, dim, heads) for n in ("softmax", *FEM)}
        for label, seqs, tokens in cells:
            ms = _cell(mods, seqs, tokens, dim, rounds)
            sm = ms["softmax"]
            variants = ("before", "token-major", "after")
            row = " | ".join(" | ".join(f"{ms[f'{n}/{v}'] / sm:.2f}" for v in variants) for n in FEM)
            log(f"| {label} | {sm:.1f} | {row} |")
        log("")


# Each FEM component switched off in turn (FEMOptions), and all that can be at once: what each
# costs at the encoders' shapes, against softmax in the same cell. "bare" keeps the prior and the
# fused in/out projections only; T has no effect without L (it gates between mu and F).
COMPONENTS = {
    "all on": {},
    "no C": {"cond": False},
    "no L (no T)": {"lse": False},
    "no T": {"temperature": False},
    "no G": {"outer_gate": False},
    "bare": {"cond": False, "lse": False, "outer_gate": False},
}


def components(rounds: int, log: Callable[[str], None]) -> None:
    log("## What each FEM component costs: fwd+bwd × softmax in the same cell, components switched off\n")
    for shape, (dim, heads, cells) in SHAPES.items():
        label, seqs, tokens = next(c for c in cells if c[0].startswith("B=128 "))  # the paper batch
        log(f"### {shape} {label}: D={dim}, {heads} heads\n")
        log("| mixer | softmax ms | " + " | ".join(COMPONENTS) + " |")
        log("|---|---:|" + "---:|" * len(COMPONENTS))
        x = torch.randn(seqs, tokens, dim, requires_grad=True)
        gy = [torch.randn(seqs, tokens, dim)]
        for n in FEM:
            mods = {"softmax": build("softmax", dim, heads)}
            for c, opts in COMPONENTS.items():
                torch.manual_seed(0)
                mods[c] = tsmix.build_mixer(n, dim, heads=heads, causal=False, **opts)
            ms = alternate({k: fwd_bwd(lambda m=m, x=x: m(x), [x], gy) for k, m in mods.items()}, rounds)
            cols = " | ".join(f"{ms[c] / ms['softmax']:.2f}" for c in COMPONENTS)
            log(f"| {n} | {ms['softmax']:.1f} | {cols} |")
        log("")


def _leaf(t):
    return None if t is None else t.detach().requires_grad_(t.requires_grad)


def breakdown(shape: str, rounds: int, log: Callable[[str], None]) -> None:
    dim, heads, cells = SHAPES[shape]
    _, seqs, tokens = cells[-1]
    log(
        f"## Breakdown of the fast path at the {shape} shape ({seqs}×{tokens}, D={dim}, {heads} heads), "
        "ms fwd+bwd\n"
    )
    sm = build("softmax", dim, heads)
    x = torch.randn(seqs, tokens, dim, requires_grad=True)
    for name in FEM:
        stages = _stages_sm if name == "fem-sm" else _stages_aft
        ms = stages(name, build(name, dim, heads), sm, x, rounds)
        total = ms[f"{name} (whole mixer)"]
        log(f"| {name} stage | ms | share of {name} |")
        log("|---|---:|---:|")
        for k, v in ms.items():
            log(f"| {k} | {v:.1f} | {v / total:.0%} |")
        parts = sum(v for k, v in ms.items() if "whole" not in k)
        log(f"| sum of stages | {parts:.1f} | {parts / total:.0%} |\n")


def _stages_sm(name: str, m, sm: torch.nn.Module, x: torch.Tensor, rounds: int) -> dict[str, float]:
    """fem-sm's channel-major path (``_forward_t``) cut into its stages."""
    with torch.no_grad():  # C's output projection starts at 0; any value costs the same
        m.cond.proj.normal_(0.0, 0.1)
    b, n, _ = x.shape
    zt = _leaf(torch.addmm(m.in_proj.bias[:, None], m.in_proj.weight, x.reshape(-1, x.shape[-1]).t()))
    parts = {k: _leaf(v) for k, v in m._t_parts(x).items()}
    pt = _leaf(m._t_weights(parts, b, n))
    u, lam, g, beta = (_leaf(t) for t in m._t_columns(parts, b, n))
    y = _leaf(m._t_read(pt, u, lam, g, beta, b, n))
    xt, w, bias = x.reshape(-1, x.shape[-1]).t(), m.in_proj.weight, m.in_proj.bias
    pl = list(parts.values())
    stages = {
        "softmax (whole mixer)": fwd_bwd(lambda: sm(x), [x], None),
        f"{name} (whole mixer)": fwd_bwd(lambda: m(x), [x], None),
        "C: gain and z × gain (cond.modulate_t)": fwd_bwd(lambda: m.cond.modulate_t(zt, x), [x, zt], None),
        "in_proj": fwd_bwd(lambda: torch.addmm(bias[:, None], w, xt), [x], None),
        "attention weights (q, k clamp, scores, softmax)": fwd_bwd(
            lambda: m._t_weights(parts, b, n), pl, None
        ),
        "gates, bound, exp, pack": fwd_bwd(lambda: m._t_columns(parts, b, n), pl, None),
        "read (bmm), unpack, log, combine": fwd_bwd(
            lambda: m._t_read(pt, u, lam, g, beta, b, n), [pt, u, lam, g, beta], None
        ),
        "out projection": fwd_bwd(
            lambda: torch.nn.functional.linear(y.t(), m.out.weight, m.out.bias), [y], None
        ),
    }
    return alternate(stages, rounds)


def _stages_aft(name: str, m, sm: torch.nn.Module, x: torch.Tensor, rounds: int) -> dict[str, float]:
    """fem-aft's channel-major path (``_forward_t``, the read one ``bmm`` by the decay kernel) cut
    into its stages."""
    from tsmix.ops import fem_priors as P

    with torch.no_grad():  # C's output projection starts at 0; any value costs the same
        m.cond.proj.normal_(0.0, 0.1)
    n = x.shape[1]
    xt, w, bias = x.reshape(-1, x.shape[-1]).t(), m.in_proj.weight, m.in_proj.bias
    zt = _leaf(torch.addmm(bias[:, None], w, xt))
    parts = {k: _leaf(v) for k, v in m._t_parts(x).items()}
    pl = list(parts.values())
    v, ex, beta = (_leaf(t) for t in m._t_values(parts))
    key = _leaf(parts["key"].clamp(-m.options.key_cap, m.options.key_cap))
    lam, g = (_leaf(t) for t in m._t_gates(parts))
    def log_decay():
        return -torch.nn.functional.softplus(m.decay_raw)

    mu, z = (_leaf(t) for t in P.aft_read_t(key, log_decay(), [v, ex], n, False))
    y = _leaf(m._t_post(mu, z, lam, g, beta))
    stages = {
        "softmax (whole mixer)": fwd_bwd(lambda: sm(x), [x], None),
        f"{name} (whole mixer)": fwd_bwd(lambda: m(x), [x], None),
        "C: gain and z × gain (cond.modulate_t)": fwd_bwd(lambda: m.cond.modulate_t(zt, x), [x, zt], None),
        "in_proj": fwd_bwd(lambda: torch.addmm(bias[:, None], w, xt), [x], None),
        "gates (lam, g)": fwd_bwd(lambda: m._t_gates(parts), pl, None),
        "values (bound, exp), key clamp": fwd_bwd(
            lambda: (*m._t_values(parts), parts["key"].clamp(-m.options.key_cap, m.options.key_cap)), pl, None
        ),
        "prior read (weights, bmm by the kernel, normalize)": fwd_bwd(
            lambda: P.aft_read_t(key, log_decay(), [v, ex], n, False),
            [key, v, ex],
            None,
        ),
        "log, combine": fwd_bwd(lambda: m._t_post(mu, z, lam, g, beta), [mu, z, lam, g, beta], None),
        "out projection": fwd_bwd(lambda: m._t_out(y, x.shape), [y], None),
    }
    return alternate(stages, rounds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", default=None, help="also write the report here (atomically)")
    ap.add_argument("--sections", nargs="+", choices=("ratios", "breakdown", "components"),
                    default=["ratios", "breakdown"], help="which tables (components: each FEM part off)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    lines: list[str] = []

    def log(s: str) -> None:
        print(s, flush=True)
        lines.append(s)

    t0 = time.time()
    log("# FEM overhead at the encoders' shapes (issue #21)\n")
    log(
        f"Command: `OMP_NUM_THREADS=1 python {' '.join(sys.argv)}`; torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread, {args.rounds} alternating rounds "
        "(each: 1 untimed + 2 timed passes, median), "
        f"process CPU time; load average at the start {' '.join(f'{v:.2f}' for v in os.getloadavg())}.\n"
    )
    if "ratios" in args.sections:
        ratios(args.rounds, log)
    if "breakdown" in args.sections:
        for shape in SHAPES:
            breakdown(shape, args.rounds, log)
    if "components" in args.sections:
        components(args.rounds, log)
    log(f"Load average at the end {' '.join(f'{v:.2f}' for v in os.getloadavg())}; {time.time() - t0:.0f} s.")
    if args.out:
        from tsmix.atomic import write_text_atomic

        write_text_atomic(args.out, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
