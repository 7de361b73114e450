"""Training-step, mixer, inference and lookback speed of the forecasting encoders (issue #21).

Every figure is process CPU time (time.process_time) at ONE thread, the median over rounds that
alternate between the compared variants, so that a change of machine load hits them alike; a
ratio always comes from one run. Sections (any combination; default: all but --official,
--profile, --scaling and --kernels):

  --step        PatchTST paper preset, ETTh1 L=336 H=96 batch 128, Adam: tsmix softmax encoder,
                the same model with SDPA forced for attention (the kernel it replaced at head
                dim 4), with the token-major small-head softmax (the form before the channel-major
                one), with the channel-major read unblocked (one autograd graph over the whole
                batch, the form before the blocked one), with the feed-forward over all tokens at once
                (before its token blocks), and the official PatchTST model with
                ``--official PATH`` (a checkout of github.com/yuqinie98/PatchTST; its code is
                imported from there, never copied).
  --mixers      forward+backward of every mixer at the patch shape (896 x 42 tokens, D=16, 4 heads)
                and the variate shape (B x 7 tokens, D=128, 8 heads), batch as an axis; ratios to
                softmax in the same cell.
  --inference   predict of the paper-preset encoders: p50 latency of one window, windows/s at 128.
  --lookbacks   training step vs L in {336, 720, 1440, 2880} (patch encoder, the paper preset of
                ``--lookback-dataset``, default ETTh1) for the linear-time mixers and softmax:
                epoch cost = step x steps/epoch, fitted exponent.
  --profile     (only when asked) the tsmix step op by op at 1 and at 2 threads: self time per
                step of each op and its gain from the second thread.
  --scaling     (only when asked) thread scaling of the step, tsmix softmax (eager, or as
                ``--scaling-modes`` lists: bf16-mixed, compile) and (with ``--official``) the
                official model: 1 and 2 threads alternating in one process, wall
                time for every figure (the --step section times 1 thread in process CPU time and 2
                threads in wall time, runs apart: a ratio across those mixes clocks and runs).
  --kernels     (only when asked) the step's largest kernels alone, at the step's own shapes, at
                1 and 2 threads, beside a memory-streaming copy and a cache-friendly GEMM: what the
                second core can give each kind of work on this machine, outside the step.

    python benchmarks/bench_step.py --official /tmp/patchtst --out benchmarks/bench_step.txt
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from tsmix.provenance import processor

PATCH = dict(batch=896, tokens=42, dim=16, heads=4)  # 128 windows x 7 channels, L=336 P=16 S=8
VARIATE = dict(batch=128, tokens=7, dim=128, heads=8)  # iTransformer on ETTh1: one token per variate


def _clock() -> Callable[[], float]:
    """Process CPU time at one thread (robust to other jobs); wall time with more threads, where CPU
    time would add the threads up and hide the speed-up."""
    return time.process_time if torch.get_num_threads() == 1 else time.perf_counter


def _alternate(fns: dict[str, Callable[[], None]], rounds: int, warmup: int = 1) -> dict[str, float]:
    """Median seconds of each fn (:func:`_clock`), rounds interleaved."""
    for f in fns.values():
        for _ in range(warmup):
            f()
    clock = _clock()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            t0 = clock()
            f()
            times[k].append(clock() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


@contextlib.contextmanager
def _patched(owner: object, name: str, value: object) -> Iterator[None]:
    """``owner.name = value`` inside the block, restored after (a kernel choice to time)."""
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)


def sdpa_everywhere() -> contextlib.AbstractContextManager:
    """Force scaled_dot_product_attention in tsmix.ops.attention.attend (the previous kernel)."""
    from tsmix.ops import attention

    return _patched(attention, "SMALL_HEAD_DIM", 0)


def token_major_softmax() -> contextlib.AbstractContextManager:
    """Route the softmax mixer through its token-major small-head path (``attend``) instead of
    the channel-major ``_forward_t`` (the kernel before session 13)."""
    from tsmix.mixers import softmax

    return _patched(softmax, "small_attention", lambda *a, **k: False)


def whole_batch_read() -> contextlib.AbstractContextManager:
    """The channel-major softmax read as one autograd graph over the whole batch,
    ``v @ attention_weights_t(q, k)`` (the form before session 14's blocked ``attend_t``)."""
    from tsmix.mixers import softmax
    from tsmix.ops.attention import attention_weights_t

    def unblocked(q, k, v, causal: bool) -> torch.Tensor:
        return torch.bmm(v, attention_weights_t(q, k, causal))

    return _patched(softmax, "attend_t", unblocked)


def whole_batch_ffn() -> contextlib.AbstractContextManager:
    """The feed-forward over all tokens at once (the form before session 14's token blocks)."""
    from tsmix import block

    return _patched(block, "FFN_BLOCK_ELEMS", 1 << 62)


# ----------------------------------------------------------------------------- models


def _preset_cfg(model: str = "patchtst", mixer: str = "softmax", lookback: int = 336, dataset: str = "ETTh1"):
    from tsmix.forecasting import ForecasterConfig
    from tsmix.forecasting.presets import paper_preset

    preset = dict(paper_preset(model, dataset, 96), lookback=lookback)
    kw = {"mixer": mixer} if model != "dlinear" else {}
    return ForecasterConfig(model=model, **preset, **kw).resolved()


def _batches(cfg, data_dir: str | None, n: int, dataset: str = "ETTh1"):
    from tsmix.datasets import prepare

    data = prepare(dataset, cfg.lookback, cfg.horizon, data_dir=data_dir)
    gen = torch.Generator().manual_seed(0)
    it = data.train.batches(cfg.batch_size, shuffle=True, generator=gen, drop_last=True)
    return data, [next(it) for _ in range(n)]


def _official_model(path: str, cfg, channels: int) -> torch.nn.Module:
    root = os.path.join(path, "PatchTST_supervised")
    if not os.path.isdir(root):
        raise SystemExit(f"--official {path}: no PatchTST_supervised/ there; "
                         "fetch github.com/yuqinie98/PatchTST")
    sys.path.insert(0, root)
    try:
        from models.PatchTST import Model  # the official code, imported from the checkout
    finally:
        sys.path.remove(root)
    conf = SimpleNamespace(
        enc_in=channels, seq_len=cfg.lookback, pred_len=cfg.horizon, e_layers=cfg.layers, n_heads=cfg.heads,
        d_model=cfg.d_model, d_ff=cfg.d_ff, dropout=cfg.dropout, fc_dropout=cfg.dropout,
        head_dropout=cfg.head_dropout, individual=0, patch_len=cfg.patch_len, stride=cfg.stride,
        padding_patch=cfg.padding_patch, revin=1, affine=0, subtract_last=0, decomposition=0, kernel_size=25,
    )
    return Model(conf)


def _trainer(model: torch.nn.Module, batches, bf16: bool = False) -> Callable[[], None]:
    """One Adam step per call over ``batches`` in turn; ``bf16``: the forward and loss under bf16
    autocast, as the engine's ``precision="bf16-mixed"`` runs them."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    model.train()
    state = {"i": 0}
    cast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext

    def step() -> None:
        x, y = batches[state["i"] % len(batches)]
        state["i"] += 1
        with cast():
            loss = F.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def section_step(args, log) -> None:
    from tsmix.forecasting import build_model

    cfg = _preset_cfg()
    data, batches = _batches(cfg, args.data_dir, 4)

    def variant(context: Callable[[], contextlib.AbstractContextManager]) -> Callable[[], None]:
        """A training step of a fresh seed-0 model, run inside ``context()`` (the kernel choice)."""
        torch.manual_seed(0)
        step = _trainer(build_model(cfg, data.x_channels), batches)

        def run() -> None:
            with context():
                step()

        return run

    fns = {
        "tsmix softmax": variant(contextlib.nullcontext),
        "tsmix softmax, SDPA forced": variant(sdpa_everywhere),
        "tsmix softmax, token-major": variant(token_major_softmax),
        "tsmix softmax, whole-batch read": variant(whole_batch_read),
        "tsmix softmax, whole-batch FFN": variant(whole_batch_ffn),
    }
    if args.official:
        torch.manual_seed(0)
        fns["official PatchTST"] = _trainer(_official_model(args.official, cfg, data.x_channels), batches)
    t = _alternate(fns, args.rounds)
    steps = len(data.train) // cfg.batch_size
    log(f"## training step, PatchTST paper preset ETTh1 L=336 H=96 batch 128 ({steps} steps/epoch), "
        f"median of {args.rounds} alternating rounds")
    base = t.get("official PatchTST")
    for k, v in t.items():
        rel = f"  official/this {base / v:5.2f}x" if base else ""
        log(f"  {k:28s} {v * 1e3:8.1f} ms/step  epoch {v * steps:6.1f} s{rel}")
    log(f"  attention change alone: {t['tsmix softmax, SDPA forced'] / t['tsmix softmax']:.2f}x")
    log(f"  channel-major softmax alone: {t['tsmix softmax, token-major'] / t['tsmix softmax']:.2f}x")
    log(f"  blocked read alone: {t['tsmix softmax, whole-batch read'] / t['tsmix softmax']:.2f}x")
    log(f"  FFN token blocks alone: {t['tsmix softmax, whole-batch FFN'] / t['tsmix softmax']:.2f}x")


def section_profile(args, log) -> None:
    """Where the step's milliseconds go at 1 and at 2 threads, op by op (torch.profiler, self time
    per step), and how much each op gains from the second thread: the ops that do not scale are
    what keeps the step's thread scaling below the hardware's. Threads switch in-process (same
    model and batches); the step times are wall medians of alternating 1/2-thread rounds."""
    from torch.profiler import profile

    from tsmix.forecasting import build_model

    cfg = _preset_cfg()
    data, batches = _batches(cfg, args.data_dir, 4)
    torch.manual_seed(0)
    step = _trainer(build_model(cfg, data.x_channels), batches)
    wall: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(args.rounds):
        for th in (1, 2):
            torch.set_num_threads(th)
            step()  # the first step at a new thread count warms its pool
            t0 = time.perf_counter()
            step()
            wall[th].append(time.perf_counter() - t0)
    per_op: dict[int, dict[str, float]] = {}
    for th in (1, 2):
        torch.set_num_threads(th)
        step()
        with profile() as prof:
            for _ in range(3):
                step()
        per_op[th] = {e.key: e.self_cpu_time_total / 3e3 for e in prof.key_averages()}  # ms per step
    torch.set_num_threads(args.threads)
    t1, t2 = (statistics.median(wall[th]) for th in (1, 2))
    log(f"## step profile, PatchTST paper preset ETTh1 L=336 H=96 batch 128, tsmix softmax: "
        f"1 thread {t1 * 1e3:.0f} ms, 2 threads {t2 * 1e3:.0f} ms (wall, median of {args.rounds} "
        f"alternating rounds): x{t1 / t2:.2f}")
    log("  op self time, ms per step (profiled, 3 steps each; the profiler adds its own overhead)")
    log(f"  {'op':44s} {'1 thread':>9s} {'2 threads':>9s} {'gain':>6s}")
    top = sorted(per_op[1], key=lambda k: -per_op[1][k])[:25]
    for k in top:
        a, b = per_op[1][k], per_op[2].get(k, 0.0)
        log(f"  {k[:44]:44s} {a:9.1f} {b:9.1f} {a / b if b else float('nan'):6.2f}")
    rest = [k for k in per_op[1] if k not in top]
    a, b = sum(per_op[1][k] for k in rest), sum(per_op[2].get(k, 0.0) for k in rest)
    log(f"  {'(every other op)':44s} {a:9.1f} {b:9.1f} {a / b if b else float('nan'):6.2f}")
    a, b = sum(per_op[1].values()), sum(per_op[2].values())
    log(f"  {'total':44s} {a:9.1f} {b:9.1f} {a / b:6.2f}")


def section_scaling(args, log) -> None:
    """The second thread's gain on the whole step, measured like for like: one process, 1 and 2
    threads in alternating rounds, wall time throughout (steal time and waits count for both)."""
    from tsmix.forecasting import build_model

    cfg = _preset_cfg()
    data, batches = _batches(cfg, args.data_dir, 4)
    fns = {}
    for mode in args.scaling_modes:  # the engine's options: precision="bf16-mixed", compile=True
        torch.manual_seed(0)
        model = build_model(cfg, data.x_channels)
        name = "tsmix softmax" + ("" if mode == "eager" else f", {mode}")
        fns[name] = _trainer(torch.compile(model) if mode == "compile" else model, batches,
                             bf16=mode == "bf16-mixed")
        if mode == "compile":  # compiled on the first calls: kept out of the timed rounds
            for th in (1, 2):
                torch.set_num_threads(th)
                fns[name]()
                fns[name]()
    if args.official:
        torch.manual_seed(0)
        fns["official PatchTST"] = _trainer(_official_model(args.official, cfg, data.x_channels), batches)
    wall: dict[tuple[str, int], list[float]] = {(k, th): [] for k in fns for th in (1, 2)}
    for _ in range(args.rounds):
        for th in (1, 2):
            torch.set_num_threads(th)
            for k, step in fns.items():
                step()  # the first step at a new thread count warms its pool
                t0 = time.perf_counter()
                step()
                wall[k, th].append(time.perf_counter() - t0)
    torch.set_num_threads(args.threads)
    med = {key: statistics.median(v) for key, v in wall.items()}
    log(f"## thread scaling of the training step, PatchTST paper preset ETTh1 L=336 H=96 batch 128: "
        f"wall ms, median of {args.rounds} rounds alternating 1 and 2 threads in one process")
    log(f"  {'model':28s} {'1 thread':>9s} {'2 threads':>9s} {'gain':>6s}")
    for k in fns:
        a, b = med[k, 1] * 1e3, med[k, 2] * 1e3
        log(f"  {k:28s} {a:9.1f} {b:9.1f} {a / b:6.2f}")
    if args.official and "eager" in args.scaling_modes:
        o, t = "official PatchTST", "tsmix softmax"
        log(f"  official/tsmix: {med[o, 1] / med[t, 1]:.2f}x at 1 thread, "
            f"{med[o, 2] / med[t, 2]:.2f}x at 2 threads")


def _kernels() -> dict[str, Callable[[], object]]:
    """The patch step's big kernels alone (PatchTST ETTh preset: 896 sequences x 42 patches,
    d_model 16, 4 heads, FFN 128; 37,632 tokens), plus two controls: a 64 MiB copy (bound by
    memory bandwidth) and a 1024^3 GEMM (bound by arithmetic)."""
    gen = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen)

    t, f, d, m, n, dh = 896 * 42, 128, 16, 896 * 4, 42, 4
    x, w1, w2, hid, ghid = rand(t, d), rand(d, f), rand(f, d), rand(t, f), rand(t, f)
    q, k = rand(m, dh, n), rand(m, dh, n)  # channel-major head blocks, as attention_t holds them
    s = rand(m, n, n)
    p, gp = torch.softmax(s, -1), rand(m, n, n)
    bits = torch.empty(t * f // 4, dtype=torch.int64)  # fast_dropout's draw for one (t, f) mask
    src, dst = rand(16 << 20), torch.empty(16 << 20)
    a, b = rand(1024, 1024), rand(1024, 1024)
    return {
        "FFN up mm (37632,16)x(16,128)": lambda: x @ w1,
        "FFN down mm (37632,128)x(128,16)": lambda: hid @ w2,
        "GELU (37632,128)": lambda: F.gelu(hid),
        "GELU backward": lambda: torch.ops.aten.gelu_backward(ghid, hid),
        "elementwise mul (37632,128)": lambda: hid * ghid,
        "score bmm (3584,42,4)x(3584,4,42)": lambda: torch.bmm(q.transpose(1, 2), k),
        "softmax (3584,42,42)": lambda: torch.softmax(s, -1),
        "softmax backward": lambda: torch.ops.aten._softmax_backward_data(gp, p, -1, p.dtype),
        "dropout draw (int64 random_, 1.2M)": lambda: bits.random_(-(2**63), 2**63 - 1),
        "control: copy 64 MiB": lambda: dst.copy_(src),
        "control: GEMM 1024^3": lambda: a @ b,
    }


def section_kernels(args, log) -> None:
    """Each kernel alone at 1 and at 2 threads, wall time, medians of alternating rounds: the
    second core's gain per kind of work. The step cannot gain more than the kernels it is made of
    (:func:`section_profile` weighs them)."""
    fns = _kernels()
    times: dict[int, dict[str, list[float]]] = {1: {k: [] for k in fns}, 2: {k: [] for k in fns}}
    for _ in range(args.rounds):
        for th in (1, 2):
            torch.set_num_threads(th)
            for k, f in fns.items():
                f()  # warm: the pool at this thread count, the output's memory
                t0 = time.perf_counter()
                f()
                f()
                times[th][k].append((time.perf_counter() - t0) / 2)
    torch.set_num_threads(args.threads)
    log(f"## kernels of the patch step alone: wall ms at 1 and 2 threads (median of {args.rounds} "
        "alternating rounds) and the gain from the second thread")
    log(f"  {'kernel':40s} {'1 thread':>9s} {'2 threads':>9s} {'gain':>6s}")
    for k in fns:
        a, b = (statistics.median(times[th][k]) * 1e3 for th in (1, 2))
        log(f"  {k:40s} {a:9.2f} {b:9.2f} {a / b:6.2f}")


def section_mixers(args, log) -> None:
    from tsmix import available_mixers, build_mixer, mixer_spec

    names = args.mixer_names or available_mixers()
    names = ["softmax"] + [n for n in names if n != "softmax"]
    for label, shape in (("patch", PATCH), ("variate", VARIATE)):
        for scale in args.batch_scales:
            b, n, d, h = max(1, int(shape["batch"] * scale)), shape["tokens"], shape["dim"], shape["heads"]
            gen = torch.Generator().manual_seed(0)
            x = torch.randn(b, n, d, generator=gen, requires_grad=True)
            g = torch.randn(b, n, d, generator=gen)
            fns = {}
            for name in names:
                spec = mixer_spec(name)
                torch.manual_seed(0)
                m = build_mixer(name, d, heads=h, causal=not spec.supports_bidirectional)

                def run(m=m, x=x, g=g) -> None:
                    m.zero_grad(set_to_none=True)
                    m(x).backward(g)

                fns[name] = run
            t = _alternate(fns, args.rounds)
            log(f"## mixer fwd+bwd, {label} shape: B={b} N={n} D={d} heads={h}")
            for name in names:
                steps = _energy_steps(name)
                per = f"  per step {t[name] / t['softmax'] / steps:5.2f}x" if steps > 1 else ""
                log(f"  {name:18s} {t[name] * 1e3:8.2f} ms  {t[name] / t['softmax']:6.2f}x softmax{per}")


def _energy_steps(name: str) -> int:
    from tsmix.registry import mixer_spec

    opts = mixer_spec(name).options
    return int(getattr(opts(), "steps", 1)) if opts is not None else 1


def section_inference(args, log) -> None:
    from tsmix.forecasting import build_model

    log("## inference (eval, no_grad): p50 latency of one window, throughput at batch 128")
    for model in ("patchtst", "itransformer", "dlinear"):
        cfg = _preset_cfg(model)
        data, _ = _batches(cfg, args.data_dir, 0)
        torch.manual_seed(0)
        m = build_model(cfg, data.x_channels).eval()
        one = data.test.gather(torch.arange(1))[0]
        many = data.test.gather(torch.arange(128))[0]
        with torch.no_grad():
            for _ in range(3):
                m(one)
            lat = []
            for _ in range(args.rounds * 10):
                t0 = time.perf_counter()
                m(one)
                lat.append(time.perf_counter() - t0)
            t = _alternate({"b": lambda m=m, many=many: m(many)}, args.rounds)["b"]
        log(f"  {model:13s} p50 {statistics.median(lat) * 1e3:7.2f} ms/window (wall)  "
            f"{128 / t:8.0f} windows/s (cpu, batch 128)")


def section_lookbacks(args, log) -> None:
    from tsmix.forecasting import build_model

    mixers = ["softmax", "yb-spectral", "linear", "fem-aft", "gla"]
    ds = args.lookback_dataset
    batch = f", batch {args.lookback_batch}" if args.lookback_batch else ""
    log(f"## lookback scaling, {ds} patch encoder paper preset{batch}, {args.rounds} timed steps per cell")
    res: dict[str, list[tuple[int, float]]] = {m: [] for m in mixers}
    for lookback in args.lookback_values:
        cfg0 = _preset_cfg(lookback=lookback, dataset=ds)
        if args.lookback_batch:  # the preset's batch is 3.9 GB of activations at ETTm1 L=336
            cfg0 = dataclasses.replace(cfg0, batch_size=args.lookback_batch)
        data, batches = _batches(cfg0, args.data_dir, 2, ds)
        steps = len(data.train) // cfg0.batch_size
        fns = {}
        for mixer in mixers:
            torch.manual_seed(0)
            model = build_model(_preset_cfg(mixer=mixer, lookback=lookback, dataset=ds), data.x_channels)
            fns[mixer] = _trainer(model, batches)
        t = _alternate(fns, args.rounds)
        cells = "  ".join(f"{m} {t[m] * 1e3:7.0f}ms {t[m] * steps:6.1f}s" for m in mixers)
        log(f"  L={lookback:5d} ({steps} steps/epoch)  {cells}")
        for m in mixers:
            res[m].append((lookback, t[m] * steps))
    if len(args.lookback_values) > 1:
        from tsmix.forecasting.benchmark.speed_cells import fit_exponent

        fit = "  ".join(f"{m} {fit_exponent(res[m], min_length=0):.2f}" for m in mixers)
        log(f"  fitted exponent of epoch cost vs L: {fit}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--step", action="store_true")
    ap.add_argument("--mixers", action="store_true")
    ap.add_argument("--inference", action="store_true")
    ap.add_argument("--lookbacks", action="store_true")
    ap.add_argument("--profile", action="store_true",
                    help="op-by-op profile of the step at 1 and at 2 threads (not in the default set)")
    ap.add_argument("--scaling", action="store_true",
                    help="the step at 1 and 2 threads alternating in one process (wall), with --official")
    ap.add_argument("--scaling-modes", nargs="+", default=["eager"],
                    choices=("eager", "bf16-mixed", "compile"),
                    help="--scaling: the tsmix step as the engine runs it with these options")
    ap.add_argument("--kernels", action="store_true",
                    help="the step's kernels alone at 1 and 2 threads, with bandwidth and GEMM controls")
    ap.add_argument("--official", default=None, help="checkout of github.com/yuqinie98/PatchTST (for --step)")
    ap.add_argument("--data-dir", default=os.environ.get("TSMIX_DATA_DIR"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mixer-names", nargs="*", default=None)
    ap.add_argument("--batch-scales", type=float, nargs="*", default=[1.0],
                    help="batch axis, as multiples of the real batch")
    ap.add_argument("--lookback-values", type=int, nargs="*", default=[336, 720, 1440, 2880])
    ap.add_argument("--lookback-dataset", default="ETTh1",
                    help="whose patch-encoder paper preset and training windows --lookbacks uses")
    ap.add_argument("--lookback-batch", type=int, default=None,
                    help="batch size of --lookbacks (default: the preset's); memory grows with L")
    ap.add_argument("--malloc", choices=("retain", "default"), default="retain",
                    help="retain: glibc keeps freed memory (what the tsmix command does, "
                         "tsmix.engine.memory); default: leave malloc as it is")
    ap.add_argument("--out", default=None, help="also write the report here (atomically)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (2-thread figures need an otherwise idle machine)")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        raise SystemExit("--rounds must be >= 1")
    torch.set_num_threads(args.threads)
    if args.malloc == "retain":
        from tsmix.engine.memory import retain_freed_memory

        retain_freed_memory()
    lines: list[str] = []

    def log(s: str) -> None:
        print(s, flush=True)
        lines.append(s)

    with open("/proc/loadavg") as fh:
        load = " ".join(fh.read().split()[:3])
    clock = "process CPU time" if args.threads == 1 else "wall time"
    log(f"# bench_step: torch {torch.__version__}, {args.threads} thread(s), {clock}, malloc {args.malloc}, "
        f"load average {load}; {processor()}")
    log(f"# command: python benchmarks/bench_step.py {' '.join(argv if argv is not None else sys.argv[1:])}")
    sections = ("step", "mixers", "inference", "lookbacks", "profile", "scaling", "kernels")
    chosen = [s for s in sections if getattr(args, s)]
    for s in chosen or ["step", "mixers", "inference", "lookbacks"]:
        globals()[f"section_{s}"](args, log)
    if args.out:
        from tsmix.atomic import write_text_atomic

        write_text_atomic(args.out, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
