"""Covariates reach any registered model through the route its registration declares (never its name)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

from tsmix.forecasting import ITransformerConfig, ModelNeeds, VariateEncoder, model_spec
from tsmix.forecasting.covariate_models import (
    CovariateLayout,
    CovariateModel,
    build_covariate_model,
    variate_kinds,
)
from tsmix.forecasting.panel_fit import PanelForecaster
from tsmix.forecasting.registry import register_model, unregister_model

L, H = 24, 8
VARIATES = "test-variate-tokens"


@pytest.fixture
def variate_model():
    """A plugin model that declares it takes hist/futr covariates as variates (iTransformer's encoder)."""

    def build(cfg: ITransformerConfig, channels: int) -> VariateEncoder:
        return VariateEncoder(cfg, channels)

    register_model(VARIATES, config=ITransformerConfig,
                   needs=ModelNeeds(covariates=("hist_exog", "futr_exog", "static")))(build)
    yield VARIATES
    unregister_model(VARIATES)


def promo_panel(n_series: int = 4, length: int = 480, seed: int = 0) -> pd.DataFrame:
    """y = daily wave + 2 * promo + noise, promo a coin flip per step known ahead: the future of y
    depends on the future covariate, which no history can predict."""
    rng = np.random.default_rng(seed)
    ds = pd.date_range("2021-01-01", periods=length, freq="h")
    parts = []
    for k in range(n_series):
        promo = (rng.random(length) < 0.3).astype(np.float64)
        wave = 0.5 * np.sin(2 * np.pi * np.arange(length) / 24)
        y = 10 * k + wave + 2 * promo + 0.1 * rng.standard_normal(length)
        parts.append(pd.DataFrame({"unique_id": f"u{k}", "ds": ds, "y": y, "promo": promo}))
    return pd.concat(parts, ignore_index=True)


HP = dict(lookback=L, horizon=H, epochs=4, batch_size=32, lr=2e-2, lr_schedule="constant", patience=4,
          val_size=48, test_size=64, progress=False, seed=11)


@pytest.mark.parametrize("model, extra", [
    ("dlinear", {}),
    ("patchtst", dict(d_model=16, heads=2, layers=1, d_ff=32, patch_len=8, stride=4, dropout=0.0, lr=5e-3)),
])
def test_future_covariate_halves_the_error(model, extra):
    df = promo_panel()
    without = PanelForecaster(model, **{**HP, **extra}).fit(df.drop(columns="promo")).metrics_["mse"]
    with_ = PanelForecaster(model, futr_exog=["promo"], **{**HP, **extra}).fit(df).metrics_["mse"]
    assert with_ <= 0.5 * without, (with_, without)


def test_variate_route_feeds_covariates_as_tokens(variate_model):
    df = promo_panel(n_series=3, length=300)
    f = PanelForecaster(variate_model, d_model=16, heads=2, layers=1, d_ff=32, dropout=0.0,
                        futr_exog=["promo"], **{**HP, "epochs": 1, "lr": 1e-3})
    f.fit(df)
    m = f.model_
    assert m.layout.as_variates == ("hist_exog", "futr_exog") and m.layout.channels == 2
    assert m.futr_proj is None and m.hist_proj is None  # no linear path for a kind taken as variates
    assert m.base.base.embed.in_features == L and m.base.revin is not None
    # the token of a future covariate holds its horizon: changing promo after the origin moves the forecast
    b = f._fitted.prepared.test.gather(torch.arange(4))
    futr = b.futr.clone()
    futr[:, L:] += 3.0
    with torch.no_grad():
        a0 = m(b.x, b.hist, b.futr, b.static, b.static_cat)
        a1 = m(b.x, b.hist, futr, b.static, b.static_cat)
    assert a0.shape == (4, H, 1) and not torch.allclose(a0, a1)


def test_route_comes_from_the_registration_not_the_name(variate_model):
    assert variate_kinds(model_spec("dlinear")) == ()
    assert variate_kinds(model_spec("patchtst")) == ()
    assert variate_kinds(model_spec(variate_model)) == ("hist_exog", "futr_exog")  # static never a variate


def test_linear_path_starts_as_the_base_model_and_uses_each_kind():
    from tsmix.forecasting.config import ForecasterConfig

    cfg = ForecasterConfig(model="dlinear", lookback=L, horizon=H).resolved()
    lay = CovariateLayout(lookback=L, horizon=H, hist=2, futr=3, static=1, cardinalities=(4, 2))
    torch.manual_seed(0)
    m = build_covariate_model(cfg, lay)
    assert isinstance(m, CovariateModel) and lay.channels == 1
    B = 5
    x, hist, futr = torch.randn(B, L, 1), torch.randn(B, L, 2), torch.randn(B, L + H, 3)
    static, cat = torch.randn(B, 1), torch.tensor([[0, 1], [3, 0], [2, 1], [1, 1], [0, 0]])
    out = m(x, hist, futr, static, cat)
    assert torch.equal(out, m.base(x))  # zero-initialised maps: the wrapper starts as its base model
    for proj in (m.futr_proj, m.hist_proj, m.static_proj):
        torch.nn.init.normal_(proj.weight)
    out = m(x, hist, futr, static, cat)
    for name, t in (("futr", futr), ("hist", hist), ("static", static)):
        moved = dict(hist=hist, futr=futr, static=static)
        moved[name] = t + 1.0
        assert not torch.allclose(m(x, moved["hist"], moved["futr"], moved["static"], cat), out), name
    lookback_only = futr.clone()
    lookback_only[:, :L] += 5.0  # the linear path reads the future covariates' horizon part only
    assert torch.equal(m(x, hist, lookback_only, static, cat), out)
    assert CovariateLayout.from_dict(lay.to_dict()) == lay
    assert dataclasses.replace(lay, as_variates=("futr_exog",)).channels == 4
