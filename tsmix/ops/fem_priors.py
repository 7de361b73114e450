"""Selection priors of the Free Energy Mixer: fast read, plain log-prior, streaming step.

A prior turns a sequence into weights ``p_t(i) >= 0`` with ``sum_i p_t(i) = 1`` and *reads*
columns with them: ``read_t = sum_i p_t(i) u_i``. FEM reads ``u = [v, exp(beta v)]`` in one pass.
Every prior here has three forms that must agree:

* ``*_read``: the fast path (SDPA, chunked GLA scan, log-space decayed scan);
* ``*_logp``: the explicit ``log p`` matrix, computed in log space (the plain reference);
* ``*_step``: one streaming step with a constant-size state (the linear-time priors).

Per-head priors (softmax, GLA) share ``p`` across the channels of a head: columns are
``(B, H, N, W)``, ``log p (B, H, N, N)``. Per-channel priors (selective SSM, AFT) have one ``p``
per value channel: columns ``(B, N, E, P)``, ``log p (B, E, N, N)``. Bidirectional priors weight
``s <= t`` by the causal scan and ``s > t`` by the same scan run backwards, exclusive of ``t``.
"""

from __future__ import annotations

import torch

from tsmix.ops.attention import attend, attention_logits, causal_mask
from tsmix.ops.decay_scan import _work_dtype, decay_scan, segment_sum, shift_exclusive
from tsmix.ops.gla_chunk import gla_bidir, gla_step
from tsmix.ops.ssm_scan import ssm_read, use_ssm_scan
from tsmix.ops.step_scan import step_scan, use_step_scan


def _normalize_logw(logw: torch.Tensor) -> torch.Tensor:
    return logw - torch.logsumexp(logw, dim=-1, keepdim=True)


def _bidir_segments(la: torch.Tensor, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-decay between ``s`` and ``t`` for every pair, finite everywhere (0 where unused).

    ``la (..., N)`` -> ``(seg (..., N, N), used (N, N) bool)``. Causal part ``s <= t``: sum of
    ``la[s+1..t]``; anti-causal part ``s > t`` (bidirectional only): sum of ``la[t..s-1]``.
    """
    n = la.shape[-1]
    fwd = causal_mask(n, la.device)
    seg = segment_sum(la).masked_fill(~fwd, 0.0)
    if causal:
        return seg, fwd
    bwd = segment_sum(la.flip(-1)).flip(-1).flip(-2)  # [t, s] = sum la[t..s-1] for s >= t
    bwd = bwd.masked_fill(fwd, 0.0)  # keep the strict upper triangle s > t
    return seg + bwd, torch.ones(n, n, dtype=torch.bool, device=la.device)


# ----------------------------------------------------------------------------- softmax


def sm_read(q: torch.Tensor, k: torch.Tensor, u: torch.Tensor, causal: bool, dropout: float = 0.0):
    """``q, k (B, H, N, d_k)``, ``u (B, H, N, W)``: one SDPA call reads all columns."""
    return attend(q, k, u, causal, dropout)


def sm_logp(q: torch.Tensor, k: torch.Tensor, causal: bool) -> torch.Tensor:
    """Explicit ``log softmax(q k^T / sqrt(d))`` (B, H, N, N), the plain twin of :func:`sm_read`."""
    return torch.log_softmax(attention_logits(q, k, causal), dim=-1)


# ----------------------------------------------------------------------------- GLA


def gla_prior_read(q, k, u, log_a, causal: bool, chunk: int) -> torch.Tensor:
    """Normalized gated linear attention with positive features ``q, k (B, H, N, d_k)`` and
    per-key-dim log decay ``log_a (B, H, N, d_k)``: reads ``u (B, H, N, W)``."""
    u1 = torch.cat([u, torch.ones_like(u[..., :1])], dim=-1)  # last column: the normalizer
    r = gla_bidir(q, k, u1, log_a, causal, chunk)
    return r[..., :-1] / r[..., -1:].clamp_min(torch.finfo(r.dtype).tiny)


def gla_prior_logp(log_q, log_k, log_a, causal: bool) -> torch.Tensor:
    """``log p[t, s] = log sum_d phi(q_td) phi(k_sd) decay_d(s -> t)``, normalized; inputs are the
    log features ``log phi(q), log phi(k)`` and ``log_a``, all ``(B, H, N, d_k)``."""
    seg, used = _bidir_segments(log_a.transpose(-1, -2), causal)  # (B, H, d_k, N, N)
    logw = torch.logsumexp(
        log_q.transpose(-1, -2)[..., :, None] + log_k.transpose(-1, -2)[..., None, :] + seg, dim=-3
    )  # (B, H, N, N)
    return _normalize_logw(logw.masked_fill(~used, float("-inf")))


def gla_prior_step(q, k, u, log_a, state):
    """``q, k, log_a (B, H, d_k)``, ``u (B, H, W)``, ``state (B, H, d_k, W + 1)``."""
    u1 = torch.cat([u, torch.ones_like(u[..., :1])], dim=-1)
    r, state = gla_step(q, k, u1, log_a, state)
    return r[..., :-1] / r[..., -1:].clamp_min(torch.finfo(r.dtype).tiny), state


# ----------------------------------------------------------------------------- selective SSM


def _scan_bidir(x: torch.Tensor, log_a: torch.Tensor, causal: bool) -> torch.Tensor:
    """Inclusive decayed scan over dim -3 (+ the exclusive reverse scan when bidirectional)."""
    n = x.shape[-3]
    if use_step_scan(n, x.numel() // max(n, 1)):  # short sequences, big steps: the step form
        wd = _work_dtype(torch.promote_types(x.dtype, log_a.dtype))
        return step_scan(x.to(wd), log_a.to(wd), causal).to(x.dtype)
    h = decay_scan(x, log_a)
    if not causal:
        hb = shift_exclusive(decay_scan(x.flip(-3), log_a.flip(-2)), log_a.flip(-2))
        h = h + hb.flip(-3)
    return h


def ssm_prior_read(dt, a, b, c, u, causal: bool, fused: bool = True) -> torch.Tensor:
    """Normalized selective scan (Mamba-style, one prior per value channel).

    ``dt (B, N, E) > 0`` step sizes, ``a (E, R) < 0``, ``b (B, N, R) > 0`` input and
    ``c (B, N, R) > 0`` output maps, ``u (B, N, E, P)`` columns. The state of channel ``e`` is
    ``h_t = exp(dt_t a) h_{t-1} + dt_t b_t u_t``, read ``c_t . h_t``; the weight it gives position
    ``s`` is positive, and dividing by the read of a ones column normalizes it.

    Short sequences with big steps (the encoders' shapes) take the fused read of
    :func:`tsmix.ops.ssm_scan.ssm_read` (one autograd node, hand-written adjoint scans) unless
    ``fused`` is False; otherwise, and as the reference, :func:`ssm_prior_read_reference`.
    """
    bsz, n, e, p = u.shape
    if fused and use_ssm_scan(n, bsz * e * a.shape[-1] * (p + 1)):
        wd = _work_dtype(torch.promote_types(torch.promote_types(dt.dtype, a.dtype), u.dtype))
        y = ssm_read(dt.to(wd), a.to(wd), b.to(wd), c.to(wd), u.to(wd), causal).to(u.dtype)
        return y[..., :-1] / y[..., -1:].clamp_min(torch.finfo(y.dtype).tiny)
    return ssm_prior_read_reference(dt, a, b, c, u, causal)


def ssm_prior_read_reference(dt, a, b, c, u, causal: bool) -> torch.Tensor:
    """:func:`ssm_prior_read` through autograd: the state ``x (B, N, E, R, P+1)`` is built,
    scanned by :func:`_scan_bidir` and read (twice differentiable at small steps)."""
    bsz, n, e, _ = u.shape
    r = a.shape[-1]
    u1 = torch.cat([u, torch.ones_like(u[..., :1])], dim=-1)  # (B, N, E, P+1)
    x = (dt[..., None, None] * b[:, :, None, :, None]) * u1[:, :, :, None, :]  # (B, N, E, R, P+1)
    log_a = (dt[..., None] * a).reshape(bsz, n, e * r)  # (B, N, E*R)
    h = _scan_bidir(x.reshape(bsz, n, e * r, -1), log_a, causal).reshape(x.shape)
    y = (c[:, :, None, :, None] * h).sum(-2)  # (B, N, E, P+1)
    return y[..., :-1] / y[..., -1:].clamp_min(torch.finfo(y.dtype).tiny)


def ssm_prior_logp(dt, a, b, c, causal: bool) -> torch.Tensor:
    """``log p (B, E, N, N)`` of :func:`ssm_prior_read`, from explicit log-space weights."""
    seg, used = _bidir_segments(dt.transpose(1, 2), causal)  # (B, E, N, N): sum of dt between
    logw = torch.logsumexp(
        c.log()[:, None, :, None, :]  # (B, 1, N, 1, R)
        + b.log()[:, None, None, :, :]
        + dt.log().transpose(1, 2)[:, :, None, :, None]  # dt_s
        + seg[..., None] * a[None, :, None, None, :],  # (B, E, N, N, R)
        dim=-1,
    )
    return _normalize_logw(logw.masked_fill(~used, float("-inf")))


def ssm_prior_step(dt, a, b, c, u, state):
    """One step: ``dt (B, E)``, ``b, c (B, R)``, ``u (B, E, P)``, ``state (B, E, R, P+1)``."""
    u1 = torch.cat([u, torch.ones_like(u[..., :1])], dim=-1)
    decay = (dt[..., None] * a).exp()[..., None]  # (B, E, R, 1)
    state = decay * state + (dt[..., None, None] * b[:, None, :, None]) * u1[:, :, None, :]
    y = (c[:, None, :, None] * state).sum(-2)  # (B, E, P+1)
    return y[..., :-1] / y[..., -1:].clamp_min(torch.finfo(y.dtype).tiny), state


# ----------------------------------------------------------------------------- AFT


def aft_prior_read(key, log_decay, u, causal: bool) -> torch.Tensor:
    """AFT with a per-channel exponential position bias (AFT-simple when the decay is 0).

    ``p_t(s) ∝ exp(key_s - gamma |t - s|)`` per channel: ``key (B, N, E)`` already bounded,
    ``log_decay = -gamma (E,)``, ``u (B, N, E, P)``.
    """
    u1 = torch.cat([u, torch.ones_like(u[..., :1])], dim=-1)
    x = key.exp()[..., None] * u1  # (B, N, E, P+1)
    log_a = log_decay.expand(key.shape)
    y = _scan_bidir(x, log_a, causal)
    return y[..., :-1] / y[..., -1:].clamp_min(torch.finfo(y.dtype).tiny)


def aft_read_columns(key, log_decay, cols: list[torch.Tensor], causal: bool) -> list[torch.Tensor]:
    """:func:`aft_prior_read` of the columns ``cols`` (each ``(B, N, E)``) -> their reads, each
    ``(B, N, E)`` contiguous: the same sums, arranged for small per-channel columns.

    The weighted columns ``[w c_1, .., w c_P, w]`` (``w = exp(key)``) are written by one stack,
    and the scan sees every (channel, column) pair as its own group with ``R = 1``: with
    ``R = P + 1 = 3`` each scan step broadcasts a decay over 3-wide rows (not vectorized,
    ~1/3 of fem-aft's step at the variate shape); the decay is the channel's, repeated per column.
    """
    w = key.exp()
    x = torch.stack([w * c for c in cols] + [w], dim=-1)  # (B, N, E, P+1)
    b, n, e, p1 = x.shape
    log_a = log_decay[:, None].expand(e, p1).reshape(e * p1).expand(b, n, e * p1)
    y = _scan_bidir(x.view(b, n, e * p1, 1), log_a, causal).view(b, n, e, p1)
    den = y[..., -1].clamp_min(torch.finfo(y.dtype).tiny)
    return [y[..., i] / den for i in range(p1 - 1)]


def aft_kernel_t(log_decay: torch.Tensor, n: int, causal: bool) -> torch.Tensor:
    """AFT's position weights transposed, ``(E, N_s, N_t)``: ``exp(log_decay_e |t - s|)``, 0 at
    ``s > t`` when causal. Every factor is at most 1 (``log_decay <= 0``): nothing overflows."""
    pos = torch.arange(n, device=log_decay.device, dtype=log_decay.dtype)
    dist = (pos[None, :] - pos[:, None]).abs()  # (N_s, N_t)
    k = torch.exp(log_decay[:, None, None] * dist)
    if causal:
        k = k.masked_fill(~causal_mask(n, log_decay.device).t(), 0.0)  # keep s <= t
    return k


def aft_read_t(key, log_decay, cols: list[torch.Tensor], n: int, causal: bool) -> list[torch.Tensor]:
    """:func:`aft_prior_read` channel-major for short sequences: ``key`` and each column
    ``(E, B N)`` (tokens in ``(b, n)`` order), ``log_decay (E,)`` -> the columns' reads, each
    ``(E, B N)``.

    The decay is per channel and the same at every step, so on a short sequence the whole read
    is one ``bmm`` of the weighted columns ``(E, (P+1) B, N)`` by the ``(E, N, N)`` kernel of
    :func:`aft_kernel_t`: no step loop, no permutes (the same sums as the scan, in another
    order). The sums run in float32 under bfloat16 / float16 (as the scan's work dtype).
    """
    e = key.shape[0]
    wd = _work_dtype(key.dtype)
    with torch.autocast(key.device.type, enabled=False):  # autocast would cast the bmm down
        w = key.to(wd).exp()
        x = torch.stack([w * c.to(wd) for c in cols] + [w], dim=1)  # (E, P+1, B N)
        p1 = x.shape[1]
        y = torch.bmm(x.view(e, -1, n), aft_kernel_t(log_decay.to(wd), n, causal)).view(e, p1, -1)
        *num, den = y.unbind(1)  # (E, B N) each: unbind, not selects (one gradient buffer, not P+1)
        den = den.clamp_min(torch.finfo(y.dtype).tiny)  # the normalizer
        return [(c / den).to(key.dtype) for c in num]


def aft_prior_logp(key, log_decay, causal: bool) -> torch.Tensor:
    """``log p (B, E, N, N)``: ``key_s + log_decay * |t - s|``, masked and normalized."""
    n = key.shape[1]
    pos = torch.arange(n, device=key.device, dtype=key.dtype)
    dist = (pos[:, None] - pos[None, :]).abs()  # (N, N)
    logw = key.transpose(1, 2)[:, :, None, :] + log_decay[None, :, None, None] * dist
    if causal:
        logw = logw.masked_fill(~causal_mask(n, key.device), float("-inf"))
    return _normalize_logw(logw)


def aft_prior_step(key, log_decay, u, state):
    """One step: ``key (B, E)``, ``u (B, E, P)``, ``state (B, E, P+1)``."""
    u1 = torch.cat([u, torch.ones_like(u[..., :1])], dim=-1)
    state = log_decay.exp()[..., None] * state + key.exp()[..., None] * u1
    return state[..., :-1] / state[..., -1:].clamp_min(torch.finfo(state.dtype).tiny), state
