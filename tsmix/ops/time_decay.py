"""FEM's module C: low-rank time-decay conditioning, computed with the log-space scan.

    h_t = a_t * h_{t-1} + W_x LN(x_t)          a_t = exp(-softplus(W_a LN(x_t)))   (rank channels)
    s_t = (shortcut_t * LN(h_t)) W_out         shortcut = RMS-normalized softplus(W_s LN(x_t))

``s`` modulates the mixer's inputs as ``z (1 + s)``. The FEM release evaluates the scan as
``e^{c_t} cumsum(x / e^{c_t})`` (``c = cumsum(log a)``), which underflows after a few dozen
steps; here it is :func:`decay_cumsum` (exact segment sums, chunked) on long sequences and a
step loop with a hand-written backward (:class:`_ShortScan`, used by
:meth:`TimeDecayCondition.gain`) on short ones, both with every factor one ``a_t`` in [0, 1].
Bidirectional: half of the channels scan forward, half backward.
``W_out`` starts at zero: C starts as ``z (1 + 0)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from tsmix.ops.decay_scan import _work_dtype, decay_cumsum, decay_scan_reference

# The step loop costs one Python step per position; past this length the chunked log-space
# scan (fewer steps) wins, and it is the form the 10,000-step test pins.
SHORT_SCAN_MAX_LEN = 256


def _scan(x: torch.Tensor, a: torch.Tensor, half: int) -> torch.Tensor:
    """C's scan in the channel-major, time-major layout ``(N, r, B)``: from ``x, a (N, r, B)``
    the states ``h (N, r, B)``; channels ``[:half]`` run forward (``h_t = a_t h_{t-1} + x_t``),
    ``[half:]`` backward (``h_t = a_t h_{t+1} + x_t``), both inclusive.

    One step of one direction is one contiguous ``(channels, B)`` block: no flips, no cats, no
    per-step autograd nodes (its adjoint is :func:`_scan_adjoint`).
    """
    h = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    n, r = x.shape[:2]
    # each direction's per-step blocks as views made once by unbind: indexing them per
    # step costs two view ops per operand, 4/5 of the loop's ops at 7-21 tokens
    for lo, hi, order in ((0, half, range(n)), (half, r, range(n - 1, -1, -1))):
        if lo == hi:  # causal: no backward channels
            continue
        xs, av, hs = (t[:, lo:hi].unbind(0) for t in (x, a, h))  # N x (channels, B)
        prev = None
        for t in order:
            if prev is None:
                hs[t].copy_(xs[t])
            else:
                torch.addcmul(xs[t], av[t], hs[prev], out=hs[t])
            prev = t
    return h


def _scan_adjoint(grad: torch.Tensor, a: torch.Tensor, h: torch.Tensor, half: int):
    """Gradients ``(dx, da)`` of :func:`_scan` from ``grad (N, r, B)``: the adjoint recurrence run
    the other way, in place on a copy of ``grad``. Forward channels ``q_t = g_t + a_{t+1} q_{t+1}``,
    ``dx = q``, ``da_t = q_t h_{t-1}``; backward channels ``p_t = g_t + a_{t-1} p_{t-1}``,
    ``dx = p``, ``da_t = p_t h_{t+1}``."""
    n, r = a.shape[:2]
    g = grad.clone(memory_format=torch.contiguous_format)
    ga = torch.zeros_like(h)
    if half:
        gs, av = g[:, :half].unbind(0), a[:, :half].unbind(0)
        for s in range(n - 2, -1, -1):
            gs[s].addcmul_(av[s + 1], gs[s + 1])
        torch.mul(g[1:, :half], h[:-1, :half], out=ga[1:, :half])
    if half < r:
        gs, av = g[:, half:].unbind(0), a[:, half:].unbind(0)
        for t in range(1, n):
            gs[t].addcmul_(av[t - 1], gs[t - 1])
        torch.mul(g[:-1, half:], h[1:, half:], out=ga[:-1, half:])
    return g, ga


class _ShortScan(torch.autograd.Function):
    """:func:`_scan` as an autograd node, its backward :func:`_scan_adjoint` (no per-step nodes)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, a: torch.Tensor, half: int) -> torch.Tensor:
        h = _scan(x, a, half)
        ctx.half = half
        ctx.save_for_backward(a, h)
        return h

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        a, h = ctx.saved_tensors
        return (*_scan_adjoint(grad, a, h, ctx.half), None)


class _Modulate(torch.autograd.Function):
    """``z * (1 + a @ p)`` for ``z (M, K)``, ``a (M, r)``, ``p (r, K)``, without autograd's extra buffers.

    The gain ``1 + a p`` is as large as ``z`` (the whole fused projection); autograd would keep
    it and allocate two more such tensors in backward (``g (1 + a p)`` and ``g z``). Here the
    second is written into the gain's buffer once the first is taken: one large allocation
    less per step (on this machine each fresh one also pays its page faults). The gain is kept
    on ``ctx`` rather than saved (a saved tensor written in place fails autograd's version
    check), so a second backward through a retained graph recomputes it instead of reading
    the overwritten buffer.
    """

    @staticmethod
    def forward(ctx, z: torch.Tensor, a: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        gain = torch.addmm(a.new_ones(()), a, p)
        ctx.save_for_backward(z, a, p)
        ctx.gain = gain  # an intermediate: ctx may hold it (no reference cycle through outputs)
        return z * gain

    @staticmethod
    @once_differentiable
    def backward(ctx, g: torch.Tensor):
        z, a, p = ctx.saved_tensors
        gain, ctx.gain = ctx.gain, None  # first backward takes the buffer; a later one rebuilds it
        if gain is None:
            gain = torch.addmm(a.new_ones(()), a, p)
        gz = g * gain
        gs = torch.mul(g, z, out=gain)  # d/ds, in the gain's buffer (not needed any more)
        return gz, gs @ p.t(), a.t() @ gs


class TimeDecayCondition(nn.Module):
    def __init__(self, dim: int, rank: int, out_dim: int, causal: bool, bias: bool = True) -> None:
        super().__init__()
        if rank < 2 or rank % 2:
            raise ValueError(f"TimeDecayCondition rank must be even and >= 2, got {rank}")
        self.rank, self.causal = rank, causal
        self.norm = nn.LayerNorm(dim)
        self.inp = nn.Linear(dim, 3 * rank, bias=bias)  # shortcut, scan input, decay
        self.ln = nn.LayerNorm(rank)
        self.proj = nn.Parameter(torch.zeros(rank, out_dim))

    def _parts(self, x: torch.Tensor):
        sc, xf, dz = self.inp(self.norm(x)).chunk(3, dim=-1)  # (B, N, r) each
        return F.rms_norm(F.softplus(sc), (self.rank,), eps=1e-6), xf, -F.softplus(dz)

    def _out(self, h: torch.Tensor, sc: torch.Tensor) -> torch.Tensor:
        return (sc * self.ln(h)) @ self.proj  # (B, N, out_dim)

    def _scan(self, xf, log_a, fn):
        if self.causal:
            return fn(xf, log_a)
        half = self.rank // 2  # second half runs backward: time-reverse it, one scan for both

        def both(t):
            return torch.cat([t[..., :half], t[..., half:].flip(1)], dim=-1)

        h = fn(both(xf), both(log_a))
        return both(h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, D) -> (B, N, out_dim)
        sc, xf, log_a = self._parts(x)
        return self._out(self._scan(xf, log_a, decay_cumsum), sc)

    def gain(self, x: torch.Tensor) -> torch.Tensor:
        """``1 + s`` (B, N, out_dim), the fast way: the same maths as ``1 + forward(x)``.

        Why not ``forward``: on the patch encoder's 37,632 tokens of rank 4, softplus on strided
        ``chunk`` slices (not vectorized), layer and RMS norms over 4 channels (per-row overhead),
        the flips and cats of the bidirectional scan and a separate ``+ 1`` cost as much as the
        attention they condition. Here everything between the two matmuls runs in one
        ``(N, r, B)`` layout (the rank-4 norms become vectorized reductions over B-long rows,
        each scan step one contiguous block), the decay is ``sigmoid(-dz) = exp(-softplus(dz))``
        and the ``1 +`` rides in the output ``addmm``. Long sequences keep the chunked scan.
        """
        y = self._short_y(x)
        if y is None:
            return 1.0 + self(x)
        y = y.permute(2, 0, 1).reshape(-1, self.rank).to(x.dtype)  # (B N, r)
        return torch.addmm(y.new_ones(()), y, self.proj.to(y.dtype)).view(*x.shape[:-1], -1)

    def modulate(self, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``z * gain(x)`` for the fused projection ``z (B, N, out_dim)`` (see :class:`_Modulate`)."""
        y = self._short_y(x)
        if y is None:
            return z * (1.0 + self(x))
        y = y.permute(2, 0, 1).reshape(-1, self.rank).to(z.dtype)  # (B N, r)
        return _Modulate.apply(z.reshape(-1, z.shape[-1]), y, self.proj.to(z.dtype)).view(z.shape)

    def modulate_t(self, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``z * gain_t(x)`` for the channel-major projection ``z (out_dim, B N)``."""
        y = self._short_y(x)
        if y is None:
            return z * (1.0 + self(x)).flatten(0, -2).t()
        y = y.permute(1, 2, 0).reshape(self.rank, -1).to(z.dtype)  # (r, B N)
        return _Modulate.apply(z, self.proj.t().to(z.dtype), y)

    def gain_t(self, x: torch.Tensor) -> torch.Tensor:
        """:meth:`gain` channel-major: ``(out_dim, B N)`` (tokens in ``(b, n)`` order)."""
        y = self._short_y(x)
        if y is None:
            return (1.0 + self(x)).flatten(0, -2).t()
        y = y.permute(1, 2, 0).reshape(self.rank, -1).to(x.dtype)  # (r, B N)
        return torch.addmm(y.new_ones(()), self.proj.t().to(y.dtype), y)

    def _short_y(self, x: torch.Tensor) -> torch.Tensor | None:
        """``shortcut * LN(h)`` in the ``(N, r, B)`` layout, or None where the chunked scan applies."""
        n = x.shape[1]
        if not 1 < n <= SHORT_SCAN_MAX_LEN or torch.jit.is_scripting():
            return None
        p = self.inp(self.norm(x))  # (B, N, 3r)
        wd = _work_dtype(p.dtype)  # bfloat16 / float16: the norms and the scan in float32
        sc, xf, dz = p.to(wd).permute(1, 2, 0).contiguous().chunk(3, dim=1)  # (N, r, B) each
        sc = F.softplus(sc)
        sc = sc * torch.rsqrt(sc.square().mean(1, keepdim=True) + 1e-6)  # rms_norm over r
        h = _ShortScan.apply(xf, torch.sigmoid(-dz), self.rank if self.causal else self.rank // 2)
        hc = h - h.mean(1, keepdim=True)  # layer norm over r, eps and affine of self.ln
        hn = hc * torch.rsqrt(hc.square().mean(1, keepdim=True) + self.ln.eps)
        return sc * torch.addcmul(self.ln.bias.to(wd)[:, None], hn, self.ln.weight.to(wd)[:, None])

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """The scan as a plain step-by-step loop."""

        def loop(xf, la):
            return decay_scan_reference(xf[..., None], la)[..., 0]

        sc, xf, log_a = self._parts(x)
        return self._out(self._scan(xf, log_a, loop), sc)

    def step(self, x_t: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Causal streaming: ``x_t (B, 1, D)``, ``h (B, r)`` -> ``(s_t (B, 1, out_dim), h)``."""
        sc, xf, log_a = self._parts(x_t)
        h = log_a[:, 0].exp() * h + xf[:, 0]
        return self._out(h[:, None], sc), h
