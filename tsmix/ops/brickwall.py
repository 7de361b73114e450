"""Brick-wall circuits of per-channel 2×2 rotations between neighbouring tokens.

One layer rotates the pairs on the bonds (1,2),(3,4),… then on (2,3),(4,5),… (1-based),
each channel c by its own angle θ_c: ``(a, b) -> (a cos θ - b sin θ, a sin θ + b cos θ)``.
A token without a partner on a sweep (the last one for odd N on the first sweep, the
first and maybe the last on the second) passes unchanged, so any length works. Every
gate is a Givens rotation, hence the whole circuit is exactly orthogonal. It is the
single-particle action of the free-fermion gate ``exp(θ γ_a γ_b / 2)`` on Majoranas
(``tsmix.diagnostics.yang_baxter.single_particle_map`` checks this).
"""

from __future__ import annotations

import torch


def sweep_pattern(
    n: int, start: int, device: torch.device | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Partner index and sign of every token on one sweep: (N,) int, (N,) float in {-1, 0, +1}.

    Bonds (start, start+1), (start+2, start+3), …: the lower member gets sign -1, the upper +1,
    a token without a partner is its own partner with sign 0.
    """
    i = torch.arange(n, device=device)
    p = (n - start) // 2  # complete pairs on this sweep
    paired = (i >= start) & (i < start + 2 * p)
    lower = paired & ((i - start) % 2 == 0)
    partner = torch.where(paired, torch.where(lower, i + 1, i - 1), i)
    sign = torch.where(lower, -1.0, torch.where(paired, 1.0, 0.0))
    return partner, sign


def rotate_bonds(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, start: int) -> torch.Tensor:
    """Rotate the token pairs (start, start+1), (start+2, start+3), …: (B, N, D) -> (B, N, D).

    One gather and two products: ``y_i = c_i x_i + s_i x_partner(i)`` with ``c = cos θ`` on
    paired tokens (1 on unpaired) and ``s = ∓ sin θ`` (0 on unpaired).
    """
    partner, sign = sweep_pattern(x.shape[1], start, x.device)
    sign = sign.to(x.dtype)[:, None]  # (N, 1)
    c = torch.where(sign != 0, cos, torch.ones_like(cos))  # (N, D)
    return x * c + x[:, partner] * (sign * sin)


def brickwall(x: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """Fast path: ``theta`` (L, D) gives L brick-wall layers, each even sweep then odd sweep."""
    th = theta.to(x.dtype)
    for layer in th:  # (D,)
        c, s = torch.cos(layer), torch.sin(layer)
        x = rotate_bonds(x, c, s, 0)
        x = rotate_bonds(x, c, s, 1)
    return x


def bond_order(n: int) -> list[int]:
    """Left sites of the bonds of one layer in application order (0-based): 0, 2, 4, …, 1, 3, …"""
    return [*range(0, n - 1, 2), *range(1, n - 1, 2)]


def brickwall_matrix(theta: torch.Tensor, n: int) -> torch.Tensor:
    """Dense per-channel map of the circuit as a product of Givens matrices: (D, n, n).

    The plain reference: one explicit n×n rotation per bond, multiplied in circuit order.
    """
    d = theta.shape[-1]
    eye = torch.eye(n, dtype=theta.dtype, device=theta.device)
    u = eye.expand(d, n, n)
    for layer in theta:
        c, s = torch.cos(layer)[:, None, None], torch.sin(layer)[:, None, None]  # (D, 1, 1)
        for i in bond_order(n):
            diag = torch.zeros_like(eye)
            diag[i, i] = diag[i + 1, i + 1] = 1.0
            skew = torch.zeros_like(eye)
            skew[i + 1, i], skew[i, i + 1] = 1.0, -1.0
            g = eye + (c - 1) * diag + s * skew  # (D, n, n) Givens rotation on bond (i, i+1)
            u = g @ u
    return u


def brickwall_reference(x: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """Reference for :func:`brickwall`: the dense Givens product applied by a matmul."""
    u = brickwall_matrix(theta.to(x.dtype), x.shape[1])  # (D, N, N)
    return torch.einsum("cij,bjc->bic", u, x)
