"""Verification utilities for the YB-Mixer: the algebra behind it and the properties it buys.

Physics side (complex128 matrices on a few qubits):
- Pauli strings and the Ising-algebra generators ``M_j`` (``Z_1, X_1X_2, Z_2, X_2X_3, …``):
  ``M_j² = 1``, neighbours anticommute, distant ones commute; also the multi-site
  ``(d, 6, 3)`` generators built from Jordan–Wigner Majoranas.
- The Baxterized ``R(λ) = 1 + tan(λ) M`` and the generalized Yang–Baxter residual
  ``R_j(λ) R_{j+1}(λ+μ) R_j(μ) - R_{j+1}(μ) R_j(λ+μ) R_{j+1}(λ)``: zero iff ``M² = 1`` and
  the pair anticommutes (tangent addition law), non-zero when the anticommutation breaks.
- QISM transfer matrices ``τ(λ) = tr_a R_{aN}(λ)…R_{a1}(λ)`` and their commutator.
- The single-particle (Majorana) action of a free-fermion unitary: an orthogonal matrix;
  for a brick-wall of gates ``exp(θ γ_a γ_b / 2)`` it is exactly ``tsmix.ops.brickwall``.

Network side (any ``fn: (B, N, D) -> (B, N, D)``): dense linear maps, Jacobian condition
numbers, orthogonality defects, norm ratios.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import reduce

import torch

CDTYPE = torch.complex128

PAULI: dict[str, torch.Tensor] = {
    "I": torch.eye(2, dtype=CDTYPE),
    "X": torch.tensor([[0, 1], [1, 0]], dtype=CDTYPE),
    "Y": torch.tensor([[0, -1j], [1j, 0]], dtype=CDTYPE),
    "Z": torch.tensor([[1, 0], [0, -1]], dtype=CDTYPE),
}


# ----------------------------------------------------------------------------- Pauli algebra


def pauli_string(word: str) -> torch.Tensor:
    """Kronecker product of single-qubit Paulis, e.g. ``"XZI"`` -> X ⊗ Z ⊗ I: (2^n, 2^n)."""
    if not word or set(word) - set(PAULI):
        raise ValueError(f"a Pauli string is a non-empty word over I, X, Y, Z; got {word!r}")
    return reduce(torch.kron, [PAULI[c] for c in word])


def ising_generators(n_sites: int) -> list[str]:
    """Ising-algebra generators of the transverse-field Ising chain as Pauli strings.

    ``M_{2j-1} = Z_j`` and ``M_{2j} = X_j X_{j+1}``: 2·n_sites - 1 words on n_sites qubits.
    """
    if n_sites < 1:
        raise ValueError(f"n_sites must be >= 1, got {n_sites}")
    words = []
    for j in range(n_sites):
        words.append("I" * j + "Z" + "I" * (n_sites - j - 1))
        if j + 1 < n_sites:
            words.append("I" * j + "XX" + "I" * (n_sites - j - 2))
    return words


def majoranas(n_qubits: int) -> list[torch.Tensor]:
    """Jordan–Wigner Majoranas γ_1…γ_{2n}: ``Z…Z X I…I`` and ``Z…Z Y I…I``."""
    out = []
    for j in range(n_qubits):
        for p in "XY":
            out.append(pauli_string("Z" * j + p + "I" * (n_qubits - j - 1)))
    return out


def gybe_generator(gammas: Sequence[torch.Tensor], start: int, omega: Sequence[float]) -> torch.Tensor:
    """Multi-site generator of the (d, 6, 3) family: ``(Σ_i ω_i γ_{s+i}) γ_{s+3} γ_{s+4} γ_{s+5}``.

    ``start`` is 0-based; with ``‖ω‖ = 1`` it squares to 1, and the copy shifted by three
    Majoranas anticommutes with it (so both satisfy the Ising algebra).
    """
    g = gammas
    a = sum(w * g[start + i] for i, w in enumerate(omega))
    return a @ g[start + 3] @ g[start + 4] @ g[start + 5]


def comm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b - b @ a


def anticomm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b + b @ a


def max_abs(a: torch.Tensor) -> float:
    return a.abs().max().item()


def algebra_defects(ms: Sequence[torch.Tensor]) -> dict[str, float]:
    """How far a chain of generators is from the Ising algebra (all 0 for a true one).

    square: max |M_j² - 1|; anticommute: max |{M_j, M_{j+1}}|; commute: max |[M_j, M_k]|, |j-k| >= 2.
    """
    eye = torch.eye(ms[0].shape[0], dtype=ms[0].dtype)
    square = max(max_abs(m @ m - eye) for m in ms)
    anti = max((max_abs(anticomm(a, b)) for a, b in zip(ms, ms[1:])), default=0.0)
    far = max(
        (max_abs(comm(ms[j], ms[k])) for j in range(len(ms)) for k in range(j + 2, len(ms))), default=0.0
    )
    return {"square": square, "anticommute": anti, "commute": far}


def broken_pair(m1: torch.Tensor, m2: torch.Tensor, c: torch.Tensor, eps: float) -> torch.Tensor:
    """``cos ε M_2 + sin ε C`` with C commuting with M_1 and anticommuting with M_2.

    It still squares to 1, but ``{M_1, ·} = 2 sin ε M_1 C``: only the anticommutation breaks.
    """
    return math.cos(eps) * m2 + math.sin(eps) * c


# ----------------------------------------------------------------------------- Yang–Baxter


def baxterized_r(m: torch.Tensor, lam: float) -> torch.Tensor:
    """Baxterized ``R(λ) = 1 + tan(λ) M``."""
    return torch.eye(m.shape[0], dtype=m.dtype) + math.tan(lam) * m


def ybe_residual(
    m1: torch.Tensor, m2: torch.Tensor, lam: float, mu: float, a: Callable[[float], float] = math.tan
) -> float:
    """Generalized (braided, additive) Yang–Baxter residual, max abs entry:

    ``R_1(λ) R_2(λ+μ) R_1(μ) - R_2(μ) R_1(λ+μ) R_2(λ)`` with ``R_i(t) = 1 + a(t) M_i``, where
    ``M_2`` is ``M_1``'s shifted copy (support moved by m sites) embedded in the same space.
    ``a = tan`` is the Baxterization; any other ``a`` (e.g. ``a(t) = t``) leaves a residual.
    """
    eye = torch.eye(m1.shape[0], dtype=m1.dtype)
    r1, r2 = (lambda t: eye + a(t) * m1), (lambda t: eye + a(t) * m2)
    lhs = r1(lam) @ r2(lam + mu) @ r1(mu)
    rhs = r2(mu) @ r1(lam + mu) @ r2(lam)
    return max_abs(lhs - rhs)


# ----------------------------------------------------------------------------- transfer matrices


def embed(op: torch.Tensor, sites: Sequence[int], n: int, d: int = 2) -> torch.Tensor:
    """Operator on the tensor factors ``sites`` (in that order) of n factors of dim d: (d^n, d^n)."""
    k = len(sites)
    rest = [f for f in range(n) if f not in sites]
    full = torch.kron(op, torch.eye(d ** (n - k), dtype=op.dtype))  # factors ordered sites + rest
    perm = [0] * n
    for pos, f in enumerate([*sites, *rest]):
        perm[f] = pos  # factor f of the target lives at position pos of `full`
    t = full.reshape([d] * (2 * n)).permute(*perm, *[n + p for p in perm])
    return t.reshape(d**n, d**n)


def swap(d: int = 2) -> torch.Tensor:
    """The permutation P on C^d ⊗ C^d."""
    p = torch.zeros(d * d, d * d, dtype=CDTYPE)
    for i in range(d):
        for j in range(d):
            p[i * d + j, j * d + i] = 1
    return p


def integrable_r(lam: float, m: torch.Tensor | None = None) -> torch.Tensor:
    """Non-braided free-fermion R matrix ``R(λ) = (1 + tan(λ) M) P`` with ``M = X ⊗ Y`` by default.

    ``X_1 Y_2`` and ``X_2 Y_3`` anticommute and square to 1, so the braided part solves the
    Yang–Baxter equation and the transfer matrices built from R commute.
    """
    m = pauli_string("XY") if m is None else m
    return baxterized_r(m, lam) @ swap()


def transfer_matrix(
    r_of: Callable[[float], torch.Tensor], lam: float, n_sites: int, d: int = 2
) -> torch.Tensor:
    """``τ(λ) = tr_a R_{a,N}(λ) … R_{a,1}(λ)``; the auxiliary space is factor 0: (d^N, d^N)."""
    n = n_sites + 1
    r = r_of(lam)
    mono = torch.eye(d**n, dtype=r.dtype)
    for site in range(1, n):
        mono = embed(r, [0, site], n, d) @ mono
    t = mono.reshape(d, d**n_sites, d, d**n_sites)
    return torch.einsum("aiaj->ij", t)


def transfer_commutator(
    r_of: Callable[[float], torch.Tensor], lam: float, mu: float, n_sites: int, d: int = 2
) -> float:
    """max |[τ(λ), τ(μ)]|: ~1e-15 for an integrable R, O(1) for a generic one."""
    return max_abs(comm(transfer_matrix(r_of, lam, n_sites, d), transfer_matrix(r_of, mu, n_sites, d)))


# ----------------------------------------------------------------------------- free fermions


def free_fermion_gate(gammas: Sequence[torch.Tensor], a: int, b: int, theta: float) -> torch.Tensor:
    """``exp(-θ γ_a γ_b / 2) = cos(θ/2) - sin(θ/2) γ_a γ_b`` (since (γ_a γ_b)² = -1).

    Conjugation by it rotates the Majorana pair like the brick-wall gate:
    ``γ_a -> cos θ γ_a + sin θ γ_b``, ``γ_b -> -sin θ γ_a + cos θ γ_b``.
    """
    eye = torch.eye(gammas[0].shape[0], dtype=gammas[0].dtype)
    return math.cos(theta / 2) * eye - math.sin(theta / 2) * gammas[a] @ gammas[b]


def single_particle_map(u: torch.Tensor, gammas: Sequence[torch.Tensor]) -> torch.Tensor:
    """``O_ab = tr(γ_a U γ_b U†) / 2^n``, i.e. ``U γ_b U† = Σ_a O_ab γ_a``: real (2n, 2n).

    For a free-fermion (Gaussian) unitary O is orthogonal: the many-body gate acts on the
    Majorana "tokens" as a norm-preserving linear map, which is what the mixer implements.
    """
    dim = u.shape[0]
    ud = u.conj().T
    o = torch.stack([torch.stack([torch.trace(ga @ u @ gb @ ud) for gb in gammas]) for ga in gammas])
    return (o / dim).real


# ----------------------------------------------------------------------------- network-side checks


def dense_map(
    fn: Callable[[torch.Tensor], torch.Tensor], n: int, d: int, dtype=torch.float64
) -> torch.Tensor:
    """Matrix of a linear ``fn`` on (1, n, d) inputs, columns = images of basis vectors: (n·d, n·d)."""
    basis = torch.eye(n * d, dtype=dtype).reshape(n * d, n, d)
    return fn(basis).reshape(n * d, n * d).T


def jacobian(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """Jacobian of ``fn`` at x (1, N, D), flattened: (N·D, N·D)."""
    j = torch.autograd.functional.jacobian(fn, x)
    return j.reshape(x.numel(), x.numel())


def condition_number(m: torch.Tensor) -> float:
    """σ_max / σ_min (inf for a singular matrix)."""
    s = torch.linalg.svdvals(m)
    return (s.max() / s.min()).item()


def jacobian_condition(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> float:
    """Condition number of the Jacobian of ``fn`` at x: exactly 1 for an orthogonal map."""
    return condition_number(jacobian(fn, x))


def orthogonality_defect(u: torch.Tensor) -> float:
    """max |Uᵀ U - 1| over a (…, n, n) batch of matrices."""
    eye = torch.eye(u.shape[-1], dtype=u.dtype, device=u.device)
    return (u.transpose(-1, -2) @ u - eye).abs().max().item()


def norm_ratio(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """‖fn(x)‖ / ‖x‖ per sample, over tokens and channels: (B,)."""
    return fn(x).flatten(1).norm(dim=1) / x.flatten(1).norm(dim=1)
