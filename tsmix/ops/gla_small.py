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

from tsmix.ops.attention import causal_mask, score_blocks
from tsmix.ops.decay_scan import _work_dtype
from tsmix.ops.gla_chunk import floor_decay, gla_reference

# Largest total log-decay |C_N| of any (sequence, head, group) for the factorized form (see above).
DENSE_MAX_LOG_DECAY = 40.0
# Shapes where the dense form is taken (CPU): the quadratic (N, N) matrix is small at these
# lengths, and the matmuls' per-call cost is paid once instead of once per position.
DENSE_MAX_LEN = 128
DENSE_MAX_HEAD_DIM = 16


def dense_bidir_shape_fits(device: torch.device, n: int, head_dim: int) -> bool:
    """The shapes :func:`gla_dense_bidir` takes: CPU, ``1 < N <= DENSE_MAX_LEN``, heads at most
    ``DENSE_MAX_HEAD_DIM`` wide (the decay bound is :func:`dense_decay_fits`)."""
    return device.type == "cpu" and 1 < n <= DENSE_MAX_LEN and head_dim <= DENSE_MAX_HEAD_DIM


def dense_decay_fits(la: torch.Tensor, token_dim: int = -2) -> bool:
    """Whether every total decay ``|C_N|`` of the floored log-decays ``la`` (tokens along
    ``token_dim``) is at most ``DENSE_MAX_LOG_DECAY`` (one host sync: a CPU-only dispatch)."""
    # la <= 0, so the total decay is the (negated) sum; the most negative one decides (NaN: no)
    return bool(la.detach().sum(token_dim).min() >= -DENSE_MAX_LOG_DECAY)


def dense_decay_blocks_t(log_a: torch.Tensor, heads: int, batch: int, n: int) -> torch.Tensor | None:
    """Channel-major log-decays ``log_a (H G, B N)`` (tokens in ``(b, n)`` order) -> the floored
    ``(H B, G, N)`` blocks :func:`gla_dense_bidir_t` reads, or None when a total decay exceeds the
    dense form's bound (:func:`dense_decay_fits`; the caller then takes the exact scan)."""
    la = floor_decay(log_a).view(heads, -1, batch, n).transpose(1, 2).reshape(heads * batch, -1, n)
    return la if dense_decay_fits(la, -1) else None


def dense_bidir_fits(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, la: torch.Tensor) -> bool:
    """Whether :func:`gla_dense_bidir` takes ``q, k (..., N, d_k)``, ``v (..., N, d_v)`` and the
    floored log-decays ``la (..., N, G)``: the shapes of :func:`dense_bidir_shape_fits`, equal
    leading dims, and every total decay within :func:`dense_decay_fits`."""
    n, dk = q.shape[-2], q.shape[-1]
    if not dense_bidir_shape_fits(q.device, n, dk) or q.dim() < 3:
        return False
    if q.shape != k.shape or not v.shape[:-1] == q.shape[:-1] == la.shape[:-1] or la.shape[-1] not in (1, dk):
        return False
    return dense_decay_fits(la)


def _scores_t(qf, kf, qb, kb, fwd: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """The mixing matrix transposed, ``(m, N_s, N_t)`` from channel-major ``(m, d_k, N)`` blocks,
    written into ``out``: key ``s`` reads forwards (``s <= t``, the upper triangle here) or
    backwards (``s > t``)."""
    sb = torch.bmm(kb.transpose(1, 2), qb, out=out)
    return torch.where(fwd, torch.bmm(kf.transpose(1, 2), qf), sb, out=sb)


class _DecayAttention(torch.autograd.Function):
    """``o = v [triu(kf^T qf) + tril(kb^T qb, -1)]`` from channel-major blocks ``q, k (M, d_k, N)``,
    ``v (M, d_v, N)`` and the floored log-decays ``la (M, G, N)`` (tokens last), with a
    hand-written backward; ``o (M, d_v, N)``. The bracket is the transposed mixing matrix.

    Speed (single-threaded CPU, where these shapes are memory-bound): channel-major, every bmm
    runs along the N-long token axis (at the patch shape, 3584 blocks of 42 tokens, d = 4, the
    reads ``v A^T`` take a quarter of the token-major ``A v``'s time, and the elementwise passes
    are over contiguous tensors, not head-split strided views); the batch runs in blocks whose
    ``(N, N)`` scores are used while in cache (half the time of whole-batch ops; the mixing matrix
    is kept for the backward: recomputing it there, which holds nothing ``(M, N, N)``, measured
    1.14x slower with freed memory retained), only 3-d ``bmm`` calls
    are used (a 4-d ``matmul`` with a transposed operand ran 5x slower), and one ``where`` joins
    the halves (autograd through ``where`` and the broadcast factors took 4x softmax's time).

    With ``x = C - r`` and ``y = E - r``: ``qf = q e^x``, ``kf = k / e^x``, ``qb = q / e^y``,
    ``kb = k e^y`` (two exps; a reciprocal is as accurate as a third)."""

    @staticmethod
    def forward(ctx, q, k, v, la):
        c = la.cumsum(2)  # (M, G, N): inclusive log-decay from the start, in [C_N, 0]
        x = c.sub_(0.5 * c[:, :, -1:])  # C - r, r the middle of the range (the read does not depend on r)
        y = x - la  # E - r, E = C - la the exclusive log-decay
        ex, ey = x.exp_(), y.exp_()  # (M, G, N), within e^{+-|C_N| / 2} (in place: x, y not needed)
        qf, kf, qb, kb = q * ex, k / ex, q / ey, k * ey  # (M, d_k, N)
        m, n = q.shape[0], q.shape[2]
        fwd = causal_mask(n, q.device).t()  # (N_s, N_t): s <= t reads forwards, s > t backwards
        o = v.new_empty(v.shape)  # (M, d_v, N)
        at = q.new_empty(m, n, n)  # the mixing matrix of every block, kept for the backward
        for b in score_blocks(m, n, q.device):
            _scores_t(qf[b], kf[b], qb[b], kb[b], fwd, out=at[b])
            torch.bmm(v[b], at[b], out=o[b])
        ctx.save_for_backward(v, qf, kf, qb, kb, ex, ey, at)
        return o

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        v, qf, kf, qb, kb, ex, ey, at = ctx.saved_tensors
        g = g.contiguous()  # (M, d_v, N)
        gv = torch.empty_like(v)
        gqf, gkf, gqb, gkb = (torch.empty_like(t) for t in (qf, kf, qb, kb))  # (M, d_k, N)
        for b in score_blocks(qf.shape[0], qf.shape[2], qf.device):
            torch.bmm(g[b], at[b].transpose(1, 2), out=gv[b])
            # each half's share of the scores' gradient: the product twice, then an in-place
            # triangle (cheaper than splitting one product with two where's)
            vt = v[b].transpose(1, 2)  # (m, N, d_v)
            gf, gb = torch.bmm(vt, g[b]).triu_(), torch.bmm(vt, g[b]).tril_(-1)  # (m, N_s, N_t)
            torch.bmm(kf[b], gf, out=gqf[b])
            torch.bmm(qf[b], gf.transpose(1, 2), out=gkf[b])
            torch.bmm(kb[b], gb, out=gqb[b])
            torch.bmm(qb[b], gb.transpose(1, 2), out=gkb[b])
        gq = torch.addcdiv(gqf * ex, gqb, ey)
        gk = torch.addcdiv(gkb * ey, gkf, ex)
        # exponents: +x in qf, -x in kf, -y in qb, +y in kb; x = C - r, y = C - la - r
        gx = gqf.mul_(qf).addcmul_(gkf, kf, value=-1.0)  # (M, d_k, N)
        gy = gkb.mul_(kb).addcmul_(gqb, qb, value=-1.0)
        if ex.shape[1] == 1:  # one decay per head: its exponent is shared by the key dims
            gx, gy = gx.sum(1, keepdim=True), gy.sum(1, keepdim=True)
        # r cancels (sum over all of gx + gy is 0 in exact arithmetic): treated as a constant
        gc = gx.add_(gy)  # d/dC; C = cumsum(la), so d/dla = reversed cumsum of it, minus d/dy
        gla = gc.flip(2).cumsum(2).flip(2).sub_(gy)
        return gq, gk, gv, gla


def gla_dense_bidir_t(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, la: torch.Tensor) -> torch.Tensor:
    """:func:`gla_dense_bidir` on channel-major blocks (one head of one sequence each, tokens
    last): ``q, k (M, d_k, N)``, ``v (M, d_v, N)``, ``la (M, G, N)`` -> ``o (M, d_v, N)``."""
    out_dtype = v.dtype
    wd = _work_dtype(v.dtype)
    # contiguous blocks: a strided (d, N) block sends bmm to its per-matrix loop (10x slower)
    return _DecayAttention.apply(*(t.to(wd).contiguous() for t in (q, k, v, la))).to(out_dtype)


def gla_dense_bidir(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, la: torch.Tensor) -> torch.Tensor:
    """Bidirectional GLA read ``o (..., N, d_v)`` from ``q, k (..., N, d_k)``, ``v (..., N, d_v)``
    and floored log-decays ``la (..., N, G)`` (G in {1, d_k}, <= 0), same values as
    :func:`tsmix.ops.gla_chunk.gla_bidir` with ``causal=False``; call only where
    :func:`dense_bidir_fits` holds. Runs channel-major (:func:`gla_dense_bidir_t`): one transposing
    copy of each input (the head-split views are strided anyway); the output is a transposed view."""
    *lead, n, dk = q.shape
    q, k, v, la = (t.transpose(-1, -2).reshape(-1, t.shape[-1], n) for t in (q, k, v, la))  # (M, ., N)
    o = gla_dense_bidir_t(q, k, v, la)  # (M, d_v, N)
    return o.transpose(1, 2).reshape(*lead, n, v.shape[1])


def gla_bidir_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_a: torch.Tensor
) -> torch.Tensor:
    """Plain twin: the explicit masked segment-sum weights of each half
    (:func:`~tsmix.ops.gla_chunk.gla_reference`), the anti-causal half on the reversed sequence."""
    fwd = gla_reference(q, k, v, log_a)
    return fwd + gla_reference(*(t.flip(-2) for t in (q, k, v, log_a)), inclusive=False).flip(-2)
