"""The decayed scan as one step per position, with a hand-written backward (short sequences).

    causal:        h_t = f_t,                   f_t = a_t f_{t-1} + x_t
    bidirectional: h_t = f_t + a_t z_{t+1},     z_t = a_t z_{t+1} + x_t   (the reverse scan,
                                                exclusive of t: what ``_scan_bidir`` forms by flips)

``x (..., N, G, R)``, ``log_a (..., N, G)`` with ``log_a <= 0`` (``a_t`` applies to the ``R``
columns of its group). Every factor is one ``a_t`` in [0, 1], as in the ``"loop"`` form of
:func:`tsmix.ops.decay_scan.decay_scan`, so nothing overflows and the future cannot move the past.

Why a second form. At the patch encoder's shape (896 sequences x 42 patches) the scans of
fem-ssm, fem-aft, gla and fem-gla are a few hundred thousand elements per position: per-op
overhead is noise, and what costs is memory traffic. Autograd through the loop form stores one
state per step and replays unbind/stack/flip/cat; the chunked GLA form runs tens of thousands
of 8x4 matmuls. Here the forward writes each state once into a time-major buffer (one
``addcmul`` per step and direction, no flips), and the backward is the same kind of scan run the
other way (the adjoint of a linear recurrence): ``dL/dx = q + G`` with
``q_t = g_t + a_{t+1} q_{t+1}`` and ``G_t = a_{t-1} (g_{t-1} + G_{t-1})``, and
``dL/dlog_a_t = sum_R(q_t a_t f_{t-1}) + sum_R((g_t + G_t) a_t z_{t+1})``.

Not twice differentiable (``once_differentiable``); callers that need double backward use
:func:`~tsmix.ops.decay_scan.decay_scan`.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

# Use the step form when one position holds at least this many elements (per-op overhead is
# then < 1% of a step) and the sequence is at most STEP_SCAN_MAX_LEN long (beyond that the
# chunked forms' fewer Python steps win and their memory is lower).
STEP_SCAN_MIN_STEP = 1 << 13
STEP_SCAN_MAX_LEN = 256


def use_step_scan(n: int, per_step: int) -> bool:
    """Whether :func:`step_scan` is the faster exact form for ``n`` positions of ``per_step`` elements."""
    return 1 < n <= STEP_SCAN_MAX_LEN and per_step >= STEP_SCAN_MIN_STEP and not torch.jit.is_scripting()


def _forward_scan(x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """``f_t = a_t f_{t-1} + x_t`` along dim 0 (time-major ``x (N, ..., G, R)``, ``a (N, ..., G, 1)``)."""
    f = torch.empty_like(x)
    f[0] = x[0]
    for t in range(1, x.shape[0]):
        torch.addcmul(x[t], a[t], f[t - 1], out=f[t])
    return f


def _reverse_scan(x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """``z_t = a_t z_{t+1} + x_t`` along dim 0, from the end."""
    z = torch.empty_like(x)
    n = x.shape[0]
    z[n - 1] = x[n - 1]
    for t in range(n - 2, -1, -1):
        torch.addcmul(x[t], a[t], z[t + 1], out=z[t])
    return z


class _StepScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, log_a: torch.Tensor, causal: bool) -> torch.Tensor:
        # time-major: each step is one contiguous block
        xt = x.movedim(-3, 0).contiguous()  # (N, ..., G, R)
        a = log_a.movedim(-2, 0).exp().unsqueeze(-1).contiguous()  # (N, ..., G, 1)
        h = _forward_scan(xt, a)
        f = h if causal else h.clone()
        hb = None
        if not causal:
            z = _reverse_scan(xt, a)
            hb = torch.zeros_like(z)
            torch.mul(a[:-1], z[1:], out=hb[:-1])  # a_t z_{t+1}; zero at the end
            h.add_(hb)
        ctx.causal = causal
        ctx.save_for_backward(a, f, hb)
        return h.movedim(0, -3)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        a, f, hb = ctx.saved_tensors
        g = grad.movedim(-3, 0).contiguous()  # (N, ..., G, R)
        # adjoint of the forward scan: q_t = g_t + a_{t+1} q_{t+1}
        a_next = torch.zeros_like(a)
        a_next[:-1] = a[1:]
        q = _reverse_scan(g, a_next)
        glog = torch.zeros(a.shape[:-1], dtype=a.dtype, device=a.device)  # (N, ..., G)
        glog[1:] = (q[1:] * f[:-1]).sum(-1) * a[1:, ..., 0]
        gx = q
        if not ctx.causal:
            # adjoint of the reverse scan: P_t = g_t + a_{t-1} P_{t-1}, G_t = a_{t-1} P_{t-1}
            a_prev = torch.zeros_like(a)
            a_prev[1:] = a[:-1]
            p = _forward_scan(g, a_prev)
            gx[1:].addcmul_(a_prev[1:], p[:-1])
            glog += (hb * p).sum(-1)
        return gx.movedim(0, -3), glog.movedim(0, -2), None


def step_scan(x: torch.Tensor, log_a: torch.Tensor, causal: bool = True) -> torch.Tensor:
    """Inclusive decayed scan (+ the exclusive reverse scan when not ``causal``), step form.

    ``x (..., N, G, R)``, ``log_a (..., N, G)`` -> ``(..., N, G, R)``; the same values as
    ``decay_scan`` (causal) or ``fem_priors._scan_bidir`` (bidirectional), with a cheaper
    backward. ``x`` and ``log_a`` must share a floating dtype.
    """
    if x.shape[-3] != log_a.shape[-2] or x.shape[-2] != log_a.shape[-1]:
        raise ValueError(f"step_scan: x {tuple(x.shape)} and log_a {tuple(log_a.shape)} do not match")
    lead = torch.broadcast_shapes(x.shape[:-3], log_a.shape[:-2])
    x = x.expand(*lead, *x.shape[-3:])
    log_a = log_a.expand(*lead, *log_a.shape[-2:])
    return _StepScan.apply(x, log_a, causal)
