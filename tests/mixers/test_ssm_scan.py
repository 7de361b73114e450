"""The fused selective-SSM read (tsmix.ops.ssm_scan) against the plain recurrence and the autograd read.

Float64, outputs and every gradient, causal and bidirectional, at the encoders' sequence lengths
(patch: 42 tokens, D=16, 4 heads; variate: 7 and 21 tokens, D=128, 8 heads) with few sequences;
the dispatch threshold is lowered where a small case must take the fused path, and the tests
check that it does.
"""

from __future__ import annotations

import pytest
import torch

import tsmix
from tsmix.ops import fem_priors as P
from tsmix.ops import ssm_scan as Q

f64 = torch.float64


def _inputs(s: int, n: int, e: int, r: int, p: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    dt = (0.02 + 0.5 * torch.rand(s, n, e, dtype=f64, generator=gen)).requires_grad_()
    a = (-0.2 - 3 * torch.rand(e, r, dtype=f64, generator=gen)).requires_grad_()
    b = (0.1 + torch.rand(s, n, r, dtype=f64, generator=gen)).requires_grad_()
    c = torch.softmax(torch.randn(s, n, r, dtype=f64, generator=gen), -1).detach().requires_grad_()
    u = torch.randn(s, n, e, p, dtype=f64, generator=gen).requires_grad_()
    return dt, a, b, c, u


SHAPES = [(3, 42, 8, 16, 2), (2, 7, 64, 16, 2), (2, 21, 64, 16, 2), (2, 1, 4, 3, 1), (2, 2, 3, 5, 2)]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{s}x{n}xE{e}" for s, n, e, _, _ in SHAPES])
def test_fused_read_matches_the_recurrence_outputs_and_gradients(shape, causal):
    ins = _inputs(*shape)
    y, r = Q.ssm_read(*ins, causal), Q.ssm_read_reference(*ins, causal)
    assert y.shape == (*shape[:3], shape[4] + 1)
    torch.testing.assert_close(y, r, rtol=1e-12, atol=1e-12)
    g = torch.randn(y.shape, dtype=f64, generator=torch.Generator().manual_seed(1))
    for a, b in zip(torch.autograd.grad(y, ins, g), torch.autograd.grad(r, ins, g)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("causal", [True, False])
def test_fused_read_gradcheck(causal):
    ins = _inputs(2, 5, 3, 4, 2, seed=2)
    assert torch.autograd.gradcheck(lambda *t: Q.ssm_read(*t, causal), ins)


@pytest.mark.parametrize("causal", [True, False])
def test_reference_recurrence_matches_the_explicit_log_prior(causal):
    """The oracle itself, normalized, against ``ssm_prior_logp`` (weights from log space)."""
    dt, a, b, c, u = _inputs(2, 9, 3, 4, 2, seed=3)
    y = Q.ssm_read_reference(dt, a, b, c, u, causal)
    w = P.ssm_prior_logp(dt, a, b, c, causal).exp()  # (B, E, N, N)
    ref = w @ u.transpose(1, 2)  # (B, E, N, P)
    torch.testing.assert_close(y[..., :-1] / y[..., -1:], ref.transpose(1, 2), rtol=1e-12, atol=1e-12)


def test_dispatch():
    assert Q.use_ssm_scan(42, 896 * 8 * 16 * 3)  # the patch encoder's shape
    assert Q.use_ssm_scan(7, 32 * 64 * 16 * 3)  # the variate encoder's smallest cell
    assert not Q.use_ssm_scan(4096, 896 * 8 * 16 * 3)  # long: the chunked scans
    assert not Q.use_ssm_scan(42, 16)  # tiny steps: per-op overhead would dominate


@pytest.fixture
def fused_calls(monkeypatch):
    """Lower the threshold so small cases take the fused path, and count that they do."""
    monkeypatch.setattr(Q, "SSM_SCAN_MIN_STEP", 1)
    calls = []

    def spy(*args, **kw):
        calls.append(args[0].shape)
        return Q.ssm_read(*args, **kw)

    monkeypatch.setattr(P, "ssm_read", spy)
    return calls


@pytest.mark.parametrize("causal", [True, False])
def test_prior_read_dispatches_to_the_fused_read(fused_calls, causal):
    dt, a, b, c, u = ins = _inputs(3, 42, 8, 16, 2, seed=4)
    y = P.ssm_prior_read(dt, a, b, c, u, causal)
    assert len(fused_calls) == 1
    r = P.ssm_prior_read_reference(dt, a, b, c, u, causal)
    torch.testing.assert_close(y, r, rtol=1e-11, atol=1e-12)
    g = torch.randn(y.shape, dtype=f64, generator=torch.Generator().manual_seed(5))
    for ga, gr in zip(torch.autograd.grad(y, ins, g), torch.autograd.grad(r, ins, g)):
        torch.testing.assert_close(ga, gr, rtol=1e-10, atol=1e-10)
    assert len(fused_calls) == 1  # the reference did not route through it
    P.ssm_prior_read(dt, a, b, c, u, causal, fused=False)
    assert len(fused_calls) == 1


ENCODERS = [("patch", 16, 4, 42), ("variate", 128, 8, 7), ("variate", 128, 8, 21)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("enc", ENCODERS, ids=[f"{e[0]}-N{e[3]}" for e in ENCODERS])
def test_fem_ssm_fused_matches_unfused_and_reference_float64(fused_calls, enc, causal):
    _, d, heads, n = enc
    torch.manual_seed(6)
    m = tsmix.build_mixer("fem-ssm", d, heads=heads, causal=causal).double()
    with torch.no_grad():  # move every parameter off its init so no term is trivially zero
        for p in m.parameters():
            p.add_(0.1 * torch.randn_like(p))
    plain = tsmix.build_mixer("fem-ssm", d, heads=heads, causal=causal, fused=False).double()
    plain.load_state_dict(m.state_dict())
    x = torch.randn(2, n, d, dtype=f64, requires_grad=True)
    y = m(x)
    assert len(fused_calls) == 1
    yp = plain(x)
    assert len(fused_calls) == 1
    torch.testing.assert_close(y, yp, rtol=1e-10, atol=1e-11)
    torch.testing.assert_close(y, m.reference(x), rtol=1e-8, atol=1e-9)
    g = torch.randn_like(y)
    gy = torch.autograd.grad(y, (x, *m.parameters()), g)
    gp = torch.autograd.grad(yp, (x, *plain.parameters()), g)
    for a, b in zip(gy, gp):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def test_fused_read_saturates_without_overflow():
    dt, a, b, c, u = (t.detach().float() for t in _inputs(2, 40, 3, 4, 2, seed=7))
    for scale in (1e-6, 1e4):  # no decay at all / every step decays to exactly 0
        y = Q.ssm_read(dt * scale, a, b, c, u * 1e3, causal=False)
        assert torch.isfinite(y).all()
