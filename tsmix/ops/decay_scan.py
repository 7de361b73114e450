"""Decayed cumulative sum ``y_t = a_t * y_{t-1} + x_t`` in log space, chunked and exact.

The closed form ``e^{c_t} * cumsum(x / e^{c_t})`` with ``c = cumsum(log a)`` underflows: ``e^{c_t}``
drops below float32's range after a few dozen strongly decaying steps and ``x / e^{c_t}``
overflows. Here every exponential is of a segment sum ``sum(log a[s+1..t]) <= 0`` with ``s <= t``
inside one chunk of ``chunk`` steps (accumulated per segment, so no cancellation between
large cumsums), and chunks are joined by the same scan applied recursively to the chunk ends.
Every factor lies in [0, 1]: nothing overflows, nothing the future does can move the past.

Shapes: ``x (..., N, G, R)``, ``log_a (..., N, G)``; the decay of group ``g`` applies to its
``R`` columns (R = 1 for an elementwise scan; R = d_v for the state of a gated linear
attention whose decay is per key dimension).

Two exact forms of the within-chunk scan (chunks are joined the same way in both):

* ``"loop"`` (default): the recurrence itself, ``chunk`` steps, each one elementwise op over
  every chunk at once. O(N * G * R) work; every factor is one ``a_t`` in [0, 1].
* ``"matmul"``: an (L, L) matrix of segment-sum decays per group and chunk, applied by one
  matmul. O(N * chunk * G * (R + 1)) work: worth it only where matmuls are far cheaper than
  elementwise passes and R is large. Measured on the 2-core CPU (fwd + bwd, float32, chunk 16;
  ``benchmarks/bench_scan.py``) the loop form won at every shape tried.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from tsmix.ops.attention import causal_mask


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    # Log-space cumsums in bfloat16/float16 would lose the decay to rounding: work in float32.
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


SCAN_METHODS = ("loop", "matmul")
_default_method = "loop"


@contextmanager
def scan_method(method: str) -> Iterator[None]:
    """Run the enclosed code with ``method`` as the default form of every :func:`decay_scan`
    (benchmarks compare the two forms inside whole mixers with it)."""
    global _default_method
    _check_method(method)
    old, _default_method = _default_method, method
    try:
        yield
    finally:
        _default_method = old


def _check_method(method: str) -> None:
    if method not in SCAN_METHODS:
        raise ValueError(f"decay_scan method must be one of {SCAN_METHODS}, got {method!r}")


# The loop form is exact at any chunk length; chunks only trade Python steps (one per position
# in a chunk) for the passes that join chunk ends (~3 more reads/writes of the whole tensor).
# When one step already touches this many elements the per-step overhead is noise and the
# loop runs the whole sequence as one chunk (at the PatchTST shape fem-ssm has 1.1M elements
# per step: fwd+bwd 1.6x faster than chunks of 16, fem-aft 1.25x; benchmarks/bench_scan.txt).
WHOLE_SEQUENCE_STEP = 1 << 15


def decay_scan(
    x: torch.Tensor, log_a: torch.Tensor, chunk: int = 16, method: str | None = None
) -> torch.Tensor:
    """Inclusive decayed scan ``y_t = exp(log_a_t) * y_{t-1} + x_t`` (``y_{-1} = 0``).

    ``x (..., N, G, R)``, ``log_a (..., N, G)`` with ``log_a <= 0``; returns ``(..., N, G, R)``.
    ``method``: ``"loop"`` (O(N * G * R)) or ``"matmul"`` (O(N * chunk * G * R)); None = the
    default (``"loop"``, or what :func:`scan_method` set). The loop form ignores ``chunk`` when
    one step holds at least :data:`WHOLE_SEQUENCE_STEP` elements (see there).
    """
    if chunk < 2:
        raise ValueError(f"decay_scan chunk must be >= 2, got {chunk}")
    method = _default_method if method is None else method
    _check_method(method)
    n = x.shape[-3]
    if method == "loop" and n and x.numel() // n >= WHOLE_SEQUENCE_STEP:
        chunk = max(chunk, n)
    out_dtype = x.dtype
    wd = _work_dtype(torch.promote_types(x.dtype, log_a.dtype))
    local = _local_loop if method == "loop" else _local_matmul
    y = _scan(x.to(wd), log_a.to(wd), chunk, local)
    return y.to(out_dtype)


def _scan(x: torch.Tensor, log_a: torch.Tensor, chunk: int, local) -> torch.Tensor:
    """Cut into chunks, scan each chunk with ``local``, join the chunk ends recursively."""
    n = x.shape[-3]
    length = min(chunk, n)
    pad = (-n) % length
    if pad:  # zero input and zero log-decay at the end: the prefix is untouched
        x = F.pad(x, (0, 0, 0, 0, 0, pad))
        log_a = F.pad(log_a, (0, 0, 0, pad))
    *lead, n_pad, g, r = x.shape
    k = n_pad // length
    xc = x.reshape(*lead, k, length, g, r)  # (..., K, L, G, R)
    la = log_a.reshape(*lead, k, length, g)  # (..., K, L, G)
    y = local(xc, la)  # (..., K, L, G, R): chunk-local scan
    if k > 1:
        cum = la.cumsum(-2)  # (..., K, L, G): log-decay from the chunk start to t, <= 0
        ends = _scan(y[..., -1, :, :], cum[..., -1, :], chunk, local)  # (..., K, G, R): chunk-end states
        prev = torch.cat([torch.zeros_like(ends[..., :1, :, :]), ends[..., :-1, :, :]], dim=-3)
        y = torch.addcmul(y, cum.exp()[..., None], prev[..., None, :, :])  # carry the entering state
    return y.reshape(*lead, n_pad, g, r)[..., :n, :, :]


def _local_loop(xc: torch.Tensor, la: torch.Tensor) -> torch.Tensor:
    """The plain recurrence inside every chunk at once: ``xc (..., K, L, G, R)``, ``la (..., K, L, G)``."""
    # unbind, not xc[..., t, :, :]: each select's backward writes a zero tensor the size of the
    # whole input (O(L^2) traffic; it was 1/3 of fem-ssm's step), unbind's is one stack
    a = la.exp()[..., None].unbind(-3)  # L x (..., K, G, 1): one step's decay, in [0, 1]
    xs = xc.unbind(-3)  # L x (..., K, G, R)
    states = [xs[0]]  # the state after each chunk's first step
    for t in range(1, len(xs)):
        states.append(a[t] * states[-1] + xs[t])
    return torch.stack(states, dim=-3)


def _local_matmul(xc: torch.Tensor, la: torch.Tensor) -> torch.Tensor:
    """One matmul per chunk and group by the (L, L) segment-decay matrix; same shapes as the loop."""
    w = segment_sum(la.movedim(-1, -2)).exp()  # (..., K, G, L, L): prod a_{s+1..t} for s <= t, else 0
    return (w @ xc.movedim(-2, -3)).movedim(-3, -2)  # (..., K, G, L, R) -> (..., K, L, G, R)


def segment_sum(la: torch.Tensor) -> torch.Tensor:
    """``la (..., L)`` -> ``(..., L, L)`` with entry ``[t, s] = sum(la[s+1 .. t])`` for ``s <= t``
    and ``-inf`` above the diagonal.

    Each entry is accumulated over its own segment (a masked cumsum), not taken as
    ``c_t - c_s``: the difference of two long cumsums would lose ``eps * |c|`` to cancellation.
    """
    n = la.shape[-1]
    rows = la[..., :, None].expand(*la.shape, n)  # [u, s] = la_u
    strict = causal_mask(n, la.device, strict=True)
    seg = rows.masked_fill(~strict, 0.0).cumsum(-2)  # [t, s] = sum over s < u <= t
    causal = causal_mask(n, la.device)
    return seg.masked_fill(~causal, float("-inf"))


def decay_cumsum(x: torch.Tensor, log_a: torch.Tensor, chunk: int = 16) -> torch.Tensor:
    """Elementwise form: ``x, log_a (..., N, C)`` -> ``y (..., N, C)``."""
    return decay_scan(x[..., None], log_a, chunk)[..., 0]


def shift_exclusive(y: torch.Tensor, log_a: torch.Tensor) -> torch.Tensor:
    """From the inclusive scan ``y (..., N, G, R)`` the exclusive one ``exp(log_a_t) * y_{t-1}``.

    Taken by shifting, not as ``y_t - x_t``: the subtraction would cancel catastrophically
    when ``x_t`` dominates the state.
    """
    prev = torch.cat([torch.zeros_like(y[..., :1, :, :]), y[..., :-1, :, :]], dim=-3)
    return log_a.exp().to(y.dtype)[..., None] * prev


def decay_scan_reference(x: torch.Tensor, log_a: torch.Tensor) -> torch.Tensor:
    """Plain step-by-step recurrence (the oracle): same shapes as :func:`decay_scan`."""
    h = torch.zeros_like(x[..., 0, :, :])
    ys = []
    for t in range(x.shape[-3]):
        h = log_a[..., t, :].exp()[..., None] * h + x[..., t, :, :]
        ys.append(h)
    return torch.stack(ys, dim=-3)


def decay_scan_naive(x: torch.Tensor, log_a: torch.Tensor) -> torch.Tensor:
    """The closed form ``e^{c_t} * cumsum(x / e^{c_t})`` (as in the FEM release): shown only to
    document its underflow in the tests; never use it."""
    c = log_a.cumsum(-2)[..., None]  # (..., N, G, 1)
    d = c.exp()
    return d * (x / (d + 1e-12)).cumsum(-3)
