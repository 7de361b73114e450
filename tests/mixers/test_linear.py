"""linear and gla: chunked parallel form == recurrent (streaming) form == plain reference."""

from __future__ import annotations

import pytest
import torch

import tsmix

DIM, HEADS = 16, 2
f64 = torch.float64


def make(name: str, causal: bool, dtype=f64, seed: int = 0, **opts) -> torch.nn.Module:
    torch.manual_seed(seed)
    return tsmix.build_mixer(name, DIM, heads=HEADS, causal=causal, **opts).to(dtype).eval()


def _x(n: int, seed: int = 0, dtype=f64, scale: float = 1.0) -> torch.Tensor:
    return scale * torch.randn(2, n, DIM, generator=torch.Generator().manual_seed(seed), dtype=dtype)


VARIANTS = [("linear", {}), ("gla", {}), ("gla", {"decay": "head"})]


@pytest.mark.parametrize("name,opts", VARIANTS, ids=["linear", "gla-key", "gla-head"])
@pytest.mark.parametrize("causal", [True, False])
def test_chunked_equals_reference_across_chunks(name, opts, causal, same_map):
    """Small chunks force several chunks and the recursive inter-chunk scan (N = 37)."""
    x = _x(37, 1).requires_grad_(True)
    m = make(name, causal, chunk=4, **opts)
    same_map(m(x), m.reference(x), [x, *m.parameters()])


@pytest.mark.parametrize("name,opts", VARIANTS, ids=["linear", "gla-key", "gla-head"])
def test_chunk_size_does_not_change_the_math(name, opts):
    x = _x(50, 2)
    chunks = (2, 3, 5, 8) if opts.get("decay", "key") == "key" and name == "gla" else (2, 5, 16, 64)
    outs = [make(name, True, chunk=c, **opts)(x) for c in chunks]
    for o in outs[1:]:
        torch.testing.assert_close(o, outs[0], rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("name,opts", VARIANTS, ids=["linear", "gla-key", "gla-head"])
def test_streaming_equals_parallel(name, opts):
    m = make(name, True, chunk=4, **opts)
    x = _x(29, 3)
    torch.testing.assert_close(m.recurrent(x), m(x), rtol=1e-11, atol=1e-11)
    # step-by-step with an explicit state, float32
    m32 = make(name, True, torch.float32, chunk=8, **opts)
    x32 = _x(40, 4, torch.float32)
    state, ys = None, []
    for t in range(x32.shape[1]):
        y, state = m32.step(x32[:, t], state)
        ys.append(y)
    torch.testing.assert_close(torch.stack(ys, 1), m32(x32), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["linear", "gla"])
def test_step_refuses_bidirectional(name):
    m = make(name, False)
    with pytest.raises(tsmix.TsmixError, match="causal=True"):
        m.step(torch.randn(2, DIM, dtype=f64))


@pytest.mark.parametrize("name", ["linear", "gla"])
def test_bidirectional_reads_the_future_and_causal_does_not(name):
    x = _x(12, 5)
    x2 = x.clone()
    x2[:, 8:] += 1.0
    bi, ca = make(name, False), make(name, True)
    assert (bi(x)[:, :8] - bi(x2)[:, :8]).abs().max() > 1e-6
    assert torch.equal(ca(x)[:, :8], ca(x2)[:, :8])


def test_gla_long_sequence_float32_matches_float64():
    """2,000 steps, trained-like fast decays: the fp32 chunked form stays at fp32 accuracy."""
    m = make("gla", True, torch.float32, gate_tau=1.0)
    x = _x(2000, 6, torch.float32)
    y = m(x).double()
    r = make("gla", True, f64, gate_tau=1.0)(x.double())
    torch.testing.assert_close(y, r, rtol=2e-4, atol=2e-4)


def test_options_are_validated():
    with pytest.raises(tsmix.TsmixError, match="feature"):
        tsmix.build_mixer("linear", DIM, heads=HEADS, feature="relu")
    for chunk in (1, 16):
        with pytest.raises(tsmix.TsmixError, match="chunk"):
            tsmix.build_mixer("gla", DIM, heads=HEADS, chunk=chunk)
    with pytest.raises(tsmix.TsmixError, match="decay"):
        tsmix.build_mixer("gla", DIM, heads=HEADS, decay="channel")
    with pytest.raises(tsmix.TsmixError, match="divisible"):
        tsmix.build_mixer("gla", 18, heads=4)


@pytest.mark.parametrize("kind", ["elu", "softplus"])
def test_fast_feature_map_equals_plain(kind):
    """feature_map_fast (linear's forward) == feature_map (its reference): values and gradients,
    across both branches, the kink at 0 and large magnitudes."""
    from tsmix.mixers.linear import feature_map, feature_map_fast

    edges = torch.tensor([0.0, -0.0, -50.0, 50.0, -1e3, 1e3], dtype=f64)
    z = torch.cat([torch.randn(200, dtype=f64) * 3, edges])
    z1, z2 = z.clone().requires_grad_(True), z.clone().requires_grad_(True)
    y1, y2 = feature_map_fast(z1, kind), feature_map(z2, kind)
    torch.testing.assert_close(y1, y2, rtol=1e-15, atol=0.0)
    w = torch.randn_like(y1)
    (g1,), (g2,) = torch.autograd.grad((y1 * w).sum(), [z1]), torch.autograd.grad((y2 * w).sum(), [z2])
    torch.testing.assert_close(g1, g2, rtol=1e-15, atol=0.0)


@pytest.mark.parametrize("causal", [True, False])
def test_linear_fast_forward_at_the_variate_shape(causal, same_map):
    """D=128, 8 heads (head dim 16), N=21: the fast forward (features on the contiguous projection,
    normalizer folded into the state) == the plain quadratic reference, float64, with gradients."""
    torch.manual_seed(0)
    m = tsmix.build_mixer("linear", 128, heads=8, causal=causal).double()
    x = torch.randn(2, 21, 128, dtype=f64, requires_grad=True)
    same_map(m(x), m.reference(x), [x, *m.parameters()])


@pytest.mark.parametrize("n,order", [(7, "scores"), (16, "scores"), (17, "state"), (21, "state")])
def test_bidirectional_linear_reads_in_the_cheaper_order(n, order, same_map, monkeypatch):
    """Head dim 16: up to 16 tokens the bidirectional read goes through the (N, N) scores, beyond
    through the (Dh, Dh + 1) state; either way the values and gradients are the reference's
    (float64), and the other order gives the same read."""
    from tsmix.mixers.linear import LinearAttention

    torch.manual_seed(0)
    m = tsmix.build_mixer("linear", 128, heads=8, causal=False).double()
    x = torch.randn(2, n, 128, dtype=f64, requires_grad=True)
    taken = []
    for name in ("_read_by_scores", "_read_by_state"):
        real = getattr(LinearAttention, name)
        monkeypatch.setattr(LinearAttention, name,
                            staticmethod(lambda *a, _r=real, _n=name: taken.append(_n) or _r(*a)))
    y = m(x)
    assert taken == [f"_read_by_{order}"]
    same_map(y, m.reference(x), [x, *m.parameters()])
    q, k, v = m._qkv_fast(x.detach())
    by_scores, by_state = LinearAttention._read_by_scores(q, k, v), LinearAttention._read_by_state(q, k, v)
    torch.testing.assert_close(by_scores, by_state, rtol=1e-12, atol=1e-12)
