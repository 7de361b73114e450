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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mixers", nargs="+", default=["fem-aft", "gla", "fem-gla", "fem-ssm"])
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    import tsmix
    from tsmix.ops import decay_scan as ds

    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread, CPU time, best of {args.reps}")
    print("decay_scan fwd+bwd, float32, chunk 16   (x shape = (..., N, G, R))")
    for shape in [(896, 42, 16, 5), (896, 42, 256, 5), (1, 8192, 64, 1), (4, 2048, 64, 16)]:
        x = torch.randn(*shape, requires_grad=True)
        la = (-torch.rand(*shape[:-1]) * 3).requires_grad_()
        t = {}
        for method in ds.SCAN_METHODS:
            t[method] = best(lambda: ds.decay_scan(x, la, method=method).sum().backward(),  # noqa: B023
                             args.reps)
        print(f"  {str(shape):22s} loop {t['loop'] * 1e3:8.1f} ms  matmul {t['matmul'] * 1e3:8.1f} ms  "
              f"matmul/loop {t['matmul'] / t['loop']:5.2f}x")

    print("mixer fwd+bwd at the PatchTST ETTh shape (896, 42, 16), 4 heads")
    x = torch.randn(896, 42, 16, requires_grad=True)
    for name in args.mixers:
        torch.manual_seed(0)
        m = tsmix.build_mixer(name, 16, heads=4).train()
        t = {}
        for method in ds.SCAN_METHODS:
            with ds.scan_method(method):
                t[method] = best(lambda: m(x).sum().backward(), args.reps)  # noqa: B023
        print(f"  {name:10s} loop {t['loop'] * 1e3:8.1f} ms  matmul {t['matmul'] * 1e3:8.1f} ms  "
              f"matmul/loop {t['matmul'] / t['loop']:5.2f}x")

    print("loop form fwd+bwd: steps by unbind (library) vs one select per step (before)")
    for shape in [(896, 42, 16, 5), (896, 42, 256, 5), (1, 8192, 64, 1)]:
        xs = torch.randn(*shape, requires_grad=True)
        la = (-torch.rand(*shape[:-1]) * 3).requires_grad_()
        t = {"unbind": best(lambda: ds.decay_scan(xs, la).sum().backward(), args.reps)}  # noqa: B023
        with indexed_loop():
            t["select"] = best(lambda: ds.decay_scan(xs, la).sum().backward(), args.reps)  # noqa: B023
        print(f"  {str(shape):22s} unbind {t['unbind'] * 1e3:8.1f} ms  "
              f"select {t['select'] * 1e3:8.1f} ms  select/unbind {t['select'] / t['unbind']:5.2f}x")
    for name in args.mixers:
        torch.manual_seed(0)
        m = tsmix.build_mixer(name, 16, heads=4).train()
        t = {"unbind": best(lambda: m(x).sum().backward(), args.reps)}  # noqa: B023
        with indexed_loop():
            t["select"] = best(lambda: m(x).sum().backward(), args.reps)  # noqa: B023
        print(f"  {name:10s} unbind {t['unbind'] * 1e3:8.1f} ms  select {t['select'] * 1e3:8.1f} ms  "
              f"select/unbind {t['select'] / t['unbind']:5.2f}x")

    print("loop form inside the mixers: whole sequence vs chunks of 16 (WHOLE_SEQUENCE_STEP)")
    whole = ds.WHOLE_SEQUENCE_STEP
    for name in args.mixers:
        torch.manual_seed(0)
        m = tsmix.build_mixer(name, 16, heads=4).train()
        t = {}
        for label, step in (("whole", 1), ("chunked", 1 << 62)):
            ds.WHOLE_SEQUENCE_STEP = step
            t[label] = best(lambda: m(x).sum().backward(), args.reps)  # noqa: B023
        ds.WHOLE_SEQUENCE_STEP = whole
        print(f"  {name:10s} whole {t['whole'] * 1e3:8.1f} ms  chunks of 16 {t['chunked'] * 1e3:8.1f} ms  "
              f"chunked/whole {t['chunked'] / t['whole']:5.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
