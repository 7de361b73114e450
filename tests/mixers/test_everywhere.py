"""Every registered mixer, present and future, trains inside every pipeline that takes one:
one optimizer step (forward, backward, step; finite loss, gradients and weights, and the
weights moved) of the patch encoder, the variate encoder and, for causal-capable
mixers, the character language model. Tiny sizes: the point is the wiring, not the fit."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import tsmix
from tsmix.forecasting import ITransformerConfig, PatchEncoder, PatchTSTConfig, VariateEncoder
from tsmix.models.lm.model import CharLM, LMConfig

MIXERS = tsmix.available_mixers()
CAUSAL = [n for n in MIXERS if tsmix.mixer_capabilities(n).causal]
ENCODER_MIXERS = [n for n in MIXERS if tsmix.mixer_capabilities(n).bidirectional]  # encoders see all
DIM, HEADS = 8, 2
LOOKBACK, HORIZON, CHANNELS = 24, 6, 3


def _one_step(model: nn.Module, loss_fn) -> float:
    """Adam step on ``loss_fn(model)``; checks the loss, the gradients and that weights moved."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    before = [p.detach().clone() for p in model.parameters()]
    loss = loss_fn(model)
    loss.backward()
    for name, p in model.named_parameters():
        if p.grad is not None:
            assert torch.isfinite(p.grad).all(), f"non-finite gradient of {name}"
    opt.step()
    moved = [not torch.equal(b, p) for b, p in zip(before, model.parameters())]
    assert any(moved), "no parameter changed"
    assert all(torch.isfinite(p).all() for p in model.parameters())
    return float(loss.detach())


def _forecast_loss(x: torch.Tensor, y: torch.Tensor):
    return lambda model: torch.nn.functional.mse_loss(model(x), y)


def _windows(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(4, LOOKBACK, CHANNELS, generator=gen), torch.randn(4, HORIZON, CHANNELS, generator=gen)


@pytest.mark.parametrize("name", ENCODER_MIXERS)
def test_patch_encoder_trains_one_step(name):
    torch.manual_seed(0)
    cfg = PatchTSTConfig(
        lookback=LOOKBACK, horizon=HORIZON, mixer=name, d_model=DIM, heads=HEADS, layers=1, d_ff=16,
        dropout=0.1, patch_len=8, stride=4,
    )
    model = PatchEncoder(cfg, CHANNELS).train()
    assert type(model.blocks[0].mixer) is tsmix.mixer_spec(name).cls
    assert math.isfinite(_one_step(model, _forecast_loss(*_windows())))


@pytest.mark.parametrize("name", ENCODER_MIXERS)
def test_variate_encoder_trains_one_step(name):
    torch.manual_seed(0)
    cfg = ITransformerConfig(
        lookback=LOOKBACK, horizon=HORIZON, mixer=name, d_model=DIM, heads=HEADS, layers=1, d_ff=16,
        dropout=0.1,
    )
    model = VariateEncoder(cfg, CHANNELS).train()
    assert type(model.blocks[0].mixer) is tsmix.mixer_spec(name).cls
    assert math.isfinite(_one_step(model, _forecast_loss(*_windows(1))))


@pytest.mark.parametrize("name", CAUSAL)
def test_char_lm_trains_one_step(name):
    torch.manual_seed(0)
    model = CharLM(LMConfig(mixer=name, vocab_size=11, block_size=12, dim=DIM, heads=HEADS, layers=1)).train()
    idx = torch.randint(0, 11, (3, 12), generator=torch.Generator().manual_seed(2))

    def loss(m: nn.Module) -> torch.Tensor:
        return m(idx[:, :-1], idx[:, 1:])[1]

    first = _one_step(model, loss)
    assert first == pytest.approx(math.log(11), rel=0.2)  # near-uniform at init: wiring, not luck
