"""One contract suite over every registered mixer, present and future.

A new mixer file is covered here without a new test: shapes, dtypes, no look-ahead when
causal (also numerically, under a huge future perturbation), finiteness at |x| = 1e4,
batch independence, determinism, state_dict round trip, reference == fast path in
float64 on outputs and gradients, option validation and its search space.
"""

from __future__ import annotations

import copy

import optuna
import pytest
import torch

import tsmix
from tsmix.registry import mixer_spec

DIM, HEADS = 16, 2
MIXERS = tsmix.available_mixers()


CASES = [pytest.param(n, c, id=f"{n}-{'causal' if c else 'bidir'}")
         for n in MIXERS for c in mixer_spec(n).causal_modes]


def make(name: str, causal: bool, dtype=torch.float32, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    m = tsmix.build_mixer(name, DIM, heads=HEADS, causal=causal)
    return m.to(dtype).eval()


def test_registry_has_the_baselines():
    assert "softmax" in MIXERS
    assert MIXERS == sorted(MIXERS)


@pytest.mark.parametrize("name,causal", CASES)
@pytest.mark.parametrize("n", [1, 7, 16])
def test_shape_and_dtype(name, causal, n):
    for dtype in (torch.float32, torch.float64):
        m = make(name, causal, dtype)
        x = torch.randn(3, n, DIM, dtype=dtype)
        y = m(x)
        assert y.shape == x.shape and y.dtype == dtype


@pytest.mark.parametrize("name,causal", CASES)
def test_bfloat16_finite(name, causal):
    m = make(name, causal, torch.bfloat16)
    x = torch.randn(2, 12, DIM, dtype=torch.bfloat16, requires_grad=True)
    y = m(x)
    assert y.dtype == torch.bfloat16 and torch.isfinite(y.float()).all()
    y.float().square().mean().backward()
    assert torch.isfinite(x.grad.float()).all()


@pytest.mark.parametrize("name", [n for n in MIXERS if mixer_spec(n).supports_causal])
def test_causal_no_lookahead(name):
    n, t = 13, 6
    # float64, small perturbation: outputs <= t are unchanged to the last bits.
    m = make(name, True, torch.float64)
    x = torch.randn(2, n, DIM, dtype=torch.float64)
    x2 = x.clone()
    x2[:, t + 1 :] += torch.randn_like(x2[:, t + 1 :])
    torch.testing.assert_close(m(x)[:, : t + 1], m(x2)[:, : t + 1], rtol=1e-12, atol=1e-12)
    # float32, huge future values: a whole-sequence max or normalizer would move the past.
    m = make(name, True, torch.float32)
    x = torch.randn(2, n, DIM)
    x2 = x.clone()
    x2[:, t + 1 :] = 1e4 * torch.randn_like(x2[:, t + 1 :])
    torch.testing.assert_close(m(x)[:, : t + 1], m(x2)[:, : t + 1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name,causal", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_large_inputs_finite(name, causal, dtype):
    m = make(name, causal, dtype)
    x = (1e4 * torch.randn(2, 10, DIM)).to(dtype).requires_grad_(True)
    y = m(x)
    assert torch.isfinite(y.float()).all(), "non-finite output for |x| ~ 1e4"
    y.float().mean().backward()
    assert torch.isfinite(x.grad.float()).all(), "non-finite input gradient for |x| ~ 1e4"
    for p in m.parameters():
        if p.grad is not None:
            assert torch.isfinite(p.grad.float()).all(), "non-finite parameter gradient"


@pytest.mark.parametrize("name,causal", CASES)
def test_batch_independence(name, causal):
    m = make(name, causal, torch.float64)
    x = torch.randn(4, 9, DIM, dtype=torch.float64)
    x2 = x.clone()
    x2[1:] = torch.randn_like(x2[1:])
    torch.testing.assert_close(m(x)[0], m(x2)[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(m(x)[:1], m(x[:1]), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name,causal", CASES)
def test_determinism_and_state_dict(name, causal):
    x = torch.randn(2, 11, DIM)
    a, b = make(name, causal, seed=3), make(name, causal, seed=3)
    assert torch.equal(a(x), b(x))
    c = make(name, causal, seed=4)
    c.load_state_dict(copy.deepcopy(a.state_dict()))
    assert torch.equal(a(x), c(x))


@pytest.mark.parametrize("name,causal", CASES)
def test_reference_matches_fast_path_float64(name, causal):
    m = make(name, causal, torch.float64)
    assert hasattr(m, "reference"), f"mixer {name!r} has no plain reference implementation"
    x = torch.randn(2, 19, DIM, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, 19, DIM, dtype=torch.float64)
    y_fast = m(x)
    g_fast = torch.autograd.grad((y_fast * w).sum(), [x, *m.parameters()], allow_unused=True)
    y_ref = m.reference(x)
    g_ref = torch.autograd.grad((y_ref * w).sum(), [x, *m.parameters()], allow_unused=True)
    torch.testing.assert_close(y_fast, y_ref, rtol=1e-9, atol=1e-9)
    for gf, gr in zip(g_fast, g_ref):
        if gf is None or gr is None:
            assert gf is None and gr is None
            continue
        torch.testing.assert_close(gf, gr, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("name,causal", CASES)
def test_backward_twice_through_a_retained_graph(name, causal):
    """Hand-written backwards may reuse buffers, never ones a later backward of the same graph
    needs: two passes with ``retain_graph`` give the same gradients (multi-loss training,
    gradient-norm penalties and the curvature diagnostic do this)."""
    m = make(name, causal, torch.float64)
    x = torch.randn(2, 19, DIM, dtype=torch.float64, requires_grad=True)
    loss = (m(x) * torch.randn(2, 19, DIM, dtype=torch.float64)).sum()
    leaves = [x, *m.parameters()]
    first = torch.autograd.grad(loss, leaves, retain_graph=True, allow_unused=True)
    second = torch.autograd.grad(loss, leaves, allow_unused=True)
    for a, b in zip(first, second):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", MIXERS)
def test_option_errors(name):
    with pytest.raises(tsmix.TsmixError, match="no option"):
        tsmix.build_mixer(name, DIM, heads=HEADS, not_an_option=1)
    spec = mixer_spec(name)
    if not spec.supports_causal:
        with pytest.raises(tsmix.TsmixError, match="causal"):
            tsmix.build_mixer(name, DIM, heads=HEADS, causal=True)


@pytest.mark.parametrize("name", MIXERS)
def test_search_space_builds(name):
    spec = mixer_spec(name)
    if spec.space is None:
        pytest.skip(f"{name} registers no search space")
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(3):
        trial = study.ask()
        opts = spec.space(trial)
        causal = not spec.supports_bidirectional
        m = tsmix.build_mixer(name, DIM, heads=HEADS, causal=causal, **opts)
        assert m(torch.randn(1, 5, DIM)).shape == (1, 5, DIM)
        study.tell(trial, 0.0)


def test_unknown_mixer_names_the_choices():
    with pytest.raises(tsmix.TsmixError, match="available mixers: .*softmax"):
        tsmix.build_mixer("nope", DIM)


@pytest.mark.parametrize("name,causal", CASES)
def test_reference_matches_fast_path_with_perturbed_parameters(name, causal):
    # Zero-initialised branches (e.g. a conditioning projection that starts as identity)
    # are invisible at init; perturb every parameter so they are exercised too.
    m = make(name, causal, torch.float64)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    x = torch.randn(2, 11, DIM, dtype=torch.float64, generator=gen, requires_grad=True)
    y_fast, y_ref = m(x), m.reference(x)
    torch.testing.assert_close(y_fast, y_ref, rtol=1e-9, atol=1e-9)
    w = torch.randn(y_fast.shape, dtype=torch.float64, generator=gen)
    (g_fast,) = torch.autograd.grad((y_fast * w).sum(), x)
    (g_ref,) = torch.autograd.grad((y_ref * w).sum(), x)
    torch.testing.assert_close(g_fast, g_ref, rtol=1e-8, atol=1e-8)


# float32 at |x| ~ 1e3 against the float64 map of the same weights. The bound is backward
# stability: a float32 algorithm may miss the exact (float64) output by as much as the exact map
# moves when every input and weight is perturbed by a few float32 ulps (REL_PERTURB, relative),
# plus a floor of 1e-6 of the output scale for its own final roundings. Softmax-like mixers at
# these inputs have logits ~1e5, so ulp-sized changes legitimately move near-tied weights (their
# error is ~1e-3 of the scale, and so is their sensitivity); a well-conditioned map held to
# 1e-6 keeps a formula that cancels in float32 out. Measured worst ratio error / bound: 0.21
# (softmax, gated); the elu(z) + 1 form of the linear feature map gave up to 1e5.
REL_PERTURB = 8 * 2.0**-24


def _perturbed_output(m64: torch.nn.Module, x64: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """The float64 map with every weight and input scaled by 1 + REL_PERTURB * N(0, 1)."""
    m2 = copy.deepcopy(m64)
    with torch.no_grad():
        for p in m2.parameters():
            p.mul_(1 + REL_PERTURB * torch.randn(p.shape, generator=gen, dtype=p.dtype))
        return m2(x64 * (1 + REL_PERTURB * torch.randn(x64.shape, generator=gen, dtype=x64.dtype)))


@pytest.mark.parametrize("name,causal", CASES)
def test_float32_agrees_with_float64_at_large_inputs(name, causal):
    m32 = make(name, causal, torch.float32, seed=1)
    m64 = copy.deepcopy(m32).double()
    gen = torch.Generator().manual_seed(1)
    x = 1e3 * torch.randn(4, 32, DIM, generator=gen)
    x = torch.cat([x, -x])  # both signs of every token: a query of one sign throughout is likely
    with torch.no_grad():
        err = (m32(x).double() - m64(x.double())).abs().amax()
        y64 = m64(x.double())
        sens = max((_perturbed_output(m64, x.double(), gen) - y64).abs().amax() for _ in range(2))
    scale = y64.abs().amax()
    bound = sens + 1e-6 * scale
    assert err <= bound, f"float32 misses float64 by {err:.3g}, bound {bound:.3g} (output scale {scale:.3g})"


# ----------------------------------------------------------------------------- capabilities


@pytest.mark.parametrize("name", [n for n in MIXERS if mixer_spec(n).supports_bidirectional])
def test_position_aware_is_exactly_not_permutation_equivariant(name):
    """A mixer not declared position-aware must commute with any reordering of the tokens
    (models then add positions); a declared one must not (it encodes order itself). Every
    parameter is perturbed: a zero-initialised branch (FEM's C) hides the order at init."""
    m = make(name, False, torch.float64)
    with torch.no_grad():
        gen = torch.Generator().manual_seed(3)
        for p in m.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    x = torch.randn(2, 12, DIM, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(1))
    gap = (m(x[:, perm]) - m(x)[:, perm]).abs().amax()
    if tsmix.mixer_capabilities(name).position_aware:
        assert gap > 1e-6, f"{name} is declared position-aware but is permutation-equivariant"
    else:
        assert gap < 1e-10, f"{name} depends on token order ({gap:.2g}); declare position_aware=True"


@pytest.mark.parametrize("name", [n for n in MIXERS if tsmix.mixer_capabilities(n).streaming])
def test_streaming_form_matches_the_parallel_form(name):
    m = make(name, True, torch.float64)
    x = torch.randn(2, 9, DIM, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(m.recurrent(x), m(x), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", MIXERS)
def test_capabilities_are_consistent(name):
    spec, caps = mixer_spec(name), tsmix.mixer_capabilities(name)
    assert (spec.supports_causal, spec.supports_bidirectional) == (caps.causal, caps.bidirectional)
    assert caps.causal or caps.bidirectional
    assert spec.causal_modes, f"{name} declares no mode"
    for causal in spec.causal_modes:  # every declared mode builds ...
        make(name, causal)
    for causal in {False, True} - set(spec.causal_modes):  # ... and an undeclared one is refused, clearly
        with pytest.raises(tsmix.TsmixError, match="causal" if causal else "bidirectional"):
            make(name, causal)
    assert set(caps.labels()) <= {"causal", "bidirectional", "position-aware", "streaming"}
    if not caps.streaming:  # no mixer claims a streaming form it does not declare
        m = make(name, caps.causal)
        assert not (caps.causal and hasattr(m, "step") and _streams(m)), f"{name} streams; declare it"


def _streams(m) -> bool:
    try:
        m.step(torch.randn(1, DIM))
    except tsmix.TsmixError:
        return False
    return True
