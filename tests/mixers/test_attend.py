"""tsmix.ops.attention.attend: the plain small-head path agrees with SDPA and the reference."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tsmix.ops import attention as A


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(3, 2, 9, 4), (2, 9, 4), (1, 4, 130, 4), (2, 2, 9, 32)])
def test_attend_matches_sdpa_and_reference_float64(causal, shape):
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(shape, dtype=torch.float64, generator=gen, requires_grad=True) for _ in range(2))
    v = torch.randn(*shape[:-1], 5, dtype=torch.float64, generator=gen, requires_grad=True)
    y = A.attend(q, k, v, causal)
    torch.testing.assert_close(y, F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    r = A.attention_reference(q, k, v, causal)
    torch.testing.assert_close(y, r)
    g = torch.randn(y.shape, dtype=torch.float64, generator=gen)
    for a, b in zip(torch.autograd.grad(y, (q, k, v), g), torch.autograd.grad(r, (q, k, v), g)):
        torch.testing.assert_close(a, b)


def test_attend_small_path_is_taken_for_small_heads_only(spy):
    calls = spy(A.F, "scaled_dot_product_attention")
    x = torch.randn(2, 2, 8, 4)
    A.attend(x, x, x, False)
    assert not calls  # head dim 4, 8 tokens: the plain path
    y = torch.randn(2, 2, 8, 64)
    A.attend(y, y, y, False)
    A.attend(x, x, x, False, dropout_p=0.1)  # dropout stays with SDPA
    assert len(calls) == 2


def test_attention_weights_t_is_the_transposed_softmax_float64():
    """``attention_weights_t`` on channel-major blocks equals the plain weights, transposed."""
    gen = torch.Generator().manual_seed(1)
    q, k = (torch.randn(6, 4, 11, dtype=torch.float64, generator=gen) for _ in range(2))  # (M, d, N)
    for causal in (False, True):
        pt = A.attention_weights_t(q, k, causal)
        p = torch.softmax(A.attention_logits(q.transpose(1, 2), k.transpose(1, 2), causal), dim=-1)
        torch.testing.assert_close(pt, p.transpose(1, 2), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(pt.sum(1), torch.ones(6, 11, dtype=torch.float64))


@pytest.mark.parametrize("blocks", ["one", "many"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [1, 2, 11])
def test_attend_t_equals_the_plain_read_float64(n, causal, blocks, monkeypatch):
    """``attend_t`` (blocked over the batch, hand-written backward) == ``v @ attention_weights_t``
    by autograd: outputs and gradients of q, k, v; with value width != head width, and with the
    batch of 7 blocks cut into blocks of 3 (a ragged last)."""
    if blocks == "many":
        monkeypatch.setattr(A, "SCORE_BLOCK_ELEMS", 3 * n * n)
    gen = torch.Generator().manual_seed(n)
    q, k = (torch.randn(7, 4, n, dtype=torch.float64, generator=gen, requires_grad=True) for _ in range(2))
    v = torch.randn(7, 5, n, dtype=torch.float64, generator=gen, requires_grad=True)
    y, r = A.attend_t(q, k, v, causal), torch.bmm(v, A.attention_weights_t(q, k, causal))
    torch.testing.assert_close(y, r, rtol=1e-12, atol=1e-12)
    w = torch.randn_like(y)
    grads = [torch.autograd.grad((t * w).sum(), (q, k, v)) for t in (y, r)]
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_attend_t_traced_by_torch_compile_is_the_plain_read_float64(monkeypatch):
    """Under ``torch.compile`` ``attend_t`` is one bmm by the transposed weights (not the blocked
    custom Function, which a trace unrolls block by block), equal to eager in value and gradient."""
    monkeypatch.setattr(A, "SCORE_BLOCK_ELEMS", 3 * 9 * 9)  # eager: 3 blocks
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    gen = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(7, 4, 9, dtype=torch.float64, generator=gen, requires_grad=True) for _ in range(3))
    torch._dynamo.reset()
    y = torch.compile(A.attend_t, backend=backend, fullgraph=True)(q, k, v, False)
    targets = [n.target for g in graphs for n in g.graph.nodes if n.op == "call_function"]
    assert targets.count(torch.bmm) == 1 and not any("autograd_function" in str(t) for t in targets)
    r = A.attend_t(q, k, v, False)
    torch.testing.assert_close(y, r, rtol=1e-12, atol=1e-12)
    w = torch.randn_like(y)
    for a, b in zip(*(torch.autograd.grad((t * w).sum(), (q, k, v)) for t in (y, r))):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    torch._dynamo.reset()


@pytest.mark.parametrize("causal", [False, True])
def test_attend_t_under_bf16_autocast_runs_in_float32(causal):
    """Under CPU autocast (the engine's bf16-mixed, backward inside the region too) ``attend_t``
    takes bf16 inputs, computes in float32 and hands back bf16: equal to the float32 read of the
    same bf16 values (and the same bf16 output gradient), outputs and gradients, up to the final
    cast."""
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(5, 4, 9, generator=gen).bfloat16().requires_grad_() for _ in range(3))
    w = torch.randn(5, 4, 9, generator=gen)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = A.attend_t(q, k, v, causal)
        gy = torch.autograd.grad((y.float() * w).sum(), (q, k, v))
    assert y.dtype == torch.bfloat16 and all(g.dtype == torch.bfloat16 for g in gy)
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    r = A.attend_t(q32, k32, v32, causal)
    gr = torch.autograd.grad((r * w.bfloat16().float()).sum(), (q32, k32, v32))  # y's grad is bf16
    torch.testing.assert_close(y, r.bfloat16(), rtol=0, atol=0)
    for a, b in zip(gy, gr):
        torch.testing.assert_close(a, b.bfloat16(), rtol=0, atol=0)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [1, 7, 42])
@pytest.mark.parametrize("bias", [True, False])
def test_softmax_channel_major_path_taken_and_equals_reference(causal, n, bias, spy, same_map):
    """At the encoders' kind of shape (CPU, heads of 4, short sequences) the softmax mixer takes
    its channel-major path, and it equals the plain reference in float64: outputs and gradients."""
    import tsmix

    torch.manual_seed(2)
    m = tsmix.build_mixer("softmax", 16, heads=4, causal=causal, bias=bias).double()
    calls = spy(type(m), "_forward_t")
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(3, n, 16, dtype=torch.float64, generator=gen, requires_grad=True)
    y, r = m(x), m.reference(x)
    assert calls, "the channel-major path was not taken"
    same_map(y, r, [x, *m.parameters()])


def test_softmax_channel_major_path_matches_the_token_major_one_in_float32(monkeypatch):
    """Same maths as the token-major small-head path: at the patch encoder's shape the two differ
    only in float32 rounding, outputs and input gradients within 1e-5."""
    import tsmix

    torch.manual_seed(0)
    m = tsmix.build_mixer("softmax", 16, heads=4, causal=False)
    x = torch.randn(64, 42, 16, requires_grad=True)
    y = m(x)
    gy = torch.autograd.grad(y.square().sum(), x)[0]
    monkeypatch.setattr(type(m), "_forward_t", None)  # a call now would fail: the token-major path must run
    monkeypatch.setattr("tsmix.mixers.softmax.small_attention", lambda *a: False)
    z = m(x)
    gz = torch.autograd.grad(z.square().sum(), x)[0]
    torch.testing.assert_close(y, z, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gy, gz, rtol=1e-5, atol=1e-5)


def test_softmax_channel_major_path_only_where_the_small_form_applies(spy):
    """Wide heads, long sequences and attention dropout in training go to the token-major path."""
    import tsmix

    m = tsmix.build_mixer("softmax", 16, heads=4, causal=False, dropout=0.1)
    calls = spy(type(m), "_forward_t")
    m.train()
    m(torch.randn(2, 7, 16))  # dropout while training: SDPA
    assert not calls
    m.eval()
    m(torch.randn(2, 7, 16))  # no dropout at eval: the small form
    assert len(calls) == 1
    m(torch.randn(1, A.SMALL_SEQUENCE + 1, 16))  # long sequence
    wide = tsmix.build_mixer("softmax", 2 * (A.SMALL_HEAD_DIM + 1), heads=2, causal=False)
    wide(torch.randn(2, 7, 2 * (A.SMALL_HEAD_DIM + 1)))  # wide heads
    assert len(calls) == 1


def test_score_blocks_cover_the_batch_once(monkeypatch):
    """On CPU, blocks of about SCORE_BLOCK_ELEMS scores tile the batch in order, the last one ragged;
    on any other device (the NRGPT reads run there too) the whole batch is one block."""
    cpu = torch.device("cpu")
    monkeypatch.setattr(A, "SCORE_BLOCK_ELEMS", 3 * 16)
    blocks = A.score_blocks(10, 4, cpu)
    assert blocks == [slice(0, 3), slice(3, 6), slice(6, 9), slice(9, 12)]
    assert list(range(10)) == [i for b in blocks for i in range(10)[b]]
    monkeypatch.setattr(A, "SCORE_BLOCK_ELEMS", 1)
    assert A.score_blocks(10, 4, cpu) == [slice(i, i + 1) for i in range(10)]  # never empty blocks
    assert A.score_blocks(10, 4, torch.device("meta")) == [slice(0, 10)]
