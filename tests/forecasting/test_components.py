"""Building blocks: fast paths against their plain references (float64, outputs and gradients),
RevIN, the learning-rate schedules, and the encoders' shapes."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tsmix.errors import TsmixError
from tsmix.forecasting import ForecasterConfig, build_model
from tsmix.forecasting.dlinear import PerChannelLinear, moving_average, moving_average_reference
from tsmix.forecasting.dropout import FastDropout, dropout_with_mask, fast_dropout
from tsmix.forecasting.encoders import num_patches, patchify, patchify_reference
from tsmix.forecasting.revin import RevIN
from tsmix.forecasting.trainer import epoch_lr


def _check_same(fast, ref, *inputs):
    """Outputs and input gradients of two float64 functions agree (random upstream gradient)."""
    xs = [x.detach().clone().requires_grad_(True) for x in inputs]
    ys = [x.detach().clone().requires_grad_(True) for x in inputs]
    out_f, out_r = fast(*xs), ref(*ys)
    torch.testing.assert_close(out_f, out_r, rtol=1e-12, atol=1e-12)
    g = torch.randn_like(out_f)
    gf = torch.autograd.grad(out_f, xs, g)
    gr = torch.autograd.grad(out_r, ys, g)
    for a, b in zip(gf, gr):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("padding", ["end", "none"])
@pytest.mark.parametrize(("length", "patch", "stride"), [(48, 8, 4), (50, 16, 8), (17, 5, 3)])
def test_patchify_matches_reference(padding, length, patch, stride):
    z = torch.randn(3, 4, length, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    _check_same(lambda t: patchify(t, patch, stride, padding),
                lambda t: patchify_reference(t, patch, stride, padding), z)
    assert patchify(z, patch, stride, padding).shape[-2] == num_patches(length, patch, stride, padding)


def test_num_patches_official():
    assert num_patches(336, 16, 8, "end") == 42  # PatchTST paper: L=336, P=16, S=8 -> 42 patches


@pytest.mark.parametrize("kernel", [1, 5, 25])
def test_moving_average_matches_reference(kernel):
    x = torch.randn(2, 48, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    _check_same(lambda t: moving_average(t, kernel), lambda t: moving_average_reference(t, kernel), x)
    # edge replication: a constant series is its own trend
    c = torch.full((1, 30, 2), 3.5, dtype=torch.float64)
    torch.testing.assert_close(moving_average(c, kernel), c)


def test_per_channel_linear_matches_loop():
    torch.manual_seed(0)
    lin = PerChannelLinear(3, 10, 4).double()
    x = torch.randn(5, 3, 10, dtype=torch.float64)

    def ref(t):
        outs = [nn.functional.linear(t[:, c], lin.weight[c], lin.bias[c]) for c in range(3)]
        return torch.stack(outs, dim=1)

    _check_same(lin, ref, x)


def test_fast_dropout_matches_masked_reference():
    torch.manual_seed(0)
    p = 0.3
    x = torch.randn(200, 50, dtype=torch.float64).abs() + 0.1  # nonzero: the mask is readable from y
    xs = x.clone().requires_grad_(True)
    y = fast_dropout(xs, p)
    keep = y != 0
    torch.testing.assert_close(y, dropout_with_mask(x, keep, p), rtol=1e-15, atol=0)
    (gx,) = torch.autograd.grad(y.sum(), xs)
    torch.testing.assert_close(gx, keep.double() / (1 - p), rtol=1e-15, atol=0)
    # keep-rate 1 - p: 4-sigma band over 1e6 draws
    frac = (fast_dropout(torch.ones(1_000_000), p) != 0).double().mean().item()
    assert abs(frac - (1 - p)) < 4 * (p * (1 - p) / 1e6) ** 0.5
    odd = fast_dropout(torch.ones(3, 5, 7), 0.5)  # numel not a multiple of 4
    assert odd.shape == (3, 5, 7) and set(odd.unique().tolist()) <= {0.0, 2.0}
    m = FastDropout(p).eval()
    assert m(x) is x and fast_dropout(x, 0.0) is x


def test_encoders_swap_block_dropout_only():
    cfg = ForecasterConfig(model="patchtst", lookback=48, horizon=12, d_model=16, heads=2, layers=2, d_ff=32,
                           patch_len=8, stride=4, dropout=0.2).resolved()
    model = build_model(cfg, 3)
    kinds = {type(m) for name, m in model.named_modules() if ".mixer" not in name}
    assert nn.Dropout not in kinds and FastDropout in kinds


def test_revin_round_trip():
    torch.manual_seed(0)
    r = RevIN(3, affine=True).double()
    with torch.no_grad():
        r.weight.uniform_(0.5, 2.0)
        r.bias.normal_()
    x = torch.randn(4, 20, 3, dtype=torch.float64) * 5 + 2
    z, stats = r.norm(x)
    torch.testing.assert_close(r.denorm(z, stats), x, rtol=1e-9, atol=1e-9)
    plain, _ = RevIN(3).norm(x)
    torch.testing.assert_close(plain.mean(1), torch.zeros(4, 3, dtype=torch.float64), atol=1e-12, rtol=0)


def test_revin_last_centers_on_the_last_value_scales_by_the_window_std():
    """``center="last"`` (official PatchTST subtract_last): x minus its last value, over the same std."""
    x = torch.randn(4, 20, 3, dtype=torch.float64) * 5 + 2
    r = RevIN(3, affine=True, center="last").double()
    with torch.no_grad():
        r.weight.uniform_(0.5, 2.0)
        r.bias.normal_()
    z, (center, std) = r.norm(x)
    torch.testing.assert_close(center, x[:, -1:], rtol=0, atol=0)
    torch.testing.assert_close(std, RevIN(3).double().norm(x)[1][1], rtol=0, atol=0)
    # exact but for the denorm's eps^2 guard on the affine weight (~1e-10 relative)
    torch.testing.assert_close(r.denorm(z, (center, std)), x, rtol=1e-8, atol=1e-8)
    plain, _ = RevIN(3, center="last").norm(x)
    assert plain[:, -1].abs().max() == 0
    with pytest.raises(ValueError, match="center must be one of mean, last"):
        RevIN(3, center="median")
    with pytest.raises(TsmixError, match="revin_center must be one of mean, last"):
        ForecasterConfig(model="rlinear", lookback=48, horizon=12, revin_center="median").resolved()


@pytest.mark.parametrize("model", ["rlinear", "patchtst", "itransformer"])
def test_revin_center_reaches_every_models_revin(model):
    """The config's centre is what the (lifted) RevIN uses, for each model that normalizes."""
    cfg = ForecasterConfig(model=model, lookback=48, horizon=12, d_model=16, heads=2, layers=1, d_ff=32,
                           patch_len=8, stride=4, dropout=0.0, revin_center="last").resolved()
    net = build_model(cfg, 3)
    revins = [m for m in net.modules() if isinstance(m, RevIN)]
    assert [m.center for m in revins] == ["last"]


def test_epoch_lr_matches_official_rules():
    lr = 1e-2
    assert [epoch_lr("type1", lr, e) for e in range(4)] == [lr, lr, lr / 2, lr / 4]
    got = [epoch_lr("type3", lr, e, 1 / 25) for e in range(6)]
    assert got == pytest.approx([lr / 25, lr, lr, lr, lr * 0.9, lr * 0.81])
    assert [epoch_lr("constant", lr, e) for e in range(3)] == [lr, lr, lr]


@pytest.mark.parametrize("model", ["patchtst", "itransformer", "dlinear"])
@pytest.mark.parametrize("channels", [1, 7])
def test_model_shapes(model, channels):
    cfg = ForecasterConfig(model=model, lookback=48, horizon=12, d_model=16, heads=2, layers=1, d_ff=32,
                           patch_len=8, stride=4)
    m = build_model(cfg, channels).eval()
    y = m(torch.randn(5, 48, channels))
    assert y.shape == (5, 12, channels) and torch.isfinite(y).all()
