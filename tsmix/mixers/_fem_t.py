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

    def _t_out(self, y: torch.Tensor, shape: torch.Size) -> torch.Tensor:
        """``y (E, B N)`` -> the out projection ``(B, N, D)`` (mm reads y transposed)."""
        return F.linear(y.t(), self.out.weight, self.out.bias).view(shape)
