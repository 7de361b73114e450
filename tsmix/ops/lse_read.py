"""The free-energy (log-sum-exp) read of FEM, computed in the same pass as the mean read.

For a selection prior ``p_t`` over positions and per-channel inverse temperature ``beta``:

    mu_t = sum_i p_t(i) v_i                  F_t = (1/beta) log sum_i p_t(i) exp(beta v_i)

One prior read of the packed values ``[v, exp(beta v)]`` yields ``mu`` and ``Z = sum p exp(beta v)``;
``F = log(Z) / beta``. No running or whole-sequence max is subtracted (a max over the sequence
would let the future move the past): instead the exponent ``beta v`` is bounded before ``exp`` by
:func:`bound_values`, the identity for ``|beta v| <= cap`` and clamped beyond. With
``sum p = 1`` every ``Z`` lies in ``[e^-cap, e^cap]``, finite in float32 and bfloat16 for
``cap <= 80``; the same bounded values feed ``mu``, so ``F >= mu`` holds exactly (Jensen) and
``lambda = 0, g = 1`` gives the prior's plain read of ``v``.
"""

from __future__ import annotations

import torch


def bound_values(v: torch.Tensor, beta: torch.Tensor, cap: float) -> torch.Tensor:
    """Values with ``|beta v| <= cap``: ``v`` itself (bit for bit) inside, clamped outside.

    One op (cheap, nothing extra stored); outside the bound the gradient to ``v`` is 0 and
    ``beta`` still gets ``d(cap/beta)/d beta``.
    """
    c = cap / beta
    return v.clamp(-c, c)


def lse_pack(v: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """``(..., d) -> (..., 2d)``: ``[v, exp(beta v)]``, the values one prior read mixes."""
    return torch.cat([v, torch.exp(beta * v)], dim=-1)


def lse_unpack(read: torch.Tensor, beta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The prior's read of :func:`lse_pack` values -> ``(mu, F)``, each ``(..., d)``."""
    mu, z = read.chunk(2, dim=-1)
    tiny = torch.finfo(z.dtype).tiny  # Z >= e^-cap in exact arithmetic; guards a rounded 0
    return mu, torch.log(z.clamp_min(tiny)) / beta


def free_energy_reference(
    logp: torch.Tensor, v: torch.Tensor, beta: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain oracle from an explicit log-prior: ``logp (..., T, S)``, ``v (..., S, d)``.

    ``F = logsumexp_s(log p + beta v) / beta`` is computed in log space (a different route
    from the fast path's ``log(p @ exp(beta v))``); ``beta`` broadcasts against ``(..., T, d)``.
    """
    mu = logp.exp() @ v
    beta = beta.reshape((1,) * max(0, 2 - beta.dim()) + tuple(beta.shape))  # at least (T|1, d)
    f = torch.logsumexp(logp[..., :, :, None] + beta.unsqueeze(-2) * v[..., None, :, :], dim=-2)
    return mu, f / beta


def free_energy_combine(
    mu: torch.Tensor, f: torch.Tensor | None, lam: torch.Tensor | None, g: torch.Tensor | None
) -> torch.Tensor:
    """``o = g * [(1 - lam) mu + lam F]``; ``f None`` = no LSE branch (o = g mu), ``lam None`` with
    ``f`` given = read F alone, ``g None`` = no outer gate.

    The blend is one ``lerp`` (``mu + lam (F - mu)``): exact at ``lam = 0`` and ``lam = 1``, and
    one fused op instead of three.
    """
    o = mu
    if f is not None:
        if lam is not None and not mu.dtype == f.dtype == lam.dtype:  # mixed under autocast
            dt = torch.promote_types(torch.promote_types(mu.dtype, f.dtype), lam.dtype)
            mu, f, lam = mu.to(dt), f.to(dt), lam.to(dt)
        o = f if lam is None else torch.lerp(mu, f, lam)
    return o if g is None else o * g
