"""Bidirectional GLA on short sequences as one dense "decay attention" (batched matmuls).

The bidirectional read of :func:`tsmix.ops.gla_chunk.gla_bidir` (causal inclusive half + the
anti-causal half exclusive of the current token) is, written out,

    o_t = sum_{s<=t} (q_t * exp(C_t - C_s)) . k_s v_s  +  sum_{s>t} (q_t * exp(E_s - E_t)) . k_s v_s

with ``C`` the inclusive and ``E = C - la`` the exclusive cumulative log-decay (per key dim, or
per head broadcast over the key dims). Both exponents are <= 0. With a reference point ``r``
(per sequence, head and decay group) each weight factorizes,

    exp(C_t - C_s) = exp(C_t - r) exp(r - C_s),     exp(E_s - E_t) = exp(r - E_t) exp(E_s - r),

so the whole (N, N) mixing matrix is two batched matmuls ``qf kf^T`` (lower triangle) and
``qb kb^T`` (strict upper), and the read one more, as softmax attention does. At the encoders'
shapes (N = 7..42, head dims 4..16) this replaces the step scan's thousands of tiny
strided updates (the cost of ``gla`` and ``fem-gla`` there).

Numerics. ``C`` and ``E`` lie in ``[C_N, 0]`` (``C_N`` the total log-decay, floored per step at
``LOG_DECAY_MIN``), and ``r = C_N / 2`` keeps every factor within ``exp(|C_N| / 2)``; the products
that land in the kept triangle are the exact weights ``<= 1`` times ``q . k``, each factor
accurate to a few ulp. The form is used only while every ``|C_N| <= DENSE_MAX_LOG_DECAY`` (factors
<= e^20, discarded wrong-direction products <= e^40 |q||k|: far from float32 overflow); beyond it
(saturated gates) the caller keeps the exact scan. ``r`` depends on the whole sequence, so this is
a bidirectional form only: in a causal read the future must not move the past's rounding.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from tsmix.ops.attention import causal_mask
from tsmix.ops.decay_scan import _work_dtype
from tsmix.ops.gla_chunk import gla_reference

# Largest total log-decay |C_N| of any (sequence, head, group) for the factorized form (see above).
DENSE_MAX_LOG_DECAY = 40.0
# Shapes where the dense form is taken (CPU): the quadratic (N, N) matrix is small at these
# lengths, and the matmuls' per-call cost is paid once instead of once per position.
DENSE_MAX_LEN = 128
DENSE_MAX_HEAD_DIM = 16
# Scores per block of the batch (elements): ~2 MB in float32, so one block's (N, N) tensors stay in cache.
BLOCK_ELEMS = 1 << 19


def dense_bidir_fits(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, la: torch.Tensor) -> bool:
    """Whether :func:`gla_dense_bidir` takes ``q, k (..., N, d_k)``, ``v (..., N, d_v)`` and the
    floored log-decays ``la (..., N, G)``: CPU, short sequences, small heads, equal leading dims,
    and every total decay ``|C_N| <= DENSE_MAX_LOG_DECAY`` (one host sync: a CPU-only dispatch)."""
    n, dk = q.shape[-2], q.shape[-1]
    if q.device.type != "cpu" or not 1 < n <= DENSE_MAX_LEN or dk > DENSE_MAX_HEAD_DIM or q.dim() < 3:
        return False
    if q.shape != k.shape or not v.shape[:-1] == q.shape[:-1] == la.shape[:-1] or la.shape[-1] not in (1, dk):
        return False
    # la <= 0, so the total decay is the (negated) sum; the most negative one decides (NaN: no)
    return bool(la.detach().sum(-2).min() >= -DENSE_MAX_LOG_DECAY)


def _scores(qf, kf, qb, kb, lower: torch.Tensor) -> torch.Tensor:
    """The mixing matrix ``(m, N, N)``: forward half on and below the diagonal, backward above."""
    sb = torch.bmm(qb, kb.transpose(1, 2))
    return torch.where(lower, torch.bmm(qf, kf.transpose(1, 2)), sb, out=sb)


def _blocks(m: int, n: int):
    """Slices of the batch with ``(n, n)`` scores of about ``BLOCK_ELEMS`` elements in all."""
    step = max(1, BLOCK_ELEMS // (n * n))
    return [slice(i, i + step) for i in range(0, m, step)]


class _DecayAttention(torch.autograd.Function):
    """``o = [tril(qf kf^T) + triu(qb kb^T, 1)] v`` from ``q, k, v (M, N, d)`` and the floored
    log-decays ``la (M, N, G)``, with a hand-written backward.

    Speed (single-threaded CPU, where these shapes are memory-bound): the batch runs in blocks
    whose ``(N, N)`` scores stay in cache (half the time of whole-batch ops at the patch shape),
    the backward recomputes the scores instead of storing them (so nothing ``(M, N, N)`` is ever
    held), only 3-d ``bmm`` calls are used (a 4-d ``matmul`` with a transposed operand ran 5x
    slower), and one ``where`` joins the halves (autograd through ``where`` and the broadcast
    factors took 4x softmax's time).

    With ``x = C - r`` and ``y = E - r``: ``qf = q e^x``, ``kf = k / e^x``, ``qb = q / e^y``,
    ``kb = k e^y`` (two exps; a reciprocal is as accurate as a third)."""

    @staticmethod
    def forward(ctx, q, k, v, la):
        c = la.cumsum(1)  # (M, N, G): inclusive log-decay from the start, in [C_N, 0]
        x = c.sub_(0.5 * c[:, -1:, :])  # C - r, r the middle of the range (the read does not depend on r)
        y = x - la  # E - r, E = C - la the exclusive log-decay
        ex, ey = x.exp_(), y.exp_()  # (M, N, G), within e^{+-|C_N| / 2} (in place: x, y not needed)
        qf, kf, qb, kb = q * ex, k / ex, q / ey, k * ey  # (M, N, d_k)
        m, n = q.shape[:2]
        lower = causal_mask(n, q.device)  # (N, N): s <= t reads forwards, s > t backwards
        o = v.new_empty(m, n, v.shape[-1])  # (M, N, d_v)
        for b in _blocks(m, n):
            torch.bmm(_scores(qf[b], kf[b], qb[b], kb[b], lower), v[b], out=o[b])
        ctx.save_for_backward(v, qf, kf, qb, kb, ex, ey, lower)
        return o

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        v, qf, kf, qb, kb, ex, ey, lower = ctx.saved_tensors
        g = g.contiguous()
        gv = torch.empty_like(v)
        gqf, gkf, gqb, gkb = (torch.empty_like(t) for t in (qf, kf, qb, kb))  # (M, N, d_k)
        for b in _blocks(*qf.shape[:2]):
            a = _scores(qf[b], kf[b], qb[b], kb[b], lower)  # recomputed in cache, not stored
            torch.bmm(a.transpose(1, 2), g[b], out=gv[b])
            # each half's share of the scores' gradient: the product twice, then an in-place
            # triangle (cheaper than splitting one product with two where's)
            vt = v[b].transpose(1, 2)
            gf, gb = torch.bmm(g[b], vt).tril_(), torch.bmm(g[b], vt).triu_(1)  # (m, N, N)
            torch.bmm(gf, kf[b], out=gqf[b])
            torch.bmm(gf.transpose(1, 2), qf[b], out=gkf[b])
            torch.bmm(gb, kb[b], out=gqb[b])
            torch.bmm(gb.transpose(1, 2), qb[b], out=gkb[b])
        gq = torch.addcdiv(gqf * ex, gqb, ey)
        gk = torch.addcdiv(gkb * ey, gkf, ex)
        # exponents: +x in qf, -x in kf, -y in qb, +y in kb; x = C - r, y = C - la - r
        gx = gqf.mul_(qf).addcmul_(gkf, kf, value=-1.0)  # (M, N, d_k)
        gy = gkb.mul_(kb).addcmul_(gqb, qb, value=-1.0)
        if ex.shape[-1] == 1:  # one decay per head: its exponent is shared by the key dims
            gx, gy = gx.sum(-1, keepdim=True), gy.sum(-1, keepdim=True)
        # r cancels (sum over all of gx + gy is 0 in exact arithmetic): treated as a constant
        gc = gx.add_(gy)  # d/dC; C = cumsum(la), so d/dla = reversed cumsum of it, minus d/dy
        gla = gc.flip(1).cumsum(1).flip(1).sub_(gy)
        return gq, gk, gv, gla


def gla_dense_bidir(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, la: torch.Tensor) -> torch.Tensor:
    """Bidirectional GLA read ``o (..., N, d_v)`` from ``q, k (..., N, d_k)``, ``v (..., N, d_v)``
    and floored log-decays ``la (..., N, G)`` (G in {1, d_k}, <= 0), same values as
    :func:`tsmix.ops.gla_chunk.gla_bidir` with ``causal=False``; call only where
    :func:`dense_bidir_fits` holds."""
    out_dtype = v.dtype
    wd = _work_dtype(v.dtype)
    *lead, n, dk = q.shape
    q, k, v, la = (t.to(wd).reshape(-1, n, t.shape[-1]) for t in (q, k, v, la))  # (M, N, .)
    o = _DecayAttention.apply(q, k, v, la)
    return o.view(*lead, n, v.shape[-1]).to(out_dtype)


def gla_bidir_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_a: torch.Tensor
) -> torch.Tensor:
    """Plain twin: the explicit masked segment-sum weights of each half
    (:func:`~tsmix.ops.gla_chunk.gla_reference`), the anti-causal half on the reversed sequence."""
    fwd = gla_reference(q, k, v, log_a)
    return fwd + gla_reference(*(t.flip(-2) for t in (q, k, v, log_a)), inclusive=False).flip(-2)
