"""The step form of the decayed scan (tsmix.ops.step_scan) and the mixers that route through it.

The mixers take the step form only at big batches (the patch encoder's 896 x 42 shape); here the
threshold is lowered so that small float64 cases run it, and the reference-vs-fast checks of the
contract suite are repeated on it: outputs and gradients, causal and bidirectional.
"""

from __future__ import annotations

import pytest
import torch

import tsmix
from tsmix.ops import step_scan as S
from tsmix.ops.decay_scan import decay_scan_reference
from tsmix.ops.gla_chunk import gla_chunked, gla_reference, gla_scan, reverse_exclusive

f64 = torch.float64


def _bidir_reference(x, la, causal):
    """Plain loops: inclusive forward recurrence + exclusive reverse recurrence."""
    h = decay_scan_reference(x, la)
    if causal:
        return h
    z = decay_scan_reference(x.flip(-3), la.flip(-2)).flip(-3)  # z_t = a_t z_{t+1} + x_t
    a = la.exp()[..., None]
    hb = torch.zeros_like(z)
    hb[..., :-1, :, :] = a[..., :-1, :, :] * z[..., 1:, :, :]
    return h + hb


@pytest.mark.parametrize("causal", [True, False])
def test_step_scan_matches_the_recurrence_outputs_and_gradients(causal):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 9, 2, 5, dtype=f64, generator=gen, requires_grad=True)
    la = (-3 * torch.rand(3, 9, 2, dtype=f64, generator=gen)).requires_grad_(True)
    y, r = S.step_scan(x, la, causal), _bidir_reference(x, la, causal)
    torch.testing.assert_close(y, r, rtol=1e-12, atol=1e-12)
    g = torch.randn(y.shape, dtype=f64, generator=gen)
    for a, b in zip(torch.autograd.grad(y, (x, la), g), torch.autograd.grad(r, (x, la), g)):
        torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("causal", [True, False])
def test_step_scan_gradcheck_with_broadcast_decay(causal):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 6, 3, 2, dtype=f64, generator=gen, requires_grad=True)
    la = (-torch.rand(6, 3, dtype=f64, generator=gen)).requires_grad_(True)  # shared by the batch
    assert torch.autograd.gradcheck(lambda x, la: S.step_scan(x, la, causal), (x, la))


def test_step_scan_rejects_mismatched_shapes_and_saturates_without_overflow():
    with pytest.raises(ValueError, match="do not match"):
        S.step_scan(torch.zeros(2, 5, 3, 1), torch.zeros(2, 4, 3))
    x = torch.full((1, 200, 1, 1), 1e30)
    y = S.step_scan(x, torch.zeros(1, 200, 1), causal=False)  # no decay at all: sums only
    assert torch.isfinite(y).all()


def test_dispatch_takes_the_step_form_at_the_patch_shape_only():
    assert S.use_step_scan(42, 896 * 4 * 16)  # gla at the patch encoder's shape
    assert not S.use_step_scan(4096, 896 * 4 * 16)  # long: the chunked forms
    assert not S.use_step_scan(42, 16)  # tiny steps: per-op overhead would dominate


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("groups", ["head", "key"])
def test_gla_scan_matches_the_chunked_form(causal, groups):
    gen = torch.Generator().manual_seed(2)
    q, k = (torch.rand(2, 3, 11, 4, dtype=f64, generator=gen, requires_grad=True) for _ in range(2))
    v = torch.randn(2, 3, 11, 5, dtype=f64, generator=gen, requires_grad=True)
    la = (-2 * torch.rand(2, 3, 11, 1 if groups == "head" else 4, dtype=f64, generator=gen)).requires_grad_()
    fast = gla_scan(q, k, v, la, causal)
    chunk = 8
    ref, _ = gla_chunked(q, k, v, la, chunk=chunk)
    if not causal:
        ref = ref + reverse_exclusive(gla_chunked, q, k, v, la, chunk=chunk, inclusive=False)
    torch.testing.assert_close(fast, ref, rtol=1e-10, atol=1e-10)
    if causal:
        torch.testing.assert_close(fast, gla_reference(q, k, v, la), rtol=1e-10, atol=1e-10)
    g = torch.randn(fast.shape, dtype=f64, generator=gen)
    ins = (q, k, v, la)
    for a, b in zip(torch.autograd.grad(fast, ins, g), torch.autograd.grad(ref, ins, g)):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


ROUTED = [
    ("gla", {}), ("gla", {"decay": "head"}), ("fem-gla", {}), ("fem-gla", {"decay": "key"}),
    ("fem-ssm", {}), ("fem-aft", {}),
]


@pytest.fixture
def step_form_everywhere(monkeypatch):
    monkeypatch.setattr(S, "STEP_SCAN_MIN_STEP", 1)


@pytest.mark.usefixtures("step_form_everywhere")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name,opts", ROUTED, ids=[f"{n}-{o.get('decay', '')}" for n, o in ROUTED])
def test_mixers_on_the_step_form_match_their_reference_float64(name, opts, causal):
    torch.manual_seed(3)
    m = tsmix.build_mixer(name, 16, heads=4, causal=causal, **opts).double()
    with torch.no_grad():  # move every parameter off its init so no term is trivially zero
        for p in m.parameters():
            p.add_(0.1 * torch.randn_like(p))
    x = torch.randn(3, 10, 16, dtype=f64, requires_grad=True)
    y, r = m(x), m.reference(x)
    torch.testing.assert_close(y, r, rtol=1e-8, atol=1e-9)
    g = torch.randn_like(y)
    ins = (x, *m.parameters())
    gy = torch.autograd.grad(y, ins, g, allow_unused=True)
    gr = torch.autograd.grad(r, ins, g, allow_unused=True)
    for a, b in zip(gy, gr):
        if a is None or b is None:
            assert a is None and b is None or (a if b is None else b).abs().max() == 0
            continue
        torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-8)


@pytest.mark.usefixtures("step_form_everywhere")
@pytest.mark.parametrize("name,opts", ROUTED, ids=[f"{n}-{o.get('decay', '')}" for n, o in ROUTED])
def test_mixers_on_the_step_form_stay_finite_and_causal(name, opts):
    torch.manual_seed(4)
    m = tsmix.build_mixer(name, 16, heads=4, causal=True, **opts)
    x = (1e4 * torch.randn(2, 12, 16)).requires_grad_(True)
    y = m(x)
    y.square().mean().backward()
    assert torch.isfinite(y).all() and torch.isfinite(x.grad).all()
    x2 = x.detach().clone()
    x2[:, 8:] = 1e6  # a huge future must not move the past
    torch.testing.assert_close(m(x2)[:, :8], y[:, :8].detach(), rtol=0, atol=0)
