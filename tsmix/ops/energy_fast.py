"""Fast bidirectional attention-energy gradient: the attention reads, hand-written backward.

The bidirectional gradient of the attention energy (reference:
:func:`tsmix.ops.energy.attention_energy_grad`, differentiated by autograd) is
``(dq, dk) = -α_h (P k, Pᵀ q)`` with P = softmax(β q kᵀ). Training differentiates it once
more (a Hessian-vector product), and autograd's generic version of that is dominated by
elementwise passes over the (B·H, N, N) probabilities: the β-scaling, its backward and a
β-gradient reduction over it, the softmax backward's ``sum(P ⊙ dP)``, and the gradient
accumulation of P (used twice). At the encoder shapes (N ≤ 42, head dim 4..16) those cost
more than the batched matmuls. Here each (N, N) tensor gets one elementwise pass per
direction (α_h, a per-channel scale, is left to the caller's back-projection weights):

    forward   S = (β q) kᵀ,  P = softmax(S),  A = P k,  C = Pᵀ q
    backward  dP = Ga kᵀ + q Gcᵀ                     one bmm over [Ga | q] [k | Gc]ᵀ
              r_A = Σ_B P_AB dP_AB = Ga_A·A_A + q_A·(P Gc)_A   (no (N, N) reduction)
              dS = P ⊙ (dP - r)                      -r rides in the bmm as an extra column
              ∂q = P Gc + β dS k,  ∂k = Pᵀ Ga + β dSᵀ q,  ∂β = Σ q ⊙ (dS k)

Layout and blocking (one thread, the patch shape: 3584 heads of 42 tokens, head dim 4). Every
head of every sequence is a channel-major ``(Dh, N)`` block, so the reads are ``k Pᵀ`` and
``q P`` with the 42-long token axis innermost (a quarter of the time of ``P k`` with the 4-wide
head axis there). The batch runs in blocks whose ``(N, N)`` tensors are used while in cache;
E is kept for the backward (recomputing it per block, one bmm and one exp, measured 8% slower
with freed memory retained). Not twice differentiable (``once_differentiable``); the
reference is.
"""

from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable

from tsmix.ops.attention import score_blocks


def _bounded_shift_ok(bound: torch.Tensor) -> bool:
    """Whether exp(S - m), m the Cauchy-Schwarz bound of each row, is safe in this dtype.

    S_AB = β q_A·k_B lies in [-m_A, m_A], m_A = β |q_A| max_B |k_B|, so exp(S - m) <= 1
    (no overflow) and the row's largest entry, hence z_A, is >= exp(-2 m_A). With
    m_A <= log(finfo.max) / 4 (float32: 22) that stays a normal number and 1/z_A <= sqrt(max)
    (float32: 2e19), so the 1/z scalings cannot overflow either. Otherwise the max-shifted
    softmax is used.
    """
    return bool(bound.max() <= 0.25 * math.log(torch.finfo(bound.dtype).max))


def _weights(qm: torch.Tensor, k1: torch.Tensor, dh: int, shifted: bool, out: torch.Tensor) -> torch.Tensor:
    """E (m, N_A, N_B) of one block, written into ``out``: ``exp(S - m)`` from ``[βq ; -m]ᵀ [k ; 1]``
    (one bmm), or, when the bound is unsafe, the max-shifted softmax P itself (row sums z = 1)."""
    if shifted:
        return torch.bmm(qm.transpose(1, 2), k1, out=out).exp_()
    # exp(log_softmax) is softmax; on CPU at rows of ~42 it is faster than torch.softmax
    s = torch.bmm(qm[:, :dh].transpose(1, 2), k1[:, :dh])
    return torch.log_softmax(s, dim=-1, out=out).exp_()


class _BidirReads(torch.autograd.Function):
    """[A ; C] = [k Pᵀ ; q P] per channel-major block; P = E / z row-wise, never formed."""

    @staticmethod
    def forward(ctx, qk: torch.Tensor, beta: torch.Tensor):
        q, k = qk[0], qk[1]  # (M, Dh, N) each
        m, dh, n = q.shape
        ctx.beta_dtype = beta.dtype
        beta = beta.to(qk.dtype)
        # m_A = β |q_A| max_B |k_B| >= max_B S_AB, from the small tensors (no (N, N) row-max pass)
        norms = qk.square().sum(2).sqrt_()  # (2, M, N)
        bound = (beta * norms[0] * norms[1].amax(1, keepdim=True)).unsqueeze(1)  # (M, 1, N)
        shifted = qk.device.type == "cpu" and _bounded_shift_ok(bound)  # the check syncs: CPU only
        qm = torch.cat([q * beta, -bound], 1)  # (M, Dh + 1, N): [βq ; -m]
        k1 = torch.cat([k, torch.ones_like(bound)], 1)  # (M, Dh + 1, N): [k ; 1]
        out = qk.new_empty(qk.shape)  # [A ; C]
        a, c = out[0], out[1]
        inv_z = bound.new_empty(bound.shape)  # (M, 1, N)
        es = qk.new_empty(m, n, n)  # E of every block, kept for the backward (as autograd would)
        for b in score_blocks(m, n, qk.device):
            e = _weights(qm[b], k1[b], dh, shifted, out=es[b])  # (m, N, N)
            ak = torch.bmm(k1[b], e.transpose(1, 2))  # [k Eᵀ ; z]: the row sums z ride along
            torch.reciprocal(ak[:, dh:], out=inv_z[b])
            torch.mul(ak[:, :dh], inv_z[b], out=a[b])  # A = k Pᵀ
            torch.bmm(q[b] * inv_z[b], e, out=c[b])  # C = (q / z) E = q P
        ctx.save_for_backward(qk, k1, out, inv_z, beta, es)  # whole tensors: views of them may not be saved
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        qk, k1, out, inv_z, beta, es = ctx.saved_tensors
        q, k, a = qk[0], qk[1], out[0]  # (M, Dh, N) each
        n = a.shape[2]
        grad = grad.contiguous()
        gqk = torch.empty_like(grad)
        grad_beta = grad.new_zeros(())
        for b in score_blocks(a.shape[0], n, qk.device):
            ga, gc = grad[0, b], grad[1, b]  # grads w.r.t. A and C, (m, Dh, N) each
            iz, qb = inv_z[b], q[b]
            e = es[b]
            pgc = torch.bmm(gc, e.transpose(1, 2)).mul_(iz)  # (P Gc) as Gc Pᵀ, (m, Dh, N)
            r = (ga * a[b]).sum(1, keepdim=True) + (qb * pgc).sum(1, keepdim=True)  # (m, 1, N)
            # (dP - r) / z = ([Ga ; q ; -r] / z)ᵀ [k ; Gc ; 1]: one bmm (-r rides as a row)
            left = torch.cat([ga, qb, -r], 1).mul_(iz)  # (m, 2 Dh + 1, N)
            right = torch.cat([k[b], gc, torch.ones_like(r)], 1)
            ds = torch.bmm(left.transpose(1, 2), right).mul_(e)  # P ⊙ (dP - r), (m, N, N)
            dsk = torch.bmm(k[b], ds.transpose(1, 2))  # (dS k) as k dSᵀ, (m, Dh, N)
            grad_beta += (qb * dsk).sum()
            # ∂q = P Gc + β dS k,  ∂k = Pᵀ Ga + β dSᵀ q (as (Ga / z) E + β q dS)
            torch.add(pgc, dsk.mul_(beta), out=gqk[0, b])  # β a tensor (no host sync): scaled in place
            torch.bmm(ga * iz, e, out=gqk[1, b]).add_(torch.bmm(qb, ds).mul_(beta))
        return gqk, grad_beta.to(ctx.beta_dtype)


def bidir_attention_reads_t(qk: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """[k Pᵀ ; q P] per head, P = softmax(β qᵀ k), from channel-major blocks.

    ``qk (2, M, Dh, N)``: the query and the key blocks, one head of one sequence each, tokens
    last; returns ``(2, M, Dh, N)``: ``(P k)ᵀ`` where q was and ``(Pᵀ q)ᵀ`` where k was. The
    bidirectional attention-energy gradient is -α_h times these:
    ``attention_energy_grad(q, k, alpha, beta, causal=False) == (-α P k, -α Pᵀ q)`` (the
    caller folds -α into the back-projection weights, once for all steps).
    """
    return _BidirReads.apply(qk.contiguous(), beta)


__all__ = ["bidir_attention_reads_t"]
