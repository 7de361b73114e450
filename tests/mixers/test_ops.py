"""Ops behind the linear-time mixers and FEM: decayed scan, chunked GLA, LSE read, RoPE, priors."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tsmix.ops import fem_priors as P
from tsmix.ops.decay_scan import (
    SCAN_METHODS,
    decay_cumsum,
    decay_scan,
    decay_scan_naive,
    decay_scan_reference,
    scan_method,
    segment_sum,
    shift_exclusive,
)
from tsmix.ops.gla_chunk import gla_chunked, gla_recurrent, gla_reference
from tsmix.ops.lse_read import (
    bound_values,
    free_energy_combine,
    free_energy_reference,
    lse_pack,
    lse_unpack,
)
from tsmix.ops.rope import rope

f64 = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _log_decay(*shape, seed=0, scale=2.0, dtype=f64):
    return -F.softplus(scale * torch.randn(*shape, generator=_gen(seed), dtype=dtype))


# ----------------------------------------------------------------------------- decay scan


@pytest.mark.parametrize("method", SCAN_METHODS)
@pytest.mark.parametrize("n,chunk", [(1, 4), (5, 4), (16, 4), (17, 4), (300, 4), (97, 16)])
def test_decay_scan_matches_recurrence_float64(n, chunk, method):
    x = torch.randn(2, n, 3, 5, generator=_gen(n), dtype=f64, requires_grad=True)
    la = _log_decay(2, n, 3, seed=n + 1).requires_grad_(True)
    y, ref = decay_scan(x, la, chunk, method), decay_scan_reference(x, la)
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)
    w = torch.randn_like(y)
    # with N = 1 the loop form never touches log_a[0] (it multiplies a zero state): a zero grad
    g = torch.autograd.grad((y * w).sum(), [x, la], allow_unused=True, materialize_grads=True)
    gr = torch.autograd.grad((ref * w).sum(), [x, la])
    for a, b in zip(g, gr):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("n", [1, 2, 17, 300])
def test_decay_scan_whole_sequence_loop_matches_recurrence(n, monkeypatch):
    # big steps make the loop run the sequence as one chunk; force it on small tensors
    from tsmix.ops import decay_scan as ds

    x = torch.randn(2, n, 3, 5, generator=_gen(n + 50), dtype=f64, requires_grad=True)
    la = _log_decay(2, n, 3, seed=n + 51).requires_grad_(True)
    w = torch.randn(2, n, 3, 5, generator=_gen(n + 52), dtype=f64)
    chunked = decay_scan(x, la, 4)
    monkeypatch.setattr(ds, "WHOLE_SEQUENCE_STEP", 1)
    y, ref = decay_scan(x, la, 4), decay_scan_reference(x, la)
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(y, chunked, rtol=1e-12, atol=1e-12)
    g = torch.autograd.grad((y * w).sum(), [x, la], allow_unused=True, materialize_grads=True)
    gr = torch.autograd.grad((ref * w).sum(), [x, la])
    for a, b in zip(g, gr):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    if n == 17:
        assert torch.autograd.gradcheck(lambda x, la: decay_scan(x, la, 4), (x, la))


@pytest.mark.parametrize("method", SCAN_METHODS)
def test_decay_scan_gradcheck_and_double_backward(method):
    # against finite differences, first and second order, with chunk 4 so the chunk-end join
    # is exercised
    x = torch.randn(2, 11, 3, 2, generator=_gen(5), dtype=f64, requires_grad=True)
    la = _log_decay(2, 11, 3, seed=6).requires_grad_(True)

    def fn(x, la):
        return decay_scan(x, la, 4, method)

    assert torch.autograd.gradcheck(fn, (x, la))
    assert torch.autograd.gradgradcheck(fn, (x, la))


@pytest.mark.parametrize("method", SCAN_METHODS)
def test_decay_scan_gradient_of_one_input_only(method):
    x = torch.randn(2, 30, 3, 4, generator=_gen(7), dtype=f64)
    la = _log_decay(2, 30, 3, seed=8)
    for wants in ((True, False), (False, True)):
        xi, lai = x.clone().requires_grad_(wants[0]), la.clone().requires_grad_(wants[1])
        (g,) = torch.autograd.grad(decay_scan(xi, lai, 8, method).sum(), [xi if wants[0] else lai])
        xr, lar = x.clone().requires_grad_(wants[0]), la.clone().requires_grad_(wants[1])
        (gr,) = torch.autograd.grad(decay_scan_reference(xr, lar).sum(), [xr if wants[0] else lar])
        torch.testing.assert_close(g, gr, rtol=1e-10, atol=1e-10)


def test_decay_scan_gradients_long_strong_decay_float32():
    # the gradient flows back through the same strong decays: finite and float64-close
    n = 3000
    x = torch.randn(1, n, 2, 3, generator=_gen(9), dtype=f64)
    la = _log_decay(1, n, 2, seed=10, scale=30.0)
    w = torch.randn(1, n, 2, 3, generator=_gen(11), dtype=f64)
    grads = {}
    for dt in (torch.float32, f64):
        xi, lai = x.to(dt).requires_grad_(), la.to(dt).requires_grad_()
        grads[dt] = torch.autograd.grad((decay_scan(xi, lai) * w.to(dt)).sum(), [xi, lai])
    for g32, g64 in zip(grads[torch.float32], grads[f64]):
        assert torch.isfinite(g32).all()
        torch.testing.assert_close(g32.double(), g64, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("method", SCAN_METHODS)
def test_decay_scan_exact_on_10000_steps_float32(method):
    """fp32 chunked scan vs a float64 step-by-step recurrence over 10,000 steps: the error is
    fp32 rounding relative to the scan of |x| (the sum's own condition), no drift, no underflow."""
    n = 10_000
    x = torch.randn(1, n, 6, 1, generator=_gen(0), dtype=f64)
    la = _log_decay(1, n, 6, seed=1, scale=3.0)  # a mix of fast and slow decays
    la[..., 0] = -1e-4  # very long memory
    la[..., 1] = 0.0  # plain cumsum
    la[..., 2] = -30.0  # forgets within a step: e^{c_t} of the closed form underflows at once
    ref, mag = decay_scan_reference(torch.cat([x, x.abs()], dim=-1), la).unbind(-1)  # one loop
    ref, mag = ref[..., None], mag[..., None]
    y32 = decay_scan(x.float(), la.float(), method=method).double()
    assert ((y32 - ref).abs() / mag).max() < 2e-6
    y64 = decay_scan(x, la, method=method)
    assert ((y64 - ref).abs() / mag).max() < 1e-12
    # the released closed form e^{c} cumsum(x / e^{c}) is wrong (or non-finite) here
    naive = decay_scan_naive(x.float(), la.float()).double()
    assert not (torch.isfinite(naive).all() and ((naive - ref).abs() / mag).max() < 1e-2)


@pytest.mark.parametrize("method", SCAN_METHODS)
def test_decay_scan_future_cannot_move_past(method):
    n, t = 70, 23
    x = torch.randn(2, n, 4, 1, generator=_gen(3))
    la = _log_decay(2, n, 4, seed=4, dtype=torch.float32)
    x2, la2 = x.clone(), la.clone()
    x2[:, t + 1 :] = 1e30
    la2[:, t + 1 :] = -1e4
    y, y2 = decay_scan(x, la, 8, method), decay_scan(x2, la2, 8, method)
    assert torch.equal(y[:, : t + 1], y2[:, : t + 1])


def test_decay_scan_methods_agree_and_reject_unknown():
    x = torch.randn(3, 45, 4, 7, generator=_gen(11))
    la = _log_decay(3, 45, 4, seed=12, dtype=torch.float32)
    torch.testing.assert_close(decay_scan(x, la, method="loop"), decay_scan(x, la, method="matmul"),
                               rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="method must be one of"):
        decay_scan(x, la, method="fft")
    with scan_method("matmul"):  # the default switches inside the block only
        torch.testing.assert_close(decay_scan(x, la), decay_scan(x, la, method="matmul"), rtol=0, atol=0)
    assert torch.equal(decay_scan(x, la), decay_scan(x, la, method="loop"))


def test_segment_sum_and_exclusive_shift():
    la = _log_decay(7, seed=5)
    seg = segment_sum(la)
    for t in range(7):
        for s in range(7):
            want = la[s + 1 : t + 1].sum() if s <= t else -math.inf
            assert seg[t, s].item() == pytest.approx(float(want), abs=1e-14)
    x = torch.randn(1, 7, 1, 1, generator=_gen(6), dtype=f64)
    inc = decay_scan(x, la[None, :, None])
    exc = shift_exclusive(inc, la[None, :, None])
    torch.testing.assert_close(exc + x, inc, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(decay_cumsum(x[..., 0], la[None, :, None]), inc[..., 0])


@pytest.mark.parametrize("method", SCAN_METHODS)
def test_decay_scan_bfloat16_finite_and_close(method):
    x = torch.randn(2, 200, 3, 2, generator=_gen(7))
    la = _log_decay(2, 200, 3, seed=8, dtype=torch.float32)
    y = decay_scan(x.bfloat16(), la.bfloat16(), method=method)
    assert y.dtype == torch.bfloat16 and torch.isfinite(y.float()).all()
    ref = decay_scan_reference(x.bfloat16().double(), la.bfloat16().double())
    assert ((y.double() - ref).abs() / (ref.abs() + 1)).max() < 3e-2


# ----------------------------------------------------------------------------- chunked GLA


@pytest.mark.parametrize("g", [1, 6])
@pytest.mark.parametrize("inclusive", [True, False])
@pytest.mark.parametrize("n", [1, 7, 16, 37])
def test_gla_chunked_matches_reference_and_recurrence(g, inclusive, n):
    gen = _gen(n + 10 * g)
    q, k = (torch.randn(2, 3, n, 6, generator=gen, dtype=f64) for _ in range(2))
    v = torch.randn(2, 3, n, 5, generator=gen, dtype=f64)
    la = _log_decay(2, 3, n, g, seed=n)
    s0 = torch.randn(2, 3, 6, 5, generator=gen, dtype=f64)
    o, st = gla_chunked(q, k, v, la, chunk=4, inclusive=inclusive)
    torch.testing.assert_close(o, gla_reference(q, k, v, la, inclusive), rtol=1e-11, atol=1e-11)
    o2, st2 = gla_recurrent(q, k, v, la, inclusive=inclusive)
    torch.testing.assert_close(o, o2, rtol=1e-11, atol=1e-11)
    torch.testing.assert_close(st, st2, rtol=1e-11, atol=1e-11)
    o3, st3 = gla_chunked(q, k, v, la, chunk=4, inclusive=inclusive, initial_state=s0)
    o4, st4 = gla_recurrent(q, k, v, la, inclusive=inclusive, initial_state=s0)
    torch.testing.assert_close(o3, o4, rtol=1e-11, atol=1e-11)
    torch.testing.assert_close(st3, st4, rtol=1e-11, atol=1e-11)


def test_gla_chunked_gradients_float64():
    gen = _gen(1)
    q, k = (torch.randn(1, 2, 21, 4, generator=gen, dtype=f64, requires_grad=True) for _ in range(2))
    v = torch.randn(1, 2, 21, 3, generator=gen, dtype=f64, requires_grad=True)
    la = _log_decay(1, 2, 21, 4, seed=2).requires_grad_(True)
    w = torch.randn(1, 2, 21, 3, generator=gen, dtype=f64)
    g1 = torch.autograd.grad((gla_chunked(q, k, v, la, chunk=4)[0] * w).sum(), [q, k, v, la])
    g2 = torch.autograd.grad((gla_reference(q, k, v, la) * w).sum(), [q, k, v, la])
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_gla_chunked_strong_decay_no_overflow_float32():
    """Log-decays of -50 per step (floored at -5 in every form): exps of cumulative sums over a
    chunk would overflow; the factorized per-key-dim path stays finite and accurate."""
    gen = _gen(2)
    q, k = (torch.randn(1, 1, 64, 4, generator=gen) for _ in range(2))
    v = torch.randn(1, 1, 64, 4, generator=gen)
    la = torch.full((1, 1, 64, 4), -50.0)
    la[..., ::3, :] = -1e-3
    o, st = gla_chunked(q, k, v, la, chunk=8)
    assert torch.isfinite(o).all() and torch.isfinite(st).all()
    ref = gla_reference(q.double(), k.double(), v.double(), la.double())
    torch.testing.assert_close(o.double(), ref, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- LSE read


def test_bound_values_identity_then_bounded():
    beta = torch.tensor([0.5, 2.0, 7.0], dtype=f64, requires_grad=True)
    v = torch.linspace(-1e4, 1e4, 20001, dtype=f64)[:, None].expand(-1, 3)
    vb = bound_values(v, beta, 30.0)
    inside = (beta * v).abs() <= 30.0
    assert torch.equal(vb[inside], v[inside])  # bit for bit where |beta v| <= cap
    assert ((beta * vb).abs() <= 30.0 * (1 + 1e-15)).all()
    (g,) = torch.autograd.grad((vb * v.sign()).sum(), beta)  # clamped entries still teach beta
    assert torch.isfinite(g).all() and (g < 0).all()  # |v_b| = cap / beta shrinks as beta grows


def _prior(n: int, seed: int, causal: bool) -> torch.Tensor:
    q, k = (torch.randn(2, 3, n, 4, generator=_gen(seed + i), dtype=f64) for i in range(2))
    return P.sm_logp(q, k, causal), q, k


@pytest.mark.parametrize("causal", [True, False])
def test_free_energy_at_least_mean_and_fast_path_matches(causal):
    logp, q, k = _prior(11, 0, causal)
    v = 3 * torch.randn(2, 3, 11, 5, generator=_gen(9), dtype=f64)
    for b in (0.1, 1.0, 4.0):
        beta = torch.full((5,), b, dtype=f64)
        mu, f = free_energy_reference(logp, v, beta)
        assert (f - mu >= -1e-12).all()  # Jensen, per channel
        mu2, f2 = lse_unpack(P.sm_read(q, k, lse_pack(v, beta), causal), beta)  # one SDPA read
        torch.testing.assert_close(mu2, mu, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(f2, f, rtol=1e-12, atol=1e-12)


def test_free_energy_limits_in_beta():
    """beta -> 0: F -> mu (F - mu ~ beta Var/2); beta -> inf: F -> max over the prior's support."""
    logp, q, k = _prior(9, 3, causal=True)
    v = torch.randn(2, 3, 9, 4, generator=_gen(4), dtype=f64)
    p = logp.exp()
    var = p @ v.square() - (p @ v).square()
    for b in (1e-3, 1e-5):
        mu, f = free_energy_reference(logp, v, torch.tensor(b, dtype=f64))
        torch.testing.assert_close((f - mu) / b, var / 2, rtol=1e-2, atol=1e-6)
    support = p > 0  # s <= t
    support_max = v[..., None, :, :].masked_fill(~support[..., None], -math.inf).amax(-2)
    worst_logp = logp.masked_fill(~support, math.inf).amin(-1, keepdim=True)  # (B, H, T, 1)
    prev = None
    for b in (1.0, 10.0, 100.0, 1e4, 1e6):
        _, f = free_energy_reference(logp, v, torch.tensor(b, dtype=f64))
        gap = support_max - f
        assert (gap >= -1e-12).all()
        assert (gap <= -worst_logp / b + 1e-12).all()  # max - F <= log(1 / p(argmax)) / beta
        if prev is not None:
            assert (f >= prev - 1e-12).all()  # F grows with beta
        prev = f
    torch.testing.assert_close(prev, support_max, rtol=0, atol=1e-4)
    # the fast one-pass path reaches the same limit while exp stays in range (|beta v| <= 300)
    beta = torch.tensor(300.0 / v.abs().max().item(), dtype=f64)
    _, f_fast = lse_unpack(P.sm_read(q, k, lse_pack(v, beta), True), beta)
    gap = support_max - f_fast
    assert (gap >= -1e-12).all() and (gap <= -worst_logp / beta + 1e-12).all()


def test_combine_lambda_zero_gate_one_is_mean_exactly():
    mu, f = torch.randn(3, 4, dtype=f64), torch.randn(3, 4, dtype=f64)
    zero, one = torch.zeros(3, 4, dtype=f64), torch.ones(3, 4, dtype=f64)
    assert torch.equal(free_energy_combine(mu, f, zero, one), mu)
    assert torch.equal(free_energy_combine(mu, f, one, None), f)
    assert torch.equal(free_energy_combine(mu, None, None, None), mu)


# ----------------------------------------------------------------------------- priors, RoPE


@pytest.mark.parametrize("causal", [True, False])
def test_prior_reads_equal_explicit_prior(causal):
    gen = _gen(11)
    b, h, n, dk, e, r = 2, 2, 13, 3, 4, 5
    u_head = torch.randn(b, h, n, 6, generator=gen, dtype=f64)
    zq, zk = (torch.randn(b, h, n, dk, generator=gen, dtype=f64) for _ in range(2))
    la = _log_decay(b, h, n, dk, seed=12)
    logp = P.gla_prior_logp(torch.log(F.elu(zq) + 1), torch.log(F.elu(zk) + 1), la, causal)
    fast = P.gla_prior_read(F.elu(zq) + 1, F.elu(zk) + 1, u_head, la, causal, chunk=4)
    torch.testing.assert_close(fast, logp.exp() @ u_head, rtol=1e-11, atol=1e-11)

    u_ch = torch.randn(b, n, e, 2, generator=gen, dtype=f64)
    dt = F.softplus(torch.randn(b, n, e, generator=gen, dtype=f64))
    a = -torch.rand(e, r, generator=gen, dtype=f64) * 3
    bm = F.softplus(torch.randn(b, n, r, generator=gen, dtype=f64))
    cm = torch.softmax(torch.randn(b, n, r, generator=gen, dtype=f64), -1)
    key = torch.randn(b, n, e, generator=gen, dtype=f64)
    ld = -torch.rand(e, generator=gen, dtype=f64)
    for fast, logp in (
        (P.ssm_prior_read(dt, a, bm, cm, u_ch, causal), P.ssm_prior_logp(dt, a, bm, cm, causal)),
        (P.aft_prior_read(key, ld, u_ch, causal), P.aft_prior_logp(key, ld, causal)),
    ):
        want = torch.einsum("bets,bsep->btep", logp.exp(), u_ch)
        torch.testing.assert_close(fast, want, rtol=1e-11, atol=1e-11)
        torch.testing.assert_close(logp.exp().sum(-1), torch.ones_like(logp[..., 0]))
        if causal:
            assert (logp.exp().triu(1) == 0).all()


def test_rope_is_a_rotation_with_relative_scores():
    x = torch.randn(1, 1, 9, 8, generator=_gen(0), dtype=f64)
    y = rope(x)
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1))
    q = torch.randn(8, generator=_gen(1), dtype=f64)
    k = torch.randn(8, generator=_gen(2), dtype=f64)

    def score(m, n):
        qm = rope(q.expand(1, 1, m + 1, 8))[0, 0, m]
        kn = rope(k.expand(1, 1, n + 1, 8))[0, 0, n]
        return (qm @ kn).item()

    assert score(5, 2) == pytest.approx(score(8, 5), abs=1e-12)
    assert score(5, 2) != pytest.approx(score(5, 3), abs=1e-6)


# ----------------------------------------------------------------------------- attention reference


def test_causal_mask():
    from tsmix.ops.attention import causal_mask

    m = causal_mask(4)
    assert m.dtype == torch.bool and m.shape == (4, 4)
    assert torch.equal(m, torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]).bool())
    assert torch.equal(causal_mask(4, strict=True), m & ~torch.eye(4, dtype=torch.bool))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_attention_reference_matches_sdpa(causal, scale):
    from tsmix.ops.attention import attention_logits, attention_reference

    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(2, 3, 9, 5, generator=gen, dtype=torch.float64) for _ in range(2))
    v = torch.randn(2, 3, 9, 4, generator=gen, dtype=torch.float64)
    fast = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    torch.testing.assert_close(attention_reference(q, k, v, causal, scale), fast, rtol=1e-12, atol=1e-12)
    s = attention_logits(q, k, causal, scale)
    assert torch.isinf(s[..., 0, 1:]).all() == causal  # row 0 sees key 0 only when causal
