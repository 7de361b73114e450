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

Queries and keys come in and A, C go out packed in the token layout of the fused
projection, (B·N, 2·D) = [q | k] per token, so the head split and merge are one permuted
copy each way. Not twice differentiable (``once_differentiable``); the reference is.
"""

from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable


def _to_heads(t: torch.Tensor, b: int, n: int, h: int) -> torch.Tensor:
    """(B·N, 2·D) packed [q | k] -> (2, B·H, N, Dh) contiguous."""
    dh = t.shape[-1] // (2 * h)
    return t.reshape(b, n, 2, h, dh).permute(2, 0, 3, 1, 4).reshape(2, b * h, n, dh)


def _bounded_shift_ok(bound: torch.Tensor) -> bool:
    """Whether exp(S - m), m the Cauchy-Schwarz bound of each row, is safe in this dtype.

    S_AB = β q_A·k_B lies in [-m_A, m_A], m_A = β |q_A| max_B |k_B|, so exp(S - m) <= 1
    (no overflow) and the row's largest entry, hence z_A, is >= exp(-2 m_A). With
    m_A <= log(finfo.max) / 4 (float32: 22) that stays a normal number and 1/z_A <= sqrt(max)
    (float32: 2e19), so the 1/z scalings cannot overflow either. Otherwise the max-shifted
    softmax is used.
    """
    return bool(bound.max() <= 0.25 * math.log(torch.finfo(bound.dtype).max))


class _BidirReads(torch.autograd.Function):
    """P = E / z row-wise: E = exp(S - m) (m the row's bound) when that is safe, else E = P."""

    @staticmethod
    def forward(ctx, qk: torch.Tensor, beta: torch.Tensor, batch: int, heads: int):
        n = qk.shape[0] // batch
        qk4 = _to_heads(qk, batch, n, heads)  # (2, B·H, N, Dh)
        q, k = qk4[0], qk4[1]
        dh = q.shape[-1]
        ctx.beta_dtype = beta.dtype
        beta = beta.to(qk.dtype)
        qb = q * beta
        # m_A = β |q_A| max_B |k_B| >= max_B S_AB, from the small tensors (no (N, N) row-max pass);
        # the norms are taken in the packed layout, where the Dh-reduction is contiguous
        norms = qk.square().view(batch, n, 2, heads, dh).sum(-1).sqrt_()  # (B, N, 2, H)
        bound = beta * norms[:, :, 0] * norms[:, :, 1].amax(1, keepdim=True)  # (B, N, H)
        bound = bound.transpose(1, 2).reshape(batch * heads, n, 1)  # (B·H, N, 1)
        if qk.device.type == "cpu" and _bounded_shift_ok(bound):  # the check syncs: CPU only
            # S - m = [βq | -m] [k | 1]ᵀ in one bmm; E = exp(S - m) in place, P = E / z never formed
            k1 = torch.cat([k, torch.ones_like(bound)], -1)  # (B·H, N, Dh + 1)
            e = torch.bmm(torch.cat([qb, -bound], -1), k1.transpose(1, 2)).exp_()  # (B·H, N, N)
            ek = torch.bmm(e, k1)  # [E k | z]: the row sums z ride along as the last column
            inv_z = ek[..., dh:].reciprocal()  # (B·H, N, 1)
            a = ek[..., :dh] * inv_z  # A = P k, (B·H, N, Dh)
            ct = torch.bmm((q * inv_z).transpose(1, 2), e)  # Cᵀ = (q / z)ᵀ E = qᵀ P, (B·H, Dh, N)
        else:
            # exp(log_softmax) is softmax; on CPU at rows of ~42 it is faster than torch.softmax
            e = torch.log_softmax(torch.bmm(qb, k.transpose(1, 2)), dim=-1).exp_()  # P, (B·H, N, N)
            inv_z = None
            a = torch.bmm(e, k)
            ct = torch.bmm(q.transpose(1, 2), e)  # qᵀ P: faster than Pᵀ q for small Dh
        out = qk.new_empty(batch, n, 2, heads, dh)  # [A | C] in the packed token layout
        out[:, :, 0] = a.view(batch, heads, n, dh).transpose(1, 2)
        out[:, :, 1] = ct.view(batch, heads, dh, n).permute(0, 3, 1, 2)
        ctx.save_for_backward(qk4, e, inv_z, a, beta)
        ctx.shape = (batch, n, heads)
        return out.view(qk.shape)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        qk4, e, inv_z, a, beta = ctx.saved_tensors
        b, n, h = ctx.shape
        q, k = qk4[0], qk4[1]
        dh = q.shape[-1]
        ga, gc = _to_heads(grad, b, n, h)  # grads w.r.t. A and C, (B·H, N, Dh) each
        pgc = torch.bmm(e, gc)  # P Gc = (E Gc) / z, (B·H, N, Dh)
        ga_z = ga
        if inv_z is not None:
            pgc.mul_(inv_z)
            ga_z = ga * inv_z
        gat_p = torch.bmm(ga_z.transpose(1, 2), e)  # (Pᵀ Ga)ᵀ = (Ga / z)ᵀ E, (B·H, Dh, N)
        r = (ga * a).sum(-1, keepdim=True) + (q * pgc).sum(-1, keepdim=True)  # (B·H, N, 1)
        # (dP - r) / z = [Ga | q | -r] / z · [k | Gc | 1]ᵀ: one bmm (-r rides as a column)
        left = torch.cat([ga, q, -r], dim=-1)  # (B·H, N, 2·Dh + 1)
        if inv_z is not None:
            left.mul_(inv_z)
        right = torch.cat([k, gc, torch.ones_like(r)], dim=-1)
        ds = torch.bmm(left, right.transpose(1, 2)).mul_(e)  # P ⊙ (dP - r), (B·H, N, N)
        dsk = torch.bmm(ds, k)  # dS k, (B·H, N, Dh)
        grad_beta = (q * dsk).sum()
        qt_ds = torch.bmm(q.transpose(1, 2), ds).mul_(beta)  # β (dSᵀ q)ᵀ, (B·H, Dh, N)
        gqk = grad.new_empty(b, n, 2, h, dh)  # the packed token layout
        # ∂q = P Gc + β dS k,  ∂k = Pᵀ Ga + β dSᵀ q
        torch.add(pgc.view(b, h, n, dh), dsk.mul_(beta).view(b, h, n, dh), out=gqk[:, :, 0].transpose(1, 2))
        torch.add(gat_p.view(b, h, dh, n), qt_ds.view(b, h, dh, n), out=gqk[:, :, 1].permute(0, 2, 3, 1))
        return gqk.view(grad.shape), grad_beta.to(ctx.beta_dtype), None, None


def bidir_attention_reads(qk: torch.Tensor, beta: torch.Tensor, batch: int, heads: int) -> torch.Tensor:
    """[P k | Pᵀ q] per head, P = softmax(β q kᵀ), from packed queries and keys.

    ``qk`` (B·N, 2·D): per token its query then its key (heads contiguous inside each);
    returns (B·N, 2·D) with P k where q was and Pᵀ q where k was. The bidirectional
    attention-energy gradient is -α_h times these:
    ``attention_energy_grad(q, k, alpha, beta, causal=False) == (-α P k, -α Pᵀ q)`` (the
    caller folds -α into the back-projection weights, once for all steps).
    """
    return _BidirReads.apply(qk, beta, batch, heads)


__all__ = ["bidir_attention_reads"]
