"""The algebra behind the YB-Mixer, checked in float64/complex128 on a few qubits.

Ising-algebra generators as Pauli strings, the generalized Yang–Baxter equation for the
Baxterized R(λ) = 1 + tan(λ) M (and its failure once anticommutation breaks), commuting
transfer matrices, and the bridge to the mixer: free-fermion gates act on Majoranas as
the brick-wall's orthogonal 2×2 rotations.
"""

from __future__ import annotations

import math

import pytest
import torch

from tsmix.diagnostics.yang_baxter import (
    CDTYPE,
    algebra_defects,
    baxterized_r,
    broken_pair,
    condition_number,
    dense_map,
    free_fermion_gate,
    gybe_generator,
    integrable_r,
    ising_generators,
    jacobian,
    majoranas,
    orthogonality_defect,
    pauli_string,
    single_particle_map,
    transfer_commutator,
    transfer_matrix,
    ybe_residual,
)
from tsmix.ops.brickwall import bond_order, brickwall_matrix


def rapidities(count: int, seed: int = 0) -> list[tuple[float, float]]:
    g = torch.Generator().manual_seed(seed)
    lm = (2 * torch.rand(count, 2, generator=g, dtype=torch.float64) - 1).tolist()
    return [(a, b) for a, b in lm]


def test_pauli_strings_and_ising_generators():
    assert torch.equal(pauli_string("XY"), torch.kron(pauli_string("X"), pauli_string("Y")))
    assert ising_generators(3) == ["ZII", "XXI", "IZI", "IXX", "IIZ"]
    ms = [pauli_string(w) for w in ising_generators(4)]
    assert algebra_defects(ms) == {"square": 0.0, "anticommute": 0.0, "commute": 0.0}
    with pytest.raises(ValueError, match="Pauli string"):
        pauli_string("XQ")


def test_ybe_residual_vanishes_for_ising_generators():
    ms = [pauli_string(w) for w in ising_generators(4)]  # 16 x 16
    worst = max(
        ybe_residual(ms[j], ms[j + 1], lam, mu) for j in range(len(ms) - 1) for lam, mu in rapidities(10)
    )
    assert worst <= 1e-12


def test_ybe_residual_vanishes_for_multisite_majorana_generators():
    gammas = majoranas(6)  # 64 x 64; (d, 6, 3): supports of 6 Majoranas shifted by 3
    omega = torch.tensor([0.3, -0.5, 0.8], dtype=torch.float64)
    omega = (omega / omega.norm()).tolist()
    ms = [gybe_generator(gammas, s, omega) for s in (0, 3, 6)]
    assert max(algebra_defects(ms).values()) <= 1e-12
    assert max(ybe_residual(ms[0], ms[1], lam, mu) for lam, mu in rapidities(10, seed=1)) <= 1e-12


def test_ybe_residual_is_nonzero_when_anticommutation_breaks():
    z1, xx12, z2 = pauli_string("ZII"), pauli_string("XXI"), pauli_string("IZI")
    # Z_2 commutes with Z_1 and anticommutes with X_1X_2: the rotated generator keeps M^2 = 1
    res = []
    for eps in (0.0, 0.01, 0.1, 0.5):
        m2 = broken_pair(z1, xx12, z2, eps)
        defects = algebra_defects([z1, m2])
        assert defects["square"] <= 1e-12  # still an involution ...
        assert abs(defects["anticommute"] - 2 * math.sin(eps)) <= 1e-12  # ... only this breaks
        res.append(max(ybe_residual(z1, m2, lam, mu) for lam, mu in rapidities(10, seed=2)))
    assert res[0] <= 1e-12
    assert res[1] > 1e-3 and res[1] < res[2] < res[3]
    # a commuting pair (Z_1, Z_2) is far from a solution
    assert max(ybe_residual(z1, z2, lam, mu) for lam, mu in rapidities(10, seed=3)) > 0.1


def test_only_the_tangent_baxterizes():
    # The YBE forces a(λ+μ) = (a(λ) + a(μ)) / (1 - a(λ) a(μ)): a = tan; a linear a(λ) = λ fails.
    z1, xx12 = pauli_string("ZI"), pauli_string("XX")
    pairs = rapidities(10, seed=6)
    assert max(ybe_residual(z1, xx12, lam, mu) for lam, mu in pairs) <= 1e-12
    assert max(ybe_residual(z1, xx12, lam, mu, a=lambda t: t) for lam, mu in pairs) > 1e-3
    assert max(ybe_residual(z1, xx12, lam, mu, a=math.tanh) for lam, mu in pairs) > 1e-3
    r = baxterized_r(xx12, 0.4)  # M² = 1: R(λ) R(-λ) = 1 - tan²λ, the unitarity-type relation
    torch.testing.assert_close(
        r @ baxterized_r(xx12, -0.4) / (1 - math.tan(0.4) ** 2), torch.eye(4, dtype=CDTYPE)
    )


@pytest.mark.parametrize("n_sites", [3, 4])
def test_transfer_matrices_commute(n_sites):
    worst = max(transfer_commutator(integrable_r, lam, mu, n_sites) for lam, mu in rapidities(6, seed=4))
    assert worst <= 1e-12


def test_transfer_matrices_do_not_commute_off_the_algebra():
    g = torch.Generator().manual_seed(5)
    h = torch.randn(4, 4, generator=g, dtype=torch.float64).to(CDTYPE)
    h = (h + h.conj().T) / 2
    m = pauli_string("XY")
    comms = []
    for eps in (0.0, 0.05, 0.2):
        me = m + eps * h
        me = me / torch.linalg.matrix_norm(me) * 2  # same Frobenius norm as X⊗Y
        comms.append(transfer_commutator(lambda t, me=me: integrable_r(t, me), 0.3, -0.5, 4))
    assert comms[0] <= 1e-12 and 1e-3 < comms[1] < comms[2]
    r = torch.randn(4, 4, generator=g, dtype=torch.float64).to(CDTYPE)
    random_r = lambda t: torch.eye(4, dtype=CDTYPE) + math.tan(t) * r  # noqa: E731
    assert transfer_commutator(random_r, 0.3, -0.5, 4) > 1e-2


def test_transfer_matrix_at_zero_is_a_shift():
    # R(0) = P, so τ(0) = tr_a P_{aN}…P_{a1}: a cyclic permutation of the sites (unitary)
    tau = transfer_matrix(integrable_r, 0.0, 3)
    assert (tau @ tau.conj().T - torch.eye(8, dtype=CDTYPE)).abs().max() <= 1e-12
    assert torch.equal(tau.abs().sum(0), torch.ones(8, dtype=torch.float64))


def test_free_fermion_brickwall_is_the_mixer_gate():
    gammas = majoranas(3)  # 6 Majorana "tokens", one channel
    theta = torch.tensor([[0.7], [-0.4], [1.3]], dtype=torch.float64)
    u = torch.eye(8, dtype=CDTYPE)
    for layer in theta:
        for i in bond_order(6):
            u = free_fermion_gate(gammas, i, i + 1, layer.item()) @ u
    o = single_particle_map(u, gammas)
    assert orthogonality_defect(o) <= 1e-12
    torch.testing.assert_close(o, brickwall_matrix(theta, 6)[0], rtol=0, atol=1e-12)


def test_network_side_helpers():
    q, _ = torch.linalg.qr(torch.randn(6, 6, dtype=torch.float64))
    assert abs(condition_number(q) - 1) < 1e-12
    assert abs(condition_number(torch.diag(torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64))) - 4) < 1e-12
    a = torch.randn(6, 6, dtype=torch.float64)
    fn = lambda x: (x.reshape(-1, 6) @ a.T).reshape(-1, 3, 2)  # noqa: E731
    torch.testing.assert_close(dense_map(fn, 3, 2), a)
    torch.testing.assert_close(jacobian(fn, torch.randn(1, 3, 2, dtype=torch.float64)), a)
