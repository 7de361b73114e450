"""decay_scan's two exact forms, and the mixers built on it, in one run (ratios, CPU time).

    OMP_NUM_THREADS=1 python benchmarks/bench_scan.py

Part 1 times ``decay_scan`` forward + backward for the ``loop`` and ``matmul`` forms at the shapes
the mixers use. Part 2 times one forward + backward of fem-aft / fem-ssm / gla / fem-gla at the
PatchTST ETTh shape (896 sequences of 42 patches, D = 16, 4 heads) with the scan switched between
the two forms with ``tsmix.ops.decay_scan.scan_method``. Part 3 compares the loop taking its
steps with ``unbind`` (the library) against one ``[..., t, :, :]`` select per step (the form it
replaced, whose backward writes a zero tensor of the whole input per step), on the scan alone
and in the mixers. Part 4 times the mixers with the loop run over whole sequences (what
``WHOLE_SEQUENCE_STEP`` picks at this shape) against chunks of 16.
Process CPU time, best of ``--reps``; both forms run in the same process, so the ratio is the
number to read on a shared machine.
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch


def best(fn, reps: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(reps):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return min(times)


def _indexed_loop(xc: torch.Tensor, la: torch.Tensor) -> torch.Tensor:
    """The chunk-local loop as it was before: one ``[..., t, :, :]`` select per step."""
    a = la.exp()[..., None]
    h = xc[..., 0, :, :]
    states = [h]
    for t in range(1, xc.shape[-3]):
        h = a[..., t, :, :] * h + xc[..., t, :, :]
        states.append(h)
    return torch.stack(states, dim=-3)


@contextlib.contextmanager
def indexed_loop():
    """Run every loop-form decay_scan with :func:`_indexed_loop` instead of the library's."""
    from tsmix.ops import decay_scan as ds

    fn, ds._local_loop = ds._local_loop, _indexed_loop
    try:
        yield
    finally:
        ds._local_loop = fn


@contextlib.contextmanager
def whole_sequence_step(step: int):
    """Run with ``decay_scan.WHOLE_SEQUENCE_STEP = step`` (1: always whole, huge: always chunked)."""
    from tsmix.ops import decay_scan as ds

    old, ds.WHOLE_SEQUENCE_STEP = ds.WHOLE_SEQUENCE_STEP, step
    try:
        yield
    finally:
        ds.WHOLE_SEQUENCE_STEP = old


def compare(label: str, fn, base: tuple[str, object], other: tuple[str, object], reps: int) -> None:
    """Time ``fn`` under two settings ``(name, context-manager factory)``; print both and the ratio."""
    t = {}
    for name, setting in (base, other):
        with setting():
            t[name] = best(fn, reps)
    (a, ta), (b, tb) = t.items()
    print(f"  {label:22s} {a} {ta * 1e3:8.1f} ms  {b} {tb * 1e3:8.1f} ms  {b}/{a} {tb / ta:5.2f}x")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mixers", nargs="+", default=["fem-aft", "gla", "fem-gla", "fem-ssm"])
    args = ap.parse_args(argv)
    if args.reps < 1:
        ap.error(f"--reps must be >= 1, got {args.reps}")
    torch.set_num_threads(1)
    import tsmix
    from tsmix.ops import decay_scan as ds

    loop = ("loop", lambda: ds.scan_method("loop"))
    matmul = ("matmul", lambda: ds.scan_method("matmul"))
    unbind, select = ("unbind", contextlib.nullcontext), ("select", indexed_loop)
    whole = ("whole", lambda: whole_sequence_step(1))
    chunked = ("chunked", lambda: whole_sequence_step(1 << 62))

    def scans(shapes, base, other):
        for shape in shapes:
            xs = torch.randn(*shape, requires_grad=True)
            la = (-torch.rand(*shape[:-1]) * 3).requires_grad_()
            compare(str(shape), lambda: ds.decay_scan(xs, la).sum().backward(), base, other, args.reps)  # noqa: B023

    x = torch.randn(896, 42, 16, requires_grad=True)

    def mixers(base, other):
        for name in args.mixers:
            torch.manual_seed(0)
            m = tsmix.build_mixer(name, 16, heads=4).train()
            compare(name, lambda: m(x).sum().backward(), base, other, args.reps)  # noqa: B023

    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread, CPU time, best of {args.reps}")
    print("decay_scan fwd+bwd, float32, chunk 16   (x shape = (..., N, G, R))")
    scans([(896, 42, 16, 5), (896, 42, 256, 5), (1, 8192, 64, 1), (4, 2048, 64, 16)], loop, matmul)
    print("mixer fwd+bwd at the PatchTST ETTh shape (896, 42, 16), 4 heads")
    mixers(loop, matmul)
    print("loop form fwd+bwd: steps by unbind (library) vs one select per step (before)")
    scans([(896, 42, 16, 5), (896, 42, 256, 5), (1, 8192, 64, 1)], unbind, select)
    mixers(unbind, select)
    print("loop form inside the mixers: whole sequence vs chunks of 16 (WHOLE_SEQUENCE_STEP)")
    mixers(whole, chunked)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
