"""Channel-major pieces of the FEM read, shared by the priors that run it (``fem-sm``, ``fem-aft``).

Channel-major, every per-channel tensor is ``(channels, B N)`` with tokens in ``(b, n)`` order:
the fused projection is one ``addmm`` whose parts are contiguous row blocks (no strided slices
of 2-8 wide rows), per-head reductions run over rows of B N-long vectors, and C's modulation is
:meth:`tsmix.ops.time_decay.TimeDecayCondition.modulate_t`. The same maths as the token-major
:meth:`tsmix.mixers._fem_core.FreeEnergyMixer.forward` (the plain form stays ``reference``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tsmix.ops.lse_read import bound_values, free_energy_combine


class ChannelMajorRead:
    """Mixin for :class:`~tsmix.mixers._fem_core.FreeEnergyMixer` subclasses (uses its attributes)."""

    def _t_parts(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Fused projection times C's gain, channel-major: ``{name: (width, B N)}`` row blocks."""
        xt, w, bias = x.reshape(-1, x.shape[-1]).t(), self.in_proj.weight, self.in_proj.bias
        z = w @ xt if bias is None else torch.addmm(bias[:, None], w, xt)  # mm reads x transposed
        if self.cond is not None:
            z = self.cond.modulate_t(z, x)  # C: z (1 + s)
        return dict(zip(self.widths, z.split(list(self.widths.values()), dim=0)))

    def _t_gates(self, parts: dict[str, torch.Tensor]) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """``lam = sigmoid``, ``g = softplus`` with unit RMS over each head's dv channels; ``(E, B N)``."""
        lam = torch.sigmoid(parts["lam"]) if "lam" in parts else None
        g = None
        if "gate" in parts:
            g = F.softplus(parts["gate"]).view(self.heads, self.dv, -1)  # (H, dv, B N)
            g = (g * torch.rsqrt(g.square().mean(1, keepdim=True) + 1e-6)).view(self.e, -1)
        return lam, g

    def _t_values(self, parts: dict[str, torch.Tensor]):
        """-> ``(v, exp(beta v), beta)``: bounded values ``(E, B N)`` and ``beta (E, 1)``;
        ``(v, None, None)`` without L."""
        v = parts["v"]
        if self.beta_raw is None:
            return v, None, None
        beta = self.beta().to(v.dtype)[:, None]
        v = bound_values(v, beta, self.options.exp_cap)  # |beta v| <= exp_cap before exp
        return v, torch.exp(beta * v), beta

    def _t_post(self, mu, z, lam, g, beta) -> torch.Tensor:
        """``mu, Z (E, B N)`` -> ``g [(1 - lam) mu + lam log(Z) / beta]`` ``(E, B N)``."""
        f = None
        if z is not None:  # F = log(Z) / beta (Z >= e^-cap in exact arithmetic; tiny guards a rounded 0)
            f = torch.log(z.clamp_min(torch.finfo(z.dtype).tiny)) / beta
        if lam is not None:
            self._last_lambda = lam.detach().mean()
        return free_energy_combine(mu, f, lam, g)

    def _blocks(self, c: torch.Tensor, w: int, b: int, n: int) -> torch.Tensor:
        """``(H w, B N) -> (H B, w, N)``: one head's width-w block per sequence."""
        return c.view(self.heads, w, b, n).transpose(1, 2).reshape(self.heads * b, w, n)

    def _t_columns(self, parts: dict[str, torch.Tensor], b: int, n: int):
        """-> ``(u, lam, g, beta)``: the read's columns ``u (H B, P dv, N)`` (``[v, exp(beta v)]``
        per head), ``lam, g (E, B N)``, ``beta (E, 1)``; None for what the options switch off."""
        h, dv = self.heads, self.dv
        lam, g = self._t_gates(parts)
        v, ex, beta = self._t_values(parts)
        if beta is None:
            return self._blocks(v, dv, b, n), lam, g, None
        vh, eh = v.view(h, dv, b, n).transpose(1, 2), ex.view(h, dv, b, n).transpose(1, 2)
        return torch.stack([vh, eh], dim=2).view(h * b, 2 * dv, n), lam, g, beta  # one write

    def _t_unpack(self, r: torch.Tensor, lam, g, beta, b: int, n: int) -> torch.Tensor:
        """The read of :meth:`_t_columns`' ``u``, ``r (H B, P dv, N)``: unpack ``mu`` and ``Z``,
        combine: ``(E, B N)``."""
        h, dv, e = self.heads, self.dv, self.e
        if beta is None:
            return self._t_post(r.view(h, b, dv, n).transpose(1, 2).reshape(e, b * n), None, lam, g, None)
        mu, z = r.view(h, b, 2, dv, n).permute(2, 0, 3, 1, 4).reshape(2, e, b * n).unbind(0)  # one copy
        return self._t_post(mu, z, lam, g, beta)

    def _t_out(self, y: torch.Tensor, shape: torch.Size) -> torch.Tensor:
        """``y (E, B N)`` -> the out projection ``(B, N, D)`` (mm reads y transposed)."""
        return F.linear(y.t(), self.out.weight, self.out.bias).view(shape)
