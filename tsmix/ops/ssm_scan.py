"""The whole selective-SSM read of ``fem-ssm`` as one autograd function (short sequences).

    state  h_t[e, r, p] = sum_s w_e,r(s -> t) dt_s[e] b_s[r] u_s[e, p]
    read   y_t[e, p]    = sum_r c_t[r] h_t[e, r, p]

with ``w(s -> t) = prod_{s < k <= t} exp(dt_k a)`` for ``s <= t`` and, bidirectional,
``prod_{t <= k < s} exp(dt_k a)`` for ``s > t`` (the reverse scan, exclusive of ``t``): the
same sums as :func:`tsmix.ops.fem_priors.ssm_prior_read_reference`, unnormalized.

Why. Through autograd the read builds its input ``x = dt b u`` (B, N, E, R, P+1), scans it and
contracts ``c . h``, and every broadcast multiply and size-3/size-16 reduction of those pieces
costs its own full pass, forward and backward (~100 passes over a 58 MB tensor at the patch
shape). Here the state lives in one time-major layout ``(N, S, P+1, E, R)`` in which the decay
``(N, S, E, R)`` broadcasts over an outer axis and the input ``x`` is never stored, the read is a
batched matmul, and the backward is the adjoint scans written by hand, one step at a time with
every contraction taken from the step's slab (see :class:`_SSMRead`); it saves the inputs, the
decays and the forward/reverse states only. Every decay factor is one ``exp(dt a)`` in [0, 1],
as in the plain recurrence: nothing overflows. (A masked decay-attention form, ``(N, N)``
weights per sequence and channel from factorized ``exp(+-a C_t)``, measured 2-3x slower than
this at both encoder shapes, and needs a range guard against overflow.)

Not twice differentiable (``once_differentiable``); the reference is.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

# The fused read runs ~20 ops per position: it is taken when one position holds at least
# SSM_SCAN_MIN_STEP state elements (per-op overhead is then small) and the sequence is at most
# SSM_SCAN_MAX_LEN long (beyond that the chunked scans' fewer Python steps win).
SSM_SCAN_MIN_STEP = 1 << 12
SSM_SCAN_MAX_LEN = 256


def use_ssm_scan(n: int, per_step: int) -> bool:
    """Whether :func:`ssm_read` is the form to use for ``n`` positions of ``per_step`` state elements
    (``S * E * R * (P+1)``)."""
    return 1 <= n <= SSM_SCAN_MAX_LEN and per_step >= SSM_SCAN_MIN_STEP and not torch.jit.is_scripting()


class _SSMRead(torch.autograd.Function):
    """``(dt (S, N, E), a (E, R), b, c (S, N, R), u (S, N, E, P))`` -> ``y (S, N, E, P+1)``.

    The last column reads ones (the normalizer). With ``x_t = (dt u)_t (x) b_t`` and ``A_t``:
    forward states ``f_t = A_t f_{t-1} + x_t``, reverse states ``z_t = A_t z_{t+1} + x_t``, the
    bidirectional state ``h_t = f_t + A_t z_{t+1} = f_t + z_t - x_t``, read ``y_t = c_t . h_t``.
    ``c_t . x_t = (c_t . b_t) (dt u)_t`` is small, so the read is one add and one batched matmul
    per step and a small correction, not a multiply that forms ``h``. (The subtraction
    adds an error of about ``eps (|c_t . f_t| + |c_t . z_t|)``, the size of the rounding already
    in ``f_t`` and ``z_t``, which both contain ``x_t``; in the ones column, the normalizer, every
    term is positive and the read stays exact to a few ulps.)

    Backward, with ``G`` the gradient of the read and ``K_t = G_t (x) c_t``: adjoint of the
    forward scan ``q_t = K_t + A_{t+1} q_{t+1}``, of the reverse one ``P_t = K_t + A_{t-1} P_{t-1}``
    (``P_t`` is ``K_t`` plus all that reaches ``z_t``); ``dL/dx_t = q_t + A_{t-1} P_{t-1}``,
    ``dL/dA_t = sum_p q_t f_{t-1} + sum_p P_t z_{t+1}``, ``dL/dc_t = sum_{e,p} G_t h_t``.

    Layout: time-major, one step of a state is a contiguous ``(S, P+1, E, R)`` slab. Only the
    ``f_t`` and ``z_t`` are kept (one tensor per step, see :func:`_scan`); ``x_t``, ``q_t``,
    ``P_t`` are formed per step into rolling slabs that stay in cache, and each step's
    contractions (``dL/dx`` against ``b`` and against ``dt u``, both linear, so ``q_t`` and
    ``A_{t-1} P_{t-1}`` are contracted apart) are taken from the hot slab: a whole-sequence
    buffer of ``q`` would cost a cold pass more than forming the step again.
    """

    @staticmethod
    def forward(ctx, dt, a, b, c, u, causal: bool):
        s, n, e = dt.shape
        r, p1 = a.shape[-1], u.shape[-1] + 1
        dtt = dt.transpose(0, 1).contiguous()  # (N, S, E)
        bt, ct = b.transpose(0, 1).contiguous(), c.transpose(0, 1).contiguous()  # (N, S, R)
        ut = dt.new_ones(n, s, p1, e)  # (N, S, P+1, E): the columns, last one ones
        ut[:, :, :-1] = u.permute(1, 0, 3, 2)
        w = ut * dtt[:, :, None, :]  # (N, S, P+1, E): dt_s u_s
        dec = (dtt[..., None] * a).exp_()  # (N, S, E, R), in [0, 1]
        d5, wq, bq = dec[:, :, None], w[..., None], bt[:, :, None, None, :]  # broadcast views
        xs = dt.new_empty(s, p1, e, r)  # scratch: x_t = (dt u)_t (x) b_t (a broadcast outer product;
        # a bmm with inner size 1 is several times slower)
        y = dt.new_empty(n, s, p1, e)
        ym, cm = y.view(n, s, p1 * e, 1), ct.view(n, s, r, 1)
        f = _scan(wq, bq, d5, xs, reverse=False)
        z = []
        if causal:
            for t in range(n):  # each state read by c_t
                torch.bmm(f[t].view(s, p1 * e, r), cm[t], out=ym[t])
        else:
            z = _scan(wq, bq, d5, xs, reverse=True)
            for t in range(n):  # f_t + z_t read by c_t in one bmm
                torch.bmm(torch.add(f[t], z[t], out=xs).view(s, p1 * e, r), cm[t], out=ym[t])
            y.addcmul_((ct * bt).sum(-1)[..., None, None], w, value=-1.0)  # - c_t . x_t
        ctx.causal, ctx.n = causal, n
        ctx.save_for_backward(a, dtt, bt, ct, ut, w, dec, *f, *z)
        return y.permute(1, 0, 3, 2)  # (S, N, E, P+1)

    @staticmethod
    @once_differentiable
    def backward(ctx, gy):
        a, dtt, bt, ct, ut, w, dec, *fz = ctx.saved_tensors
        n = ctx.n
        f, z = fz[:n], fz[n:]  # the per-step states (S, P+1, E, R)
        s, p1, e, r = f[0].shape
        causal = ctx.causal
        gt = gy.permute(1, 0, 3, 2).contiguous()  # (N, S, P+1, E)
        d5, gq, cq = dec[:, :, None], gt[..., None], ct[:, :, None, None, :]
        # dL/dc = h^T G = f^T G + z^T G - b (dt u . G), the first two per step in the loops
        gc = torch.empty_like(ct)  # (N, S, R)
        ga = torch.empty_like(dec)  # dL/dA (N, S, E, R)
        ga[0].zero_()
        gb = torch.empty_like(ct)  # (N, S, R)
        qb = torch.empty_like(gt)  # dL/d(dt u) (N, S, P+1, E)
        cur, prev = torch.empty_like(f[0]), torch.empty_like(f[0])  # rolling slabs
        # each stored state is read by both of its uses in one step, while its slab is in cache
        _sum_pe(f[n - 1], gt[n - 1], gc[n - 1], init=True)
        for t in range(n - 1, -1, -1):  # q_t = K_t + A_{t+1} q_{t+1}
            if t == n - 1:
                torch.mul(gq[t], cq[t], out=cur)
            else:
                torch.mul(d5[t + 1], prev, out=cur)
                cur.addcmul_(gq[t], cq[t])
            if t:
                _dot_p(ga[t], cur, f[t - 1], init=True)
                _sum_pe(f[t - 1], gt[t - 1], gc[t - 1], init=True)
            _contract(cur, bt[t], w[t], qb[t], gb[t], init=True)
            cur, prev = prev, cur
        if not causal:
            tmp = torch.empty_like(f[0])
            _sum_pe(z[0], gt[0], gc[0], init=False)
            for t in range(n):  # P_t = K_t + A_{t-1} P_{t-1}
                if t == 0:
                    torch.mul(gq[t], cq[t], out=cur)
                else:
                    torch.mul(d5[t - 1], prev, out=tmp)  # A_{t-1} P_{t-1}: the rest of dL/dx_t
                    _contract(tmp, bt[t], w[t], qb[t], gb[t], init=False)
                    torch.addcmul(tmp, gq[t], cq[t], out=cur)
                if t < n - 1:
                    _dot_p(ga[t], cur, z[t + 1], init=False)
                    _sum_pe(z[t + 1], gt[t + 1], gc[t + 1], init=False)
                cur, prev = prev, cur
            gc.addcmul_(bt, (w * gt).sum((2, 3))[..., None], value=-1.0)
        gla = ga.mul_(dec).view(n * s, e * r)  # dL/d(dt a)
        # both sums of gla as matmuls (a broadcast product would be a fresh 1/3-state buffer each):
        # over r against a by the block-diagonal (E R, E) matrix of a's rows, over (N, S) against dt
        # as one (1, N S) x (N S, R) product per channel
        ablk = (a[:, :, None] * torch.eye(e, dtype=a.dtype, device=a.device)[:, None, :]).view(e * r, e)
        gdt = torch.mm(gla, ablk).view(n, s, e) + (qb * ut).sum(2)  # (N, S, E)
        dte = dtt.view(n * s, e).t()[:, None, :]  # (E, 1, N S)
        gaa = torch.bmm(dte, gla.view(n * s, e, r).transpose(0, 1))[:, 0]  # (E, R)
        gu = qb[:, :, :-1] * dtt[:, :, None, :]  # (N, S, P, E)
        return gdt.transpose(0, 1), gaa, gb.transpose(0, 1), gc.transpose(0, 1), gu.permute(1, 0, 3, 2), None


def _scan(wq: torch.Tensor, bq: torch.Tensor, d5: torch.Tensor, xs: torch.Tensor, reverse: bool
          ) -> list[torch.Tensor]:
    """``h_t = A_t h_{t-+1} + x_t`` (forward, or ``reverse`` from the end) -> the ``N`` states
    ``(S, P+1, E, R)``, ``x_t = wq_t * bq_t`` formed per step into the scratch ``xs``.

    One tensor per step, not one (N, ...) buffer: an allocation above glibc's mmap threshold
    (at most 32 MB) is a fresh mapping every call, and first-touch page faults then cost as much
    as the scan (58 MB per state at the patch shape); per-step slabs are reused from the heap."""
    n = wq.shape[0]
    h: list[torch.Tensor] = [xs] * n
    first = n - 1 if reverse else 0
    h[first] = torch.mul(wq[first], bq[first])
    for t in range(n - 2, -1, -1) if reverse else range(1, n):
        torch.mul(wq[t], bq[t], out=xs)
        h[t] = torch.addcmul(xs, d5[t], h[t + 1] if reverse else h[t - 1])
    return h


def _dot_p(acc: torch.Tensor, x: torch.Tensor, y: torch.Tensor, init: bool) -> None:
    """``acc (=|+=) sum_p x[:, p] y[:, p]`` as a chain of multiply-adds (a reduction over an axis
    of 3 is a slow pass of its own)."""
    if init:
        torch.mul(x[:, 0], y[:, 0], out=acc)
    for i in range(1 if init else 0, x.shape[1]):
        acc.addcmul_(x[:, i], y[:, i])


def _contract(dx: torch.Tensor, b: torch.Tensor, w: torch.Tensor, qb: torch.Tensor, gb: torch.Tensor,
              init: bool) -> None:
    """Both contractions of (a part of) one step's ``dL/dx = dL/d((dt u) (x) b)`` (S, P+1, E, R),
    written (``init``) or added: into ``qb`` (S, P+1, E) the sum over ``r`` against ``b``, into
    ``gb`` (S, R) the sum over ``(p, e)`` against ``w = dt u``."""
    s, p1, e, r = dx.shape
    m, qo = dx.view(s, p1 * e, r), qb.view(s, p1 * e, 1)
    if init:
        torch.bmm(m, b.view(s, r, 1), out=qo)
    else:
        qo.baddbmm_(m, b.view(s, r, 1))
    _sum_pe(dx, w, gb, init)


# Contractions over the (P+1) E columns of a step: a batched matmul per sequence when they are
# this many or more; below, one multiply and a sum (a bmm pays ~0.35 us per sequence, and at the
# patch shape's 24 columns that is twice the elementwise form).
SUM_PE_BMM = 64


def _sum_pe(m: torch.Tensor, v: torch.Tensor, out: torch.Tensor, init: bool) -> None:
    """``out[s, r] (=|+=) sum_{p,e} m[s, p, e, r] v[s, p, e]``: ``m (S, P+1, E, R)``, ``v (S, P+1, E)``."""
    s, p1, e, r = m.shape
    if p1 * e >= SUM_PE_BMM:
        mm, vv, oo = m.view(s, p1 * e, r), v.reshape(s, 1, p1 * e), out.view(s, 1, r)
        if init:
            torch.bmm(vv, mm, out=oo)
        else:
            oo.baddbmm_(vv, mm)
    elif init:
        torch.sum(m.view(s, p1 * e, r) * v.reshape(s, p1 * e, 1), dim=1, out=out)
    else:
        out.add_((m.view(s, p1 * e, r) * v.reshape(s, p1 * e, 1)).sum(1))


def ssm_read(dt: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, u: torch.Tensor,
             causal: bool) -> torch.Tensor:
    """Unnormalized selective-SSM read of ``[u, 1]``: ``dt (S, N, E)``, ``a (E, R)``, ``b, c (S, N, R)``,
    ``u (S, N, E, P)`` -> ``(S, N, E, P+1)`` (the last column is the normalizer). One dtype throughout."""
    return _SSMRead.apply(dt, a, b, c, u, causal)


def ssm_read_reference(dt: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, u: torch.Tensor,
                       causal: bool) -> torch.Tensor:
    """The same sums by the plain recurrence, one step at a time (the oracle)."""
    u1 = torch.cat([u, torch.ones_like(u[..., :1])], dim=-1)  # (S, N, E, P+1)
    x = (dt[..., None] * b[:, :, None, :])[..., None] * u1[:, :, :, None, :]  # (S, N, E, R, P+1)
    dec = (dt[..., None] * a).exp()[..., None]  # (S, N, E, R, 1)
    n = dt.shape[1]
    f, fs = torch.zeros_like(x[:, 0]), []
    for t in range(n):
        f = dec[:, t] * f + x[:, t]
        fs.append(f)
    hs = fs
    if not causal:
        z, zs = torch.zeros_like(x[:, 0]), [None] * n  # z: the reverse state from t + 1 on
        for t in range(n - 1, -1, -1):
            zs[t] = dec[:, t] * z  # exclusive of t: s > t decayed by a_t .. a_{s-1}
            z = dec[:, t] * z + x[:, t]
        hs = [fs[t] + zs[t] for t in range(n)]
    h = torch.stack(hs, dim=1)  # (S, N, E, R, P+1)
    return (c[:, :, None, :, None] * h).sum(-2)
