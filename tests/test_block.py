"""Block: pre/post-norm residual wiring around any mixer, norm and FFN choices."""

from __future__ import annotations

import pytest
import torch

import tsmix
from tsmix.block import NORMS, Block


class Zero(torch.nn.Module):
    def forward(self, x):
        return torch.zeros_like(x)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("prenorm", [True, False])
def test_block_shapes_every_norm(norm, prenorm):
    torch.manual_seed(0)
    blk = Block(8, tsmix.build_mixer("softmax", 8, heads=2), "gelu", norm, prenorm=prenorm)
    x = torch.randn(3, 5, 8)
    assert blk(x).shape == x.shape


def test_prenorm_block_is_identity_plus_updates():
    torch.manual_seed(0)
    blk = Block(8, Zero(), "none", "layer")
    x = torch.randn(2, 4, 8)
    torch.testing.assert_close(blk(x), x)  # zero mixer update and no FFN: residual only


def test_postnorm_wiring_matches_hand_computation():
    torch.manual_seed(0)
    mixer = tsmix.build_mixer("softmax", 8, heads=2)
    blk = Block(8, mixer, "relu", "layer", prenorm=False).eval()
    x = torch.randn(2, 4, 8)
    h = blk.norm1(x + mixer(x))
    expect = blk.norm2(h + blk.ffn(h))
    torch.testing.assert_close(blk(x), expect)


def test_swiglu_and_bad_choices():
    blk = Block(8, Zero(), "swiglu", "rms", ffn_hidden=12)
    assert blk(torch.randn(1, 3, 8)).shape == (1, 3, 8)
    with pytest.raises(tsmix.TsmixError, match="unknown norm"):
        Block(8, Zero(), "gelu", "groupnorm")
    with pytest.raises(tsmix.TsmixError, match="unknown ffn"):
        Block(8, Zero(), "tanh", "layer")



@pytest.mark.parametrize("kind", ["gelu", "relu", "swiglu"])
def test_ffn_token_blocks_equal_the_whole_batch_float64(kind, monkeypatch):
    """On CPU the feed-forward runs in token blocks of FFN_BLOCK_ELEMS hidden activations; it is
    position-wise, so blocks of 5 tokens (a ragged last) give the whole-batch values and gradients."""
    import tsmix.block as block

    torch.manual_seed(0)
    ffn = block.FFN(8, 12, kind).double()
    x = torch.randn(3, 7, 8, dtype=torch.float64, requires_grad=True)
    whole = ffn(x)  # 21 tokens x 12 hidden: below the default block, one piece
    monkeypatch.setattr(block, "FFN_BLOCK_ELEMS", 5 * ffn.up.out_features)
    calls = []
    real = block.FFN._ffn
    monkeypatch.setattr(block.FFN, "_ffn", lambda self, t: calls.append(t.shape[0]) or real(self, t))
    blocked = ffn(x)
    assert calls == [5, 5, 5, 5, 1]
    torch.testing.assert_close(blocked, whole, rtol=1e-14, atol=1e-14)
    w = torch.randn_like(whole)
    params = [x, *ffn.parameters()]
    grads = [torch.autograd.grad((y * w).sum(), params) for y in (blocked, whole)]
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fast", [True, False])
def test_ffn_token_blocks_draw_the_same_dropout_masks(fast, monkeypatch):
    """Training with dropout, the blocks draw their masks in token order from the one generator:
    at the same seed the blocked forward equals the whole-batch one bit for bit (FastDropout's
    16-bit draws and nn.Dropout's alike), so blocking leaves a seeded run's forward unchanged."""
    import tsmix.block as block
    from tsmix.forecasting.dropout import FastDropout

    torch.manual_seed(0)
    ffn = block.FFN(16, 128, "gelu", 0.3).train()
    if fast:
        ffn.drop = FastDropout(0.3)
    x = torch.randn(40, 42, 16)  # 1680 tokens: blocks of 512 tokens, a ragged last
    monkeypatch.setattr(block, "FFN_BLOCK_ELEMS", 512 * 128)
    torch.manual_seed(5)
    blocked = ffn(x)
    monkeypatch.setattr(block, "FFN_BLOCK_ELEMS", 1 << 40)
    torch.manual_seed(5)
    assert torch.equal(blocked, ffn(x))
