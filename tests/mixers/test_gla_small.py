"""Dense bidirectional GLA (tsmix.ops.gla_small) == the plain segment-sum reference, and the
dispatcher in gla_bidir takes it exactly where it should."""

from __future__ import annotations

import pytest
import torch

import tsmix
import tsmix.ops.gla_small as gs
from tsmix.ops import attention
from tsmix.ops.gla_chunk import LOG_DECAY_MIN, gla_bidir, gla_scan
from tsmix.ops.gla_small import DENSE_MAX_LOG_DECAY, dense_bidir_fits, gla_bidir_reference, gla_dense_bidir

f64 = torch.float64

# (lead, N, d_k, d_v): the patch encoder's heads (N=42, d=4, +1 normalizer column), the variate
# encoder's (N=7/21, d=16), and odd sizes
SHAPES = [((3, 4), 42, 4, 4), ((2, 4), 42, 4, 5), ((2, 8), 21, 16, 17), ((3, 2), 7, 16, 16), ((5,), 2, 3, 1)]


def _inputs(lead, n, dk, dv, groups, seed=0, dtype=f64, decay=1.0):
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(*lead, n, dk, generator=gen, dtype=dtype) for _ in range(2))
    v = torch.randn(*lead, n, dv, generator=gen, dtype=dtype)
    la = -decay * torch.rand(*lead, n, groups, generator=gen, dtype=dtype)
    return [t.requires_grad_(True) for t in (q, k, v, la)]


def _grads(y, ts, w):
    return torch.autograd.grad((y * w).sum(), ts)


@pytest.mark.parametrize("decay", ["head", "key"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[1]}x{s[2]}x{s[3]}")
def test_dense_equals_reference_float64(shape, decay):
    lead, n, dk, dv = shape
    ts = _inputs(lead, n, dk, dv, 1 if decay == "head" else dk, seed=n + dk)
    assert dense_bidir_fits(*(t.detach() for t in ts))
    y, r = gla_dense_bidir(*ts), gla_bidir_reference(*ts)
    torch.testing.assert_close(y, r, rtol=1e-10, atol=1e-10)
    w = torch.randn_like(y)
    for a, b in zip(_grads(y, ts, w), _grads(r, ts, w)):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("decay", ["head", "key"])
def test_small_blocks_give_the_same_values(decay, monkeypatch):
    """The batch runs in blocks of SCORE_BLOCK_ELEMS scores; a tiny block forces many (and a ragged last)."""
    ts = _inputs((7, 3), 13, 4, 5, 1 if decay == "head" else 4, seed=3)
    y = gla_dense_bidir(*ts)
    w = torch.randn_like(y)
    g = _grads(y, ts, w)
    monkeypatch.setattr(attention, "SCORE_BLOCK_ELEMS", 2 * 13 * 13)
    y2 = gla_dense_bidir(*ts)
    torch.testing.assert_close(y2, y, rtol=1e-12, atol=1e-12)
    for a, b in zip(_grads(y2, ts, w), g):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_float32_near_the_decay_bound():
    """Total decays just under DENSE_MAX_LOG_DECAY: factors up to e^20, no overflow, float32-accurate."""
    n = 42
    ts = _inputs((4, 4), n, 4, 5, 4, seed=7, dtype=torch.float32)
    with torch.no_grad():
        ts[3].fill_(-0.99 * DENSE_MAX_LOG_DECAY / n)  # every total decay = 0.99 * bound
    assert dense_bidir_fits(*(t.detach() for t in ts))
    y = gla_dense_bidir(*ts)
    ref_in = [t.detach().double().requires_grad_(True) for t in ts]
    r = gla_bidir_reference(*ref_in)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y.double(), r, rtol=1e-4, atol=1e-5)
    w = torch.randn_like(r)
    g32 = _grads(y, ts, w.float())
    for a, b in zip(g32, _grads(r, ref_in, w)):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-4)


def _spy(monkeypatch):
    calls = []
    real = gs._DecayAttention.apply

    def apply(*a):
        calls.append(a[0].shape)
        return real(*a)

    monkeypatch.setattr(gs._DecayAttention, "apply", apply)
    return calls


@pytest.mark.parametrize("decay", ["head", "key"])
def test_gla_bidir_dispatches_to_dense_and_matches(decay, monkeypatch):
    calls = _spy(monkeypatch)
    ts = _inputs((2, 4), 42, 4, 5, 1 if decay == "head" else 4, seed=11)
    y = gla_bidir(*ts, causal=False, chunk=8)
    assert len(calls) == 1
    torch.testing.assert_close(y, gla_scan(*ts, causal=False), rtol=1e-10, atol=1e-10)
    gla_bidir(*ts, causal=True, chunk=8)  # causal: never the dense form (r depends on the future)
    assert len(calls) == 1


def test_saturated_decays_keep_the_exact_scan(monkeypatch):
    """A total decay beyond the bound (gates at the floor) falls back, and the floor still applies."""
    calls = _spy(monkeypatch)
    ts = _inputs((2, 2), 42, 4, 4, 4, seed=5, decay=8.0)  # below LOG_DECAY_MIN: floored
    assert not dense_bidir_fits(*(t.detach().clamp_min(LOG_DECAY_MIN) for t in ts))
    y = gla_bidir(*ts, causal=False, chunk=8)
    assert not calls
    floored = [*ts[:3], ts[3].clamp_min(LOG_DECAY_MIN)]
    torch.testing.assert_close(y, gla_bidir_reference(*floored), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    "name,opts", [("gla", {}), ("gla", {"decay": "head"}), ("fem-gla", {}), ("fem-gla", {"decay": "key"})]
)
def test_mixers_take_the_dense_path_at_the_encoder_shapes(name, opts, monkeypatch):
    """Bidirectional gla / fem-gla at the patch shape (D=16, 4 heads, N=42) in float64: the fast
    forward uses the dense form and equals the plain reference, values and gradients."""
    calls = _spy(monkeypatch)
    torch.manual_seed(0)
    m = tsmix.build_mixer(name, 16, heads=4, causal=False, **opts).double()
    x = torch.randn(3, 42, 16, dtype=f64, requires_grad=True)
    y, r = m(x), m.reference(x)
    assert len(calls) == 1
    torch.testing.assert_close(y, r, rtol=1e-10, atol=1e-10)
    w = torch.randn_like(y)
    params = [x, *m.parameters()]
    for a, b in zip(_grads(y, params, w), _grads(r, params, w)):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("decay", ["key", "head"])
@pytest.mark.parametrize("dim,heads,n", [(16, 4, 42), (128, 8, 7)], ids=["patch", "variate"])
def test_gla_channel_major_forward_matches_token_major(dim, heads, n, decay, spy):
    """Bidirectional gla on CPU runs the whole mixer channel-major (``_forward_t``); float32 values
    and gradients equal the token-major path's (same maths, other rounding), and float64 the
    plain reference's."""
    torch.manual_seed(1)
    m = tsmix.build_mixer("gla", dim, heads=heads, causal=False, decay=decay)
    cm = spy(type(m), "_forward_t")
    x = torch.randn(4, n, dim, requires_grad=True)
    y = m(x)
    assert len(cm) == 1
    q, k, v, la = m._inputs(x)
    t = m._finish(gla_bidir(q, k, v, la, False, m.chunk), x)
    torch.testing.assert_close(y, t, rtol=1e-5, atol=1e-5)
    w = torch.randn_like(y)
    params = [x, *m.parameters()]
    for a, b in zip(_grads(y, params, w), _grads(t, params, w)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    m64, x64 = m.double(), x.detach().double().requires_grad_(True)
    y64, r64 = m64(x64), m64.reference(x64)
    torch.testing.assert_close(y64, r64, rtol=1e-10, atol=1e-10)
    params = [x64, *m64.parameters()]
    for a, b in zip(_grads(y64, params, w.double()), _grads(r64, params, w.double())):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def test_gla_channel_major_forward_falls_back_on_saturated_decays(monkeypatch):
    """Gates at the floor (total decay 42 x 5 > DENSE_MAX_LOG_DECAY): ``_forward_t`` declines and
    the exact scan gives the reference's values."""
    calls = _spy(monkeypatch)
    torch.manual_seed(2)
    m = tsmix.build_mixer("gla", 16, heads=4, causal=False, gate_tau=0.1).double()
    with torch.no_grad():
        m.gate[1].bias.fill_(-50.0)  # logsigmoid(-50) / 0.1 = -500: floored at LOG_DECAY_MIN
    x = torch.randn(2, 42, 16, dtype=f64, requires_grad=True)
    assert m._forward_t(x) is None
    y = m(x)
    assert not calls
    torch.testing.assert_close(y, m.reference(x), rtol=1e-10, atol=1e-10)
