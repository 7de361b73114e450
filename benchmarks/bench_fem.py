"""Forward+backward time and memory of FEM vs softmax attention at equal width.

Part 1: ``fem-sm`` (full C, L, T, G; with ``recompute``; without C) vs ``softmax`` for
N in {64, 512, 2048};
the issue's target is a time ratio <= 1.3 (the paper's own is ~1.5).
Part 2: ``fem-gla`` vs ``softmax`` as N grows to 8192 (linear vs quadratic time).

Memory: on CUDA the peak allocated during forward+backward; on CPU (no allocator statistics)
the bytes of the distinct tensors autograd saves for backward plus the input, i.e. the
activation memory that dominates training peaks. Times are CUDA wall time, or on CPU the
process CPU time (a shared, loaded machine deschedules us; CPU time does not count that),
minimum over interleaved repeats. All ratios come from one run of this script.

    OMP_NUM_THREADS=1 python benchmarks/bench_fem.py
    python benchmarks/bench_fem.py --device cuda --batch 8 --dim 512 --heads 8
"""

from __future__ import annotations

import argparse
import time

import torch

import tsmix


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _saved_bytes(fn, x: torch.Tensor, params) -> int:
    """Bytes of the distinct non-parameter storages autograd saves while ``fn`` runs, plus the
    input's (which a checkpointed segment keeps alive outside these hooks): the CPU proxy."""
    skip = {p.untyped_storage().data_ptr() for p in params}
    seen: dict[int, int] = {x.untyped_storage().data_ptr(): x.untyped_storage().nbytes()}

    def pack(t: torch.Tensor):
        s = t.untyped_storage()
        if s.data_ptr() not in skip:
            seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return sum(seen.values()), out


def _clock(device: torch.device):
    # On CPU, process CPU time: immune to the process being descheduled on a shared machine
    # (equal to wall time with one thread; the summed work of all threads otherwise).
    return time.perf_counter if device.type == "cuda" else time.process_time


def _fwd_bwd(mixer: torch.nn.Module, x: torch.Tensor) -> float:
    """Seconds of one forward+backward."""
    xi = x.detach().requires_grad_(True)
    clock = _clock(x.device)
    _sync(x.device)
    t0 = clock()
    mixer(xi).float().square().mean().backward()
    _sync(x.device)
    dt = clock() - t0
    mixer.zero_grad(set_to_none=True)
    return dt


def _memory(mixer: torch.nn.Module, x: torch.Tensor) -> float:
    """MiB: CUDA peak during forward+backward, or the CPU proxy (saved activations + input)."""
    xi = x.detach().requires_grad_(True)
    if x.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(x.device)
        base = torch.cuda.memory_allocated(x.device)
        mixer(xi).float().square().mean().backward()
        _sync(x.device)
        mem = torch.cuda.max_memory_allocated(x.device) - base
    else:
        mem, _ = _saved_bytes(lambda: mixer(xi), xi, mixer.parameters())
    mixer.zero_grad(set_to_none=True)
    return mem / 2**20


def compare(mixers: list[torch.nn.Module], x: torch.Tensor, repeats: int) -> list[tuple[float, float]]:
    """(min seconds, MiB) per mixer; runs are interleaved so load drifts hit all mixers alike."""
    for m in mixers:  # warm-up
        _fwd_bwd(m, x)
    best = [float("inf")] * len(mixers)
    for _ in range(repeats):
        for i, m in enumerate(mixers):
            best[i] = min(best[i], _fwd_bwd(m, x))
    return [(t, _memory(m, x)) for t, m in zip(best, mixers)]


def build(name: str, args, causal: bool, **opts) -> torch.nn.Module:
    torch.manual_seed(0)
    m = tsmix.build_mixer(name, args.dim, heads=args.heads, causal=causal, **opts)
    return m.to(args.device, args.dtype).train()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--long-batch", type=int, default=1, help="batch of part 2 (long sequences)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--causal", action="store_true", help="causal masks (default: bidirectional)")
    ap.add_argument("--ns", default="64,512,2048", help="lengths for fem-sm vs softmax")
    ap.add_argument("--long-ns", default="512,1024,2048,4096,8192", help="lengths for fem-gla vs softmax")
    args = ap.parse_args(argv)
    args.device = torch.device(args.device)
    args.dtype = getattr(torch, args.dtype)
    print(
        f"device={args.device} dtype={args.dtype} torch={torch.__version__} "
        f"threads={torch.get_num_threads()} B={args.batch} D={args.dim} H={args.heads} "
        f"causal={args.causal} repeats={args.repeats} (x 512/N for N < 512)"
    )
    mem_kind = "peak MiB" if args.device.type == "cuda" else "saved-activation MiB"
    rows = [("fem-sm", {}), ("fem-sm", {"recompute": True}), ("fem-sm", {"cond": False})]
    print(f"\n[1] fem-sm vs softmax, forward+backward, min over repeats ({mem_kind})")
    print(f"{'N':>6} {'fem-sm variant':<16} {'softmax s':>10} {'fem s':>9} {'time x':>7} "
          f"{'softmax MiB':>12} {'fem MiB':>9} {'mem x':>6}")
    sm = build("softmax", args, args.causal)
    fems = [(o, build(n, args, args.causal, **o)) for n, o in rows]
    for n in (int(v) for v in args.ns.split(",")):
        x = torch.randn(args.batch, n, args.dim, device=args.device, dtype=args.dtype)
        reps = max(args.repeats, args.repeats * 512 // n)  # short runs: more repeats, same wall time
        res = compare([sm] + [m for _, m in fems], x, reps)
        (t_sm, m_sm), rest = res[0], res[1:]
        for (opts, _), (t, mem) in zip(fems, rest):
            label = ",".join(f"{k}={v}" for k, v in opts.items()) or "default (C,L,T,G)"
            print(f"{n:>6} {label:<16} {t_sm:>10.4f} {t:>9.4f} {t / t_sm:>7.2f} "
                  f"{m_sm:>12.1f} {mem:>9.1f} {mem / m_sm:>6.2f}")

    print(f"\n[2] fem-gla vs softmax as N grows, B={args.long_batch}, forward+backward ({mem_kind})")
    print(f"{'N':>6} {'softmax s':>10} {'fem-gla s':>10} {'time x':>7} {'softmax MiB':>12} "
          f"{'fem-gla MiB':>12} {'mem x':>6}")
    gla = build("fem-gla", args, args.causal)
    for n in (int(v) for v in args.long_ns.split(",")):
        x = torch.randn(args.long_batch, n, args.dim, device=args.device, dtype=args.dtype)
        (t_sm, m_sm), (t, mem) = compare([sm, gla], x, args.repeats if n <= 2048 else 2)
        print(
            f"{n:>6} {t_sm:>10.4f} {t:>10.4f} {t / t_sm:>7.2f} {m_sm:>12.1f} {mem:>12.1f} {mem / m_sm:>6.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
