"""Gated linear attention: chunked parallel form (matmuls), recurrent form, plain reference.

    S_t = diag(a_t) S_{t-1} + k_t^T v_t        (state (d_k, d_v), a_t = exp(log_a_t) in (0, 1])
    inclusive: o_t = q_t S_t                   = sum_{s<=t} (q_t * exp(c_t - c_s)) . k_s  v_s
    exclusive: o_t = q_t (diag(a_t) S_{t-1})   = the same sum over s < t

where ``c_t - c_s`` is the log-decay accumulated over steps ``s+1 .. t``. The decay is per key
dimension (``log_a (..., N, d_k)``, GLA) or per head (``log_a (..., N, 1)``, a scalar gate as in
RetNet/Mamba-2). Plain linear attention is ``log_a = 0``.

Numerics. Every form floors the per-step log-decay at ``LOG_DECAY_MIN`` (a >= e^-5 = 0.0067:
one step already forgets 99.3%, so the floor only matters for saturated gates). Inside a chunk,
a per-head decay uses exact segment sums (``exp <= 1``); a per-key-dim decay uses the factorized
``(q_t e^{c_t}) . (k_s e^{-c_s})`` with ``c`` counted from the chunk start, one matmul instead of
an (L, L, d_k) tensor. The reference point is the chunk start, never a later position, so the
future cannot move a rounding; the floor keeps ``|c| <= (chunk - 1) * 5 <= 35`` for
``chunk <= MAX_FACTORIZED_CHUNK``. Chunk states decay by ``exp(rest of chunk) <= 1`` and the
states entering each chunk come from the log-space :func:`decay_scan`. Nothing overflows, and
future positions only ever meet a causal mask, never a sum or max that earlier outputs share.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tsmix.ops.attention import causal_mask
from tsmix.ops.decay_scan import _work_dtype, decay_scan, segment_sum
from tsmix.ops.step_scan import step_scan, use_step_scan

LOG_DECAY_MIN = -5.0  # floor of the per-step log-decay, in every form (see the module doc)
MAX_FACTORIZED_CHUNK = 8  # keeps e^{-c_s} <= e^35 for per-key-dim decays
# gla_bidir uses the state scan when a head's state d_k x d_v is at most this (the patch encoder's
# 4 x 4 or 4 x 5): its chunked matmuls are then far below their per-call overhead
SCAN_STATE_MAX = 64


def floor_decay(log_a: torch.Tensor) -> torch.Tensor:
    return log_a.clamp_min(LOG_DECAY_MIN)


def _intra_scores(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``A[t, s] = sum_d q_td k_sd w[d, t, s]``; ``w (..., G, L, L)`` with G in {1, d_k}."""
    if w.shape[-3] == 1:
        return (q @ k.transpose(-1, -2)) * w[..., 0, :, :]
    return torch.einsum("...td,...sd,...dts->...ts", q, k, w)


def _intra_chunk(qc, kc, qd, la, inclusive: bool):
    """Within-chunk scores ``(..., K, L, L)``; ``la (..., K, G, L)`` the chunk's log-decays and
    ``qd = q e^{c_t}`` (decay from the chunk start)."""
    length = la.shape[-1]
    if la.shape[-2] == 1:  # per-head decay: exact segment sums, an (L, L) tensor per chunk
        w = segment_sum(la).exp()
        if not inclusive:
            w = w.masked_fill(torch.eye(length, dtype=torch.bool, device=w.device), 0.0)
        return _intra_scores(qc, kc, w)
    kd = kc * (-la.cumsum(-1)).transpose(-1, -2).exp()  # k_s e^{-c_s} <= |k| e^35
    keep = causal_mask(length, qc.device, strict=not inclusive)
    return (qd @ kd.transpose(-1, -2)).masked_fill(~keep, 0.0)


def gla_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_a: torch.Tensor,
    *,
    chunk: int = 16,
    inclusive: bool = True,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunked GLA. ``q, k (..., N, d_k)``, ``v (..., N, d_v)``, ``log_a (..., N, G)``, G in {1, d_k}.

    Returns ``(o (..., N, d_v), final_state (..., d_k, d_v))``. Cost O(N·chunk·d_k + N·d_k·d_v).
    """
    out_dtype = v.dtype
    wd = _work_dtype(v.dtype)
    q, k, v, log_a = (t.to(wd) for t in (q, k, v, log_a))
    n, dk, dv, g = q.shape[-2], q.shape[-1], v.shape[-1], log_a.shape[-1]
    if g not in (1, dk):
        raise ValueError(f"log_a must have last dim 1 or d_k={dk}, got {g}")
    if g > 1 and chunk > MAX_FACTORIZED_CHUNK:
        raise ValueError(f"per-key-dim decays need chunk <= {MAX_FACTORIZED_CHUNK}, got {chunk}")
    log_a = floor_decay(log_a)
    length = max(1, min(chunk, n))
    pad = (-n) % length
    if pad:  # zero q/k/v and zero log-decay at the end leave the prefix and the state untouched
        q, k, v, log_a = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v, log_a))
    *lead, n_pad, _ = q.shape
    nk = n_pad // length
    qc = q.reshape(*lead, nk, length, dk)  # (..., K, L, d_k)
    kc = k.reshape(*lead, nk, length, dk)
    vc = v.reshape(*lead, nk, length, dv)
    la = log_a.reshape(*lead, nk, length, g).transpose(-1, -2)  # (..., K, G, L)
    cum = la.cumsum(-1)  # (..., K, G, L): log-decay from the chunk start through t
    qd = qc * cum.transpose(-1, -2).exp()  # (..., K, L, d_k): q_t e^{c_t}, exponent <= 0
    o = _intra_chunk(qc, kc, qd, la, inclusive) @ vc  # (..., K, L, d_v)

    rest = F.pad(la.flip(-1).cumsum(-1)[..., :-1], (1, 0)).flip(-1)  # (..., K, G, L): over s+1 .. end
    tail = rest.transpose(-1, -2).exp()  # (..., K, L, G)
    u = (kc * tail).transpose(-1, -2) @ vc  # (..., K, d_k, d_v): what each chunk adds
    tot = cum[..., -1]  # (..., K, G): log-decay over the whole chunk
    if initial_state is not None:  # a virtual chunk in front that adds the initial state
        u = torch.cat([initial_state.to(wd)[..., None, :, :], u], dim=-3)
        tot = torch.cat([torch.zeros_like(tot[..., :1, :]), tot], dim=-2)
    ends = decay_scan(u.reshape(*u.shape[:-2], g, -1), tot).reshape(u.shape)  # states at chunk ends
    if initial_state is not None:
        prev, final = ends[..., :-1, :, :], ends[..., -1, :, :]
    else:
        prev = torch.cat([torch.zeros_like(ends[..., :1, :, :]), ends[..., :-1, :, :]], dim=-3)
        final = ends[..., -1, :, :]
    o = o + qd @ prev  # the state entering the chunk, decayed to t
    o = o.reshape(*lead, n_pad, dv)[..., :n, :]
    return o.to(out_dtype), final.to(out_dtype)


def gla_scan(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_a: torch.Tensor,
             causal: bool) -> torch.Tensor:
    """GLA through the state itself: ``S_t`` for every t by :func:`~tsmix.ops.step_scan.step_scan`
    (inclusive causal scan, + the exclusive reverse scan when not ``causal``), read ``o_t = q_t S_t``.

    Same contract as :func:`gla_bidir`. O(N d_k d_v) memory: for small heads only (where the
    chunked form's matmuls are tinier than their overhead).
    """
    out_dtype = v.dtype
    wd = _work_dtype(v.dtype)
    q, k, v, log_a = (t.to(wd) for t in (q, k, v, log_a))
    g = log_a.shape[-1]
    x = k[..., :, None] * v[..., None, :]  # (..., N, d_k, d_v): what each token adds to the state
    s = step_scan(x.reshape(*x.shape[:-2], g, -1), floor_decay(log_a), causal).view(x.shape)
    return (q[..., :, None] * s).sum(-2).to(out_dtype)  # (..., N, d_v)


def gla_bidir(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_a: torch.Tensor, causal: bool,
              chunk: int) -> torch.Tensor:
    """GLA read ``o (..., N, d_v)``: causal inclusive, or bidirectional (+ the anti-causal half,
    exclusive of the current token). Shapes as :func:`gla_chunked`; picks the faster exact form:
    bidirectional on CPU with N <= 128, d_k <= 16 and bounded total decay, the dense decay
    attention of :func:`tsmix.ops.gla_small.gla_dense_bidir`; else :func:`gla_scan` for short
    sequences of small heads, else :func:`gla_chunked`."""
    n, dk, dv = q.shape[-2], q.shape[-1], v.shape[-1]
    if not causal:
        from tsmix.ops.gla_small import dense_bidir_fits, gla_dense_bidir  # imports this module

        la = floor_decay(log_a)
        if dense_bidir_fits(q, k, v, la):  # short sequences on CPU: a few batched matmuls
            return gla_dense_bidir(q, k, v, la)
    if dk * dv <= SCAN_STATE_MAX and use_step_scan(n, q[..., 0, :, 0].numel() * dk * dv):
        return gla_scan(q, k, v, log_a, causal)
    o, _ = gla_chunked(q, k, v, log_a, chunk=chunk)
    if not causal:
        o = o + reverse_exclusive(gla_chunked, q, k, v, log_a, chunk=chunk, inclusive=False)
    return o


def gla_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_a: torch.Tensor,
    state: torch.Tensor,
    inclusive: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One recurrent step: ``q, k (..., d_k)``, ``v (..., d_v)``, ``log_a (..., G)``,
    ``state (..., d_k, d_v)`` -> ``(o (..., d_v), new state)``."""
    decayed = floor_decay(log_a).exp()[..., None] * state
    new = decayed + k[..., :, None] * v[..., None, :]
    read = new if inclusive else decayed
    return (q[..., None, :] @ read)[..., 0, :], new


def gla_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_a: torch.Tensor,
    *,
    inclusive: bool = True,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The recurrence step by step (streaming form); same contract as :func:`gla_chunked`."""
    state = initial_state
    if state is None:
        state = q.new_zeros(*q.shape[:-2], q.shape[-1], v.shape[-1])
    outs = []
    for t in range(q.shape[-2]):
        o, state = gla_step(q[..., t, :], k[..., t, :], v[..., t, :], log_a[..., t, :], state, inclusive)
        outs.append(o)
    return torch.stack(outs, dim=-2), state


def gla_weights_reference(q: torch.Tensor, k: torch.Tensor, log_a: torch.Tensor, inclusive: bool = True):
    """Plain (N, N) mixing matrix ``A[t, s]`` of the recurrence (zero where it does not read)."""
    w = segment_sum(floor_decay(log_a).transpose(-1, -2)).exp()  # (..., G, N, N)
    if not inclusive:
        w = w.masked_fill(torch.eye(q.shape[-2], dtype=torch.bool, device=w.device), 0.0)
    return _intra_scores(q, k, w)


def gla_reference(q, k, v, log_a, inclusive: bool = True) -> torch.Tensor:
    """Plain quadratic form ``A @ v`` (the oracle for the chunked and recurrent forms)."""
    return gla_weights_reference(q, k, log_a, inclusive) @ v


def reverse_exclusive(fn, *tensors: torch.Tensor, **kw) -> torch.Tensor:
    """Anti-causal half of a bidirectional scan: run ``fn`` (an exclusive causal scan) on the
    time-reversed inputs (time at dim -2) and reverse its output back."""
    out = fn(*(t.flip(-2) for t in tensors), **kw)
    out = out[0] if isinstance(out, tuple) else out
    return out.flip(-2)
