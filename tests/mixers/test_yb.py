"""YB-Mixer properties: exact orthogonality, depth stability, anytime flow, transport.

The contract suite covers shapes, dtypes, reference == fast path with default options;
here: the orthogonal core on its own (norms, dense maps, Jacobians at depth 1/8/64), the
Nyquist bin, the one-parameter flow (order-free increments), length generalization and
the transport task against a softmax baseline. Small N and D keep it fast.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import nn

import tsmix
from tsmix.diagnostics.yang_baxter import (
    condition_number,
    dense_map,
    jacobian_condition,
    norm_ratio,
    orthogonality_defect,
)
from tsmix.mixers.yb import YBSpectral, YBSpectralOptions, budget
from tsmix.models.synthetic.transport import TransportConfig, accuracy, train
from tsmix.ops.brickwall import brickwall_matrix
from tsmix.ops.spectral import apply_phase, circulant_phase, sine_basis

YB = ("yb-brickwall", "yb-spectral")
TOL = {torch.float32: 1e-6, torch.float64: 1e-12}


def make(name: str, dim: int = 6, dtype=torch.float64, seed: int = 0, **options) -> nn.Module:
    torch.manual_seed(seed)
    return tsmix.build_mixer(name, dim, heads=2, **options).to(dtype)


def spectral_big_phases(dim: int = 6, seed: int = 0) -> nn.Module:
    """Large phases everywhere, so a wrong Nyquist/DC treatment cannot hide."""
    return make("yb-spectral", dim, seed=seed, init_scale=5.0, n_basis=12)


# ----------------------------------------------------------------------------- orthogonality


@pytest.mark.parametrize("name", YB)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_core_preserves_norm(name, dtype):
    m = make(name, dim=8, dtype=dtype, depth=3) if name == "yb-brickwall" else make(name, 8, dtype)
    torch.manual_seed(1)
    for n in (1, 2, 7, 16, 33):
        x = torch.randn(4, n, 8, dtype=dtype)
        r = norm_ratio(m.core, x)
        assert (r - 1).abs().max().item() <= TOL[dtype], (n, r)
        # per channel too: the map acts on each channel separately
        y = m.core(x)
        torch.testing.assert_close(y.norm(dim=1), x.norm(dim=1), rtol=TOL[dtype] * 10, atol=0)


@pytest.mark.parametrize("n", [1, 2, 5, 8, 16, 17])
def test_spectral_fast_path_is_exactly_orthogonal_even_and_odd(n):
    m = spectral_big_phases()
    fast = dense_map(m.core, n, 6)  # the FFT path as a matrix
    assert orthogonality_defect(fast) < 1e-12
    # and it is exp(K) for the real skew-symmetric circulant generator
    k = m.generator(n)
    torch.testing.assert_close(k, -k.transpose(-1, -2), rtol=0, atol=0)
    u = m.matrix(n)  # (D, n, n)
    blocks = fast.reshape(n, 6, n, 6).permute(1, 3, 0, 2).diagonal(dim1=0, dim2=1).permute(2, 0, 1)
    torch.testing.assert_close(blocks, u, rtol=1e-11, atol=1e-11)


def test_nyquist_bin_stays_real_and_the_cos_phi_shortcut_would_not_be_orthogonal():
    n = 16
    basis = sine_basis(n, 12, dtype=torch.float64)
    assert torch.all(basis[0] == 0) and torch.all(basis[n // 2] == 0)  # DC, Nyquist: exactly 0
    m = spectral_big_phases()
    phase = circulant_phase(m.weight, n)
    assert torch.all(phase[n // 2] == 0)
    # The official code's defect: a non-zero Nyquist phase, which irfft turns into a cos(φ) scale.
    bad = phase.clone()
    bad[n // 2] = 1.0
    cond = condition_number(dense_map(lambda x: apply_phase(x, bad), n, 6))
    assert abs(cond - 1 / math.cos(1.0)) < 1e-9  # the Nyquist mode is scaled by cos(1) = 0.54


@pytest.mark.parametrize("name", YB)
def test_core_is_orthogonal_with_projections_and_nonlinearity_outside(name):
    m = make(name, dim=5, proj=True, act="gelu")
    x = torch.randn(3, 9, 5, dtype=torch.float64)
    assert (norm_ratio(m.core, x) - 1).abs().max() < 1e-12
    assert not torch.allclose(m(x), m.core(x))  # the full mixer is more than the core
    # reference == forward with the optional layers on (the contract uses the defaults)
    xr = x.clone().requires_grad_(True)
    w = torch.randn_like(x)
    g_fast = torch.autograd.grad((m(xr) * w).sum(), [xr, *m.parameters()])
    g_ref = torch.autograd.grad((m.reference(xr) * w).sum(), [xr, *m.parameters()])
    torch.testing.assert_close(m(x), m.reference(x), rtol=1e-10, atol=1e-10)
    for a, b in zip(g_fast, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


# ----------------------------------------------------------------------------- depth stability


def deep_core(name: str, depth: int, dim: int) -> nn.Module:
    """``depth`` orthogonal layers: one brick-wall mixer with ``depth`` layers, or a stack of
    ``depth`` independently initialized spectral cores."""
    if name == "yb-brickwall":
        m = make(name, dim, depth=depth)
        return m.core
    mixers = [make(name, dim, seed=s, init_scale=2.0) for s in range(depth)]

    def run(x: torch.Tensor) -> torch.Tensor:
        for mixer in mixers:
            x = mixer.core(x)
        return x

    return run


@pytest.mark.parametrize("name", YB)
@pytest.mark.parametrize("depth", [1, 8, 64])
def test_jacobian_condition_number_is_one_at_every_depth(name, depth):
    fn = deep_core(name, depth, dim=3)
    x = torch.randn(1, 7, 3, dtype=torch.float64)
    assert abs(jacobian_condition(fn, x) - 1) < 1e-6


def test_jacobian_condition_control_generic_mixing_degrades_with_depth():
    # The check can fail: a generic (non-orthogonal) token mixing drifts far from 1 with depth.
    torch.manual_seed(0)
    w = torch.eye(7, dtype=torch.float64) + 0.3 * torch.randn(7, 7, dtype=torch.float64)
    conds = [condition_number(torch.linalg.matrix_power(w, d)) for d in (1, 8)]
    assert conds[0] > 1.5 and conds[1] > 10 * conds[0]


@pytest.mark.parametrize("name", YB)
def test_gradients_neither_vanish_nor_explode_through_64_layers(name):
    fn = deep_core(name, 64, dim=4)
    x = torch.randn(2, 12, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, 12, 4, dtype=torch.float64)
    (g,) = torch.autograd.grad((fn(x) * w).sum(), [x])
    # orthogonal chain: the input gradient is Uᵀ w, with exactly the norm of w
    assert abs(g.norm().item() / w.norm().item() - 1) < 1e-12
    if name == "yb-brickwall":  # per-layer parameter gradients stay of one order of magnitude
        m = make(name, 4, depth=64)
        (m.core(x) * w).sum().backward()
        per_layer = m.theta.grad.norm(dim=1)  # (64,)
        assert torch.isfinite(per_layer).all()
        assert per_layer.min() > 1e-2 * per_layer.max(), per_layer


def test_gradients_through_64_residual_blocks_are_bounded():
    torch.manual_seed(0)
    blocks = nn.Sequential(
        *[tsmix.Block(8, tsmix.build_mixer("yb-spectral", 8), ffn="none") for _ in range(64)]
    )
    x = torch.randn(2, 16, 8, requires_grad=True)
    blocks(x).square().mean().backward()
    first, last = blocks[0].mixer.weight.grad.norm(), blocks[-1].mixer.weight.grad.norm()
    assert torch.isfinite(x.grad).all() and 1e-3 < x.grad.norm() < 1e3
    assert 1e-2 < (first / last).item() < 1e2


# ----------------------------------------------------------------------------- anytime flow


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [12, 13])
def test_flow_increments_in_any_order_and_grouping_equal_u1(dtype, n):
    m = spectral_big_phases().to(dtype)
    x = torch.randn(3, n, 6, dtype=dtype)
    u1 = m.flow(x, 1.0)
    torch.testing.assert_close(m.flow(m.flow(x, 0.4), 0.6), u1, rtol=0, atol=TOL[dtype] * 10)
    parts = [0.1, 0.2, 0.3, 0.4]
    for order in itertools.permutations(parts):
        y = x
        for s in order:
            y = m.flow(y, s)
        torch.testing.assert_close(y, u1, rtol=0, atol=TOL[dtype] * 10)
    for grouping in ([0.3, 0.7], [0.1 + 0.2, 0.3 + 0.4], [1.0]):
        y = x
        for s in grouping:
            y = m.flow(y, s)
        torch.testing.assert_close(y, u1, rtol=0, atol=TOL[dtype] * 10)
    torch.testing.assert_close(m.flow(x, 0.0), x, rtol=0, atol=TOL[dtype])
    torch.testing.assert_close(m.flow(m.flow(x, 0.7), -0.7), x, rtol=0, atol=TOL[dtype] * 10)


def test_flow_matches_dense_exponential_at_any_budget():
    m = spectral_big_phases()
    x = torch.randn(2, 10, 6, dtype=torch.float64)
    for s in (0.0, 0.3, 1.0, 2.5):
        y = torch.einsum("cij,bjc->bic", m.matrix(10, s), x)
        torch.testing.assert_close(m.flow(x, s), y, rtol=1e-11, atol=1e-11)


def test_order_matters_for_non_integrable_increments():
    # Control: two different brick-wall layers are orthogonal but do not commute.
    a = brickwall_matrix(torch.tensor([[0.3]], dtype=torch.float64), 6)[0]
    b = brickwall_matrix(torch.tensor([[1.1]], dtype=torch.float64), 6)[0]
    assert (a @ b - b @ a).abs().max() > 1e-2


def test_budget_runs_a_whole_model_at_s_and_restores():
    torch.manual_seed(0)
    model = nn.Sequential(
        *[tsmix.Block(6, tsmix.build_mixer("yb-spectral", 6), ffn="none") for _ in range(2)]
    )
    model = model.double()
    x = torch.randn(2, 9, 6, dtype=torch.float64)
    with budget(model, 0.0):
        zero = model(x)
    # at s = 0 the core is the identity, so each block adds its normalized input
    h = x
    for block in model:
        h = h + block.norm1(h)
    torch.testing.assert_close(zero, h, rtol=1e-12, atol=1e-12)
    full = model(x)
    with budget(model, 0.5), budget(model, 1.0):  # nesting restores the outer value
        torch.testing.assert_close(model(x), full)
    assert all(b.mixer.budget == 1.0 for b in model)
    with pytest.raises(tsmix.TsmixError, match="no flow mixer"):
        with budget(nn.Linear(2, 2), 0.5):
            pass


# ----------------------------------------------------------------------------- API edges


@pytest.mark.parametrize("name", YB)
def test_causal_is_refused_clearly(name):
    with pytest.raises(tsmix.TsmixError, match="supports only bidirectional use .*position-aware"):
        tsmix.build_mixer(name, 8, causal=True)
    spec = tsmix.mixer_spec(name)
    with pytest.raises(tsmix.TsmixError, match="cannot be causal"):
        spec.cls(8, 2, True, spec.options())


@pytest.mark.parametrize(
    "name,bad",
    [
        ("yb-brickwall", {"depth": 0}),
        ("yb-brickwall", {"act": "relu6"}),
        ("yb-spectral", {"n_basis": 0}),
        ("yb-spectral", {"proj": "yes"}),
        ("yb-spectral", {"init_scale": -1.0}),
    ],
)
def test_bad_options_are_user_errors(name, bad):
    # range errors come from the dataclass ("bad options"), type errors from the registry's check
    with pytest.raises(tsmix.TsmixError, match=r"bad options|option 'proj' of mixer .* must be bool"):
        tsmix.build_mixer(name, 8, **bad)


def test_phase_is_one_function_of_normalized_frequency():
    m = YBSpectral(4, 1, False, YBSpectralOptions(n_basis=6)).double()
    p16 = circulant_phase(m.weight, 16)  # bins m / 16
    p64 = circulant_phase(m.weight, 64)  # bins m / 64
    torch.testing.assert_close(p64[::4], p16, rtol=1e-12, atol=1e-12)
    f = torch.arange(9, dtype=torch.float64) / 16
    torch.testing.assert_close(m.phase_profile(f)[1:8], p16[1:8], rtol=1e-12, atol=1e-12)
    assert math.isfinite(m.diagnostics()["phase_max_abs"])


# ----------------------------------------------------------------------------- transport


@pytest.fixture(scope="module")
def spectral_transport():
    cfg = TransportConfig(mixer="yb-spectral", length=16, dim=8, steps=500, mixer_options={"n_basis": 6})
    model, res = train(cfg)
    return cfg, model, res


def test_transport_solved_with_far_fewer_parameters_than_softmax(spectral_transport):
    cfg, _, spec = spectral_transport
    _, soft = train(TransportConfig(mixer="softmax", length=16, dim=8, steps=300, lr=3e-3))
    assert soft["acc"] > 0.98 and spec["acc"] > 0.98, (soft, spec)
    assert spec["params"] * 2 < soft["params"]  # same network and width, only the mixer differs
    assert spec["mixer_params"] * 5 < soft["mixer_params"]


def test_brickwall_transport_small():
    cfg = TransportConfig(
        mixer="yb-brickwall", length=8, dim=4, steps=200, mixer_options={"depth": 4, "init_angle": 1.4}
    )
    _, res = train(cfg)
    assert res["acc"] > 0.98, res


def test_spectral_trained_at_16_keeps_accuracy_at_64(spectral_transport):
    cfg, model, res = spectral_transport
    acc64 = accuracy(model, 64, cfg.vocab, size=1000)
    assert acc64 > res["acc"] - 0.03, (res["acc"], acc64)
    with budget(model, 0.0):  # no transport at budget 0: near chance (1/8)
        assert accuracy(model, 16, cfg.vocab, size=1000) < 0.3


def test_position_embedding_baseline_is_tied_to_its_length():
    from tsmix.models.synthetic.transport import TransportNet

    soft = TransportNet(TransportConfig(mixer="softmax", length=8, dim=4))
    with pytest.raises(tsmix.TsmixError, match="cannot run at length 9"):
        soft(torch.zeros(2, 9, dtype=torch.long))
    yb = TransportNet(TransportConfig(mixer="yb-spectral", length=8, dim=4))
    assert yb.pos is None and yb(torch.zeros(2, 9, dtype=torch.long)).shape == (2, 8)
