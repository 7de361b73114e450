"""Dense bidirectional GLA (tsmix.ops.gla_small) == the plain segment-sum reference, and the
dispatcher in gla_bidir takes it exactly where it should."""

from __future__ import annotations

import pytest
import torch

import tsmix
import tsmix.ops.gla_small as gs
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
    """The batch runs in blocks of BLOCK_ELEMS scores; a tiny block forces many (and a ragged last)."""
    ts = _inputs((7, 3), 13, 4, 5, 1 if decay == "head" else 4, seed=3)
    y = gla_dense_bidir(*ts)
    w = torch.randn_like(y)
    g = _grads(y, ts, w)
    monkeypatch.setattr(gs, "BLOCK_ELEMS", 2 * 13 * 13)
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
