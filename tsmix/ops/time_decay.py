"""FEM's module C: low-rank time-decay conditioning, computed with the log-space scan.

    h_t = a_t * h_{t-1} + W_x LN(x_t)          a_t = exp(-softplus(W_a LN(x_t)))   (rank channels)
    s_t = (shortcut_t * LN(h_t)) W_out         shortcut = RMS-normalized softplus(W_s LN(x_t))

``s`` modulates the mixer's inputs as ``z (1 + s)``. The FEM release evaluates the scan as
``e^{c_t} cumsum(x / e^{c_t})`` (``c = cumsum(log a)``), which underflows after a few dozen
steps; here it is :func:`decay_cumsum` (exact segment sums, chunked). Bidirectional: half of
the channels scan forward, half backward. ``W_out`` starts at zero: C starts as ``z (1 + 0)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tsmix.ops.decay_scan import decay_cumsum, decay_scan_reference


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
