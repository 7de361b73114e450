"""Circulant orthogonal maps ``U = exp(sK)`` along the token axis, applied in O(N log N).

``K`` is a real skew-symmetric circulant per channel. Such a ``K`` is diagonalized by the
DFT with purely imaginary eigenvalues ``i ω(f)`` that are odd in the frequency ``f``; so
``exp(sK)`` multiplies the Fourier coefficient at ``f`` by the unit-modulus phase
``exp(i s ω(f))``. Realness forces ``ω(0) = 0`` and, for an even length, ``ω(1/2) = 0``:
the DC and Nyquist bins are real and must stay real. (Scaling the Nyquist bin by
``cos φ`` — what ``irfft`` silently does with a complex Nyquist bin — loses orthogonality.)

We write ``ω(f) = Σ_k w_k sin(2π k f)`` (k = 1..n_basis): a complete basis of smooth odd
profiles with ``ω(0) = ω(1/2) = 0``, defined in *normalized* frequency, so the same
weights give the generator at any length. In position space the k-th harmonic is the
skew-symmetric circulant ``(P^k - P^{-k}) / 2`` with ``(P^k x)_n = x_{(n+k) mod N}``;
the dense reference builds exactly that and exponentiates it with ``matrix_exp``.
"""

from __future__ import annotations

import math

import torch

_FFT_DTYPES = (torch.float32, torch.float64)


def sine_basis(
    n: int, n_basis: int, *, dtype: torch.dtype, device: torch.device | None = None
) -> torch.Tensor:
    """``sin(2π k m / n)`` on the rfft grid m = 0..n//2, k = 1..n_basis: (n//2+1, n_basis).

    The argument is reduced with integer arithmetic and the DC and Nyquist entries are set to
    exactly 0, so the phase there is exactly 0 (not ~1e-16) whatever the weights.
    """
    m = torch.arange(n // 2 + 1, device=device)
    k = torch.arange(1, n_basis + 1, device=device)
    r = (m[:, None] * k[None, :]) % n  # (M, nb) integer residues of k*m mod n
    basis = torch.sin((2 * math.pi / n) * r.to(torch.float64)).to(dtype)
    real_bin = (2 * r) % n == 0  # r = 0 (DC, aliased DC) or r = n/2 (Nyquist): sin is exactly 0
    return basis.masked_fill(real_bin, 0.0)


def phase_profile(weights: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """ω(f) = Σ_k w_k sin(2π k f) at normalized frequencies ``f`` (F,) for weights (D, nb): (F, D)."""
    k = torch.arange(1, weights.shape[-1] + 1, device=f.device, dtype=f.dtype)
    return torch.sin(2 * math.pi * f[:, None] * k[None, :]) @ weights.to(f.dtype).T


def circulant_phase(weights: torch.Tensor, n: int, s: float | torch.Tensor = 1.0) -> torch.Tensor:
    """Phases ``s ω(m / n)`` of ``exp(sK)`` on the rfft grid for weights (D, nb): (n//2+1, D)."""
    basis = sine_basis(n, weights.shape[-1], dtype=weights.dtype, device=weights.device)
    return s * (basis @ weights.T)


def apply_phase(x: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
    """Fast path: rfft along tokens -> multiply by exp(i phase) -> irfft. (B, N, D) -> (B, N, D).

    ``phase`` is (N//2+1, D) with exactly zero DC (and Nyquist, even N) entries, which makes the
    map exactly orthogonal. Half precision runs the FFT in float32 (no bf16 FFT on CPU).
    """
    n = x.shape[1]
    xf = x if x.dtype in _FFT_DTYPES else x.float()
    phase = phase.to(xf.dtype)
    rot = torch.complex(torch.cos(phase), torch.sin(phase))  # (M, D), |rot| = 1
    y = torch.fft.irfft(torch.fft.rfft(xf, dim=1) * rot, n=n, dim=1)
    return y.to(x.dtype)


def circulant_flow(x: torch.Tensor, weights: torch.Tensor, s: float | torch.Tensor = 1.0) -> torch.Tensor:
    """``U(s) x = exp(sK) x`` per channel through the FFT. x (B, N, D), weights (D, nb)."""
    w = weights if weights.dtype in _FFT_DTYPES else weights.float()
    return apply_phase(x, circulant_phase(w, x.shape[1], s))


def circulant_generator(weights: torch.Tensor, n: int) -> torch.Tensor:
    """Dense skew-symmetric circulant ``K_c = Σ_k w_ck (P^k - P^{-k}) / 2`` per channel: (D, n, n)."""
    idx = torch.arange(n, device=weights.device)
    k = torch.arange(1, weights.shape[-1] + 1, device=weights.device)
    diff = (idx[None, :] - idx[:, None]) % n  # (n, n): column - row, mod n
    fwd = (diff[None] == (k % n)[:, None, None]).to(weights.dtype)  # (nb, n, n): P^k
    bwd = (diff[None] == ((-k) % n)[:, None, None]).to(weights.dtype)  # P^{-k}
    return torch.einsum("ck,kij->cij", weights, (fwd - bwd) / 2)


def circulant_matrix(weights: torch.Tensor, n: int, s: float | torch.Tensor = 1.0) -> torch.Tensor:
    """Dense ``U(s) = matrix_exp(s K)`` per channel: (D, n, n). The plain reference."""
    return torch.linalg.matrix_exp(s * circulant_generator(weights, n))


def circulant_flow_reference(
    x: torch.Tensor, weights: torch.Tensor, s: float | torch.Tensor = 1.0
) -> torch.Tensor:
    """Reference for :func:`circulant_flow`: dense ``matrix_exp`` of the generator, then a matmul."""
    u = circulant_matrix(weights.to(x.dtype), x.shape[1], s)  # (D, N, N)
    return torch.einsum("cij,bjc->bic", u, x)
