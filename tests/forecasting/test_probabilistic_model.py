"""ProbabilisticModel over the real tsmix networks: exact point equivalence with the encoders' own
RevIN, head shapes for every base, and small end-to-end trainings whose intervals must cover."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tsmix.datasets.windows import WindowSet
from tsmix.errors import TsmixError
from tsmix.forecasting.dlinear import DLinear
from tsmix.forecasting.probabilistic import (
    HeadConfig,
    ProbabilisticModel,
    ScoreSums,
    build_with_head,
    collect_residuals,
    fit_conformal,
    forecast_bands,
    lift_state_dict,
    make_head,
)
from tsmix.forecasting.registry import model_spec

L, H, C = 32, 8, 3
ARCH = dict(lookback=L, horizon=H, mixer="softmax", mixer_options={}, d_model=16, heads=2, layers=2, d_ff=32,
            dropout=0.0, patch_len=8, stride=4, kernel_size=5)


def _values(**kw) -> dict:
    return {**ARCH, "revin": True, "revin_affine": False, **kw}


def _bare(model: str, **kw):
    """The registered network itself, as build_model makes it (its own RevIN on)."""
    spec = model_spec(model)
    return spec.build(spec.make_config(_values(**kw)), C)


@pytest.mark.parametrize("center", ["mean", "last"])
@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("model", ["patchtst", "itransformer"])
def test_mse_wrapper_reproduces_encoder_with_its_own_revin(model, affine, center):
    torch.manual_seed(0)
    ref = _bare(model, revin_affine=affine, revin_center=center)
    torch.manual_seed(0)
    wrapped = build_with_head(model_spec(model), _values(revin_affine=affine, revin_center=center), C,
                              HeadConfig("mse"))
    assert wrapped.revin is not None and wrapped.base.revin is None  # RevIN lifted out of the encoder
    # the same seed builds the same weights: the wrapper consumes the RNG in the encoder's order
    lifted = lift_state_dict(ref.state_dict())
    assert lifted.keys() == wrapped.state_dict().keys()
    assert all(torch.equal(v, lifted[k]) for k, v in wrapped.state_dict().items())
    if affine:  # a trained affine RevIN, one weight negative
        with torch.no_grad():
            ref.revin.weight.copy_(torch.tensor([1.7, -0.4, 0.9]))
            ref.revin.bias.copy_(torch.tensor([0.3, -1.1, 0.05]))
        wrapped.load_state_dict(lift_state_dict(ref.state_dict()))
    x = 2.0 + 4.0 * torch.randn(5, L, C, generator=torch.Generator().manual_seed(1))
    y = torch.randn(5, H, C, generator=torch.Generator().manual_seed(2))
    for train in (False, True):  # eval, and train mode (BatchNorm batch statistics)
        ref.train(train), wrapped.train(train)
        assert torch.equal(wrapped(x), ref(x))
    # one training step gives the same gradients
    ref.zero_grad(), wrapped.zero_grad()
    F.mse_loss(ref(x), y).backward()
    wrapped.head.loss(wrapped(x), y).backward()
    grads = lift_state_dict({n: p.grad for n, p in ref.named_parameters()})
    for n, p in wrapped.named_parameters():
        assert torch.equal(p.grad, grads[n]), n


def test_wrapper_reproduces_dlinear_which_has_no_revin():
    torch.manual_seed(3)
    ref = _bare("dlinear")
    torch.manual_seed(3)
    wrapped = build_with_head(model_spec("dlinear"), _values(), C, HeadConfig("mae"))
    assert wrapped.revin is None  # DLinear never normalized its windows: the wrapper does not either
    x = torch.randn(4, L, C)
    assert torch.equal(wrapped(x), ref(x)) and torch.equal(wrapped.point(x), ref(x))


@pytest.mark.parametrize("loss", ["quantile", "normal", "studentt"])
@pytest.mark.parametrize("model", ["patchtst", "itransformer", "dlinear"])
def test_heads_over_every_base(model, loss):
    head = HeadConfig(loss, level=(50, 80, 95))
    torch.manual_seed(4)
    wrapped = build_with_head(model_spec(model), _values(revin_affine=True), C, head)
    k = wrapped.head.k
    x = 10.0 + 3.0 * torch.randn(6, L, C)
    out = wrapped(x)
    assert out.shape == (6, H, k, C) and wrapped.point(x).shape == (6, H, C)
    if loss == "quantile":
        assert (out.diff(dim=-2) >= 0).all()  # random weights, affine RevIN: still no crossing
    method, bands = forecast_bands(wrapped.head, out.detach(), [50, 80, 95])
    assert method == loss
    assert all((bands[a][0] >= bands[b][0]).all() and (bands[a][1] <= bands[b][1]).all()
               for a, b in ((50, 80), (80, 95)))  # nested intervals
    wrapped.head.loss(out, torch.randn(6, H, C)).backward()


def test_base_with_wrong_output_length_is_named():
    model = ProbabilisticModel(DLinear(C, L, H), make_head(HeadConfig("normal")), C, H)
    with pytest.raises(TsmixError, match="returned 8 steps, expected horizon 8 x 2"):
        model(torch.randn(2, L, C))


# --------------------------------------------------------------------------- end-to-end training
LB, HZ, CH = 48, 12, 2
NOISE = 0.4


def _splits() -> tuple[WindowSet, WindowSet, WindowSet]:
    """Two daily-periodic channels + i.i.d. N(0, 0.4^2) noise; train / val / test row ranges."""
    g = np.random.default_rng(0)
    t = np.arange(2400)[:, None]
    clean = np.sin(2 * math.pi * t / 24 + np.array([0.0, 1.3])) * np.array([1.0, 2.0])
    data = torch.tensor(clean + NOISE * g.standard_normal((2400, CH)), dtype=torch.float32)
    return (WindowSet(data, LB, HZ, "M", start=0, end=1600),
            WindowSet(data, LB, HZ, "M", start=1600 - LB, end=2000),
            WindowSet(data, LB, HZ, "M", start=2000 - LB, end=2400))


def _fit(head: HeadConfig, train: WindowSet, steps: int = 300) -> ProbabilisticModel:
    torch.manual_seed(0)
    values = dict(lookback=LB, horizon=HZ, mixer="softmax", mixer_options={}, d_model=16, heads=2, layers=1,
                  d_ff=32, dropout=0.0, norm="layer", revin=True, revin_affine=False, patch_len=8, stride=8,
                  padding_patch="none")
    model = build_with_head(model_spec("patchtst"), values, CH, head)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    gen = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(steps):
        x, y = train.gather(torch.randint(len(train), (64,), generator=gen))
        loss = model.head.loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def _test_scores(model: ProbabilisticModel, test: WindowSet, calibration=None) -> dict:
    sums = ScoreSums([80.0])
    with torch.no_grad():
        for x, y in test.batches(256):
            out = model(x)
            _, bands = forecast_bands(model.head, out, [80.0], calibration)
            sums.update(y, model.head.point(out), bands, model.head.crps(out, y))
    return sums.metrics()


def test_quantile_model_intervals_cover_held_out_points():
    train, _, test = _splits()
    model = _fit(HeadConfig("quantile", level=(80,)), train)
    m = _test_scores(model, test)
    assert 0.70 <= m["coverage"]["80"] <= 0.90, m
    # the 80% band of N(0, 0.4^2) is 2 x 1.2816 x 0.4 = 1.03 wide: the model learnt the noise, not more
    assert 0.8 < m["width"]["80"] < 1.5, m


def test_conformal_intervals_of_an_mse_model_cover_held_out_points():
    train, val, test = _splits()
    model = _fit(HeadConfig("mse"), train)
    calibration = fit_conformal(collect_residuals(model.point, val, batch_size=128))
    assert calibration.n == len(val)
    m = _test_scores(model, test, calibration)
    assert 0.70 <= m["coverage"]["80"] <= 0.90, m
    # thinning keeps evenly spaced windows when the residuals would not fit the budget
    thin = collect_residuals(model.point, val, batch_size=128, max_values=100 * HZ * CH)
    assert thin.shape == (100, HZ, CH)
