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

