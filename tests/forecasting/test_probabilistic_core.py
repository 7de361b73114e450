"""tsmix.forecasting.probabilistic without training: specs, losses, scores, heads, conformal, frames."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from tsmix.errors import TsmixError
from tsmix.forecasting.probabilistic import (
    HeadConfig,
    NormalHead,
    PointHead,
    QuantileHead,
    ScoreSums,
    StudentTHead,
    WindowScale,
    coverage,
    crps_normal,
    crps_quantiles,
    crps_samples,
    fit_conformal,
    forecast_bands,
    forecast_quantiles,
    interval_width,
    long_frame,
    make_head,
    mean_pinball,
    pinball_loss,
    resolve_quantiles,
    wide_frame,
    window_scale,
)
from tsmix.forecasting.probabilistic.conformal import Calibration, min_windows
from tsmix.forecasting.probabilistic.spec import parse_floats
from tsmix.forecasting.revin import RevIN


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ----------------------------------------------------------------------------- specs and validation
def test_levels_become_sorted_quantiles_with_median():
    assert resolve_quantiles(None, [95, 80]) == (0.025, 0.1, 0.5, 0.9, 0.975)
    assert resolve_quantiles([0.2, 0.7], None) == (0.2, 0.5, 0.7)
    assert resolve_quantiles([0.1], [80]) == (0.1, 0.5, 0.9)  # the union, each once
    assert HeadConfig("quantile").trained_quantiles == (0.025, 0.1, 0.5, 0.9, 0.975)
    assert HeadConfig("mse").trained_quantiles is None
    assert parse_floats("80,95") == (80.0, 95.0) and parse_floats("none") is None


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(loss="quantile", quantiles=(0.0, 0.5)), "strictly between 0 and 1"),
    (dict(loss="quantile", quantiles=(0.5, 1.2)), "strictly between 0 and 1"),
    (dict(loss="quantile", quantiles=(0.1, 0.1)), "duplicated"),
    (dict(loss="quantile", quantiles=()), "must not be empty"),
    (dict(loss="quantile", level=(100,)), "between 0 and 100"),
    (dict(loss="normal", level=(0,)), "between 0 and 100"),
    (dict(loss="normal", level=(-5, 80)), "between 0 and 100"),
    (dict(loss="mse", level=(80, 80)), "duplicated"),
    (dict(loss="quantiles"), "unknown loss 'quantiles'"),
    (dict(loss="mse", quantiles=(0.1, 0.9)), "only apply to loss='quantile'"),
    (dict(loss="quantile", level=("eighty",)), "list of numbers"),
])
def test_bad_head_options_are_one_line_errors(kwargs, match):
    with pytest.raises(TsmixError, match=match) as info:
        HeadConfig(**kwargs)
    assert "\n" not in str(info.value)


def test_level_of_a_point_model_without_calibration_is_refused():
    head = PointHead("mse")
    out = torch.zeros(2, 3, 1)
    with pytest.raises(TsmixError, match="no conformal calibration"):
        forecast_bands(head, out, [80])
    with pytest.raises(TsmixError, match="point forecasts only"):
        forecast_quantiles(head, out, [0.1])
    with pytest.raises(TsmixError, match="was not trained"):
        QuantileHead((0.1, 0.5, 0.9)).quantiles(torch.zeros(3, 3, 1), [0.2])
    with pytest.raises(TsmixError, match="between 0 and 100"):
        forecast_bands(NormalHead(), torch.ones(3, 2, 1), [100])


# ----------------------------------------------------------------------------- losses and scores
def test_pinball_by_hand():
    pred = torch.tensor([[0.0, 2.0], [1.0, 1.0]]).T.unsqueeze(-1)  # (H=2, Q=2, C=1): q0.1, q0.9
    y = torch.tensor([[1.0], [1.0]])  # (H, C)
    # step 0: q0.1 at 0 (too low by 1): 0.1; q0.9 at 1 (exact): 0
    # step 1: q0.1 at 2 (too high by 1): 0.9; q0.9 at 1 (exact): 0
    assert pinball_loss(pred, y, (0.1, 0.9)).item() == pytest.approx((0.1 + 0 + 0.9 + 0) / 4)
    assert mean_pinball(pred.numpy(), y.numpy(), (0.1, 0.9)) == pytest.approx(0.25)
    # crps from quantiles: 2 x mean pinball per element, here over Q and then mean over H
    assert crps_quantiles(pred, y, (0.1, 0.9)).mean().item() == pytest.approx(0.5)


def test_crps_samples_by_hand():
    # samples {0, 2} at y = 1: E|X - y| = 1, E|X - X'| = (0 + 2 + 2 + 0) / 4 = 1 -> 1 - 1/2
    assert crps_samples(torch.tensor([0.0, 2.0]), torch.tensor(1.0)).item() == pytest.approx(0.5)
    # samples {0, 1, 3} at y = 3: E|X - y| = 5/3; pairwise sum 2*(1+3+2) = 12 over 9 -> 4/3; 5/3 - 2/3
    assert crps_samples(np.array([3.0, 0.0, 1.0]), np.array(3.0)).item() == pytest.approx(1.0)
    # one sample: the absolute error
    assert crps_samples(torch.tensor([[2.5]]), torch.tensor([1.0])).item() == pytest.approx(1.5)


@pytest.mark.parametrize(("mu", "sigma", "y"), [(0.0, 1.0, 0.0), (1.0, 2.0, -0.5), (-2.0, 0.3, -1.9)])
def test_crps_normal_closed_form_integral_samples_and_quantiles(mu, sigma, y):
    closed = crps_normal(torch.tensor(mu), torch.tensor(sigma), torch.tensor(y)).item()
    # definition: int (F(x) - 1{x >= y})^2 dx
    left = integrate.quad(lambda x: stats.norm.cdf(x, mu, sigma) ** 2, -np.inf, y)[0]
    right = integrate.quad(lambda x: stats.norm.sf(x, mu, sigma) ** 2, y, np.inf)[0]
    assert closed == pytest.approx(left + right, rel=1e-6)
    if (mu, sigma, y) == (0.0, 1.0, 0.0):
        assert closed == pytest.approx(2 / math.sqrt(2 * math.pi) - 1 / math.sqrt(math.pi))
    draws = mu + sigma * torch.randn(200_000, generator=_gen(1), dtype=torch.float64)
    assert crps_samples(draws, torch.tensor(y, dtype=torch.float64)).item() == pytest.approx(closed, rel=0.02)
    grid = np.arange(1, 1000) / 1000
    qs = torch.tensor(stats.norm.ppf(grid, mu, sigma)).reshape(-1, 1)  # (Q, C=1)
    approx = crps_quantiles(qs, torch.tensor([y], dtype=torch.float64), grid).item()
    assert approx == pytest.approx(closed, rel=0.01)


def test_coverage_width_and_score_sums():
    y = torch.tensor([[0.0, 1.0, 2.0, 3.0]])  # (H=1, C=4)
    lo, hi = torch.full_like(y, 0.5), torch.full_like(y, 2.0)
    assert coverage(y, lo, hi) == pytest.approx(0.5)  # 1.0 and 2.0 (bound included)
    assert interval_width(lo, hi) == pytest.approx(1.5)
    sums = ScoreSums([80.0])
    for _ in range(3):
        sums.update(y.unsqueeze(0), y.unsqueeze(0), {80.0: (lo.unsqueeze(0), hi.unsqueeze(0))},
                    crps=torch.ones(1, 1, 4))
    m = sums.metrics()
    assert m["coverage"]["80"] == pytest.approx(0.5) and m["width"]["80"] == pytest.approx(1.5)
    assert m["crps"] == pytest.approx(1.0)
    # pinball: median exact (0); q0.1 at 0.5 vs y 0,1,2,3 -> 0.45, 0.05, 0.15, 0.25;
    # q0.9 at 2.0 -> 0.2, 0.1, 0, 0.9; mean over (1 + 2) quantiles x 4 elements
    assert m["pinball"] == pytest.approx((0.9 + 1.2) / 12)


# ----------------------------------------------------------------------------- heads
def _scale(channels: int, affine_weight: torch.Tensor | None = None, b: int = 4, seed: int = 0):
    """A WindowScale over random windows, RevIN affine with the given weight when not None."""
    revin = RevIN(channels, affine=affine_weight is not None)
    if affine_weight is not None:
        with torch.no_grad():
            revin.weight.copy_(affine_weight)
            revin.bias.normal_(generator=_gen(seed + 1))
    x = 5.0 + 3.0 * torch.randn(b, 32, channels, generator=_gen(seed))
    return WindowScale(revin, revin.norm(x)[1])


@pytest.mark.parametrize("weight", [None, torch.tensor([1.5, -0.7, 0.2])])
def test_quantile_head_never_crosses(weight):
    head = QuantileHead(resolve_quantiles([0.01, 0.3, 0.99], [50, 80, 95]))
    for seed in range(5):
        raw = 10.0 * torch.randn(4, 6, head.k, 3, generator=_gen(seed))  # large random outputs
        out = head(raw, _scale(3, weight, seed=seed))
        assert out.shape == (4, 6, head.k, 3)
        assert (out.diff(dim=-2) >= 0).all()


def test_heads_are_location_scale_equivariant():
    """x -> a x + b moves locations to a loc + b and scales to a scale (RevIN undone per kind)."""
    x = torch.randn(3, 24, 2, generator=_gen(2), dtype=torch.float64)
    raw = torch.randn(3, 5, 3, 2, generator=_gen(3), dtype=torch.float64)
    revin = RevIN(2, eps=0.0)  # RevIN's variance floor would break exact equivariance
    a, b = 7.0, -3.0
    for head in (NormalHead(), StudentTHead(), QuantileHead((0.1, 0.5, 0.9))):
        k = head.k
        out1 = head(raw[..., :k, :], WindowScale(revin, revin.norm(x)[1]))
        out2 = head(raw[..., :k, :], WindowScale(revin, revin.norm(a * x + b)[1]))
        if isinstance(head, QuantileHead):
            torch.testing.assert_close(out2, a * out1 + b)
        else:
            torch.testing.assert_close(out2[..., 0, :], a * out1[..., 0, :] + b)  # loc
            torch.testing.assert_close(out2[..., 1, :], a * out1[..., 1, :])  # scale
            torch.testing.assert_close(out2[..., 2:, :], out1[..., 2:, :])  # df: unchanged


def test_distribution_quantiles_match_scipy():
    out_n = torch.tensor([[[1.0], [2.0]]], dtype=torch.float64)  # (H=1, K=2, C=1): loc 1, scale 2
    qn = NormalHead().quantiles(out_n, [0.1, 0.5, 0.975])[0, :, 0]
    np.testing.assert_allclose(qn.numpy(), stats.norm.ppf([0.1, 0.5, 0.975], 1.0, 2.0), rtol=1e-6)
    out_t = torch.tensor([[[1.0], [2.0], [3.5]]], dtype=torch.float64)  # loc 1, scale 2, df 3.5
    qt = StudentTHead().quantiles(out_t, [0.1, 0.5, 0.975])[0, :, 0]
    np.testing.assert_allclose(qt.numpy(), stats.t.ppf([0.1, 0.5, 0.975], 3.5, 1.0, 2.0), rtol=1e-10)
    draws = StudentTHead().sample(out_t, 100_000, seed=4)[:, 0, 0].numpy()
    np.testing.assert_allclose(np.quantile(draws, [0.1, 0.5, 0.9]), stats.t.ppf([0.1, 0.5, 0.9], 3.5, 1, 2),
                               atol=0.05)
    lo, hi = StudentTHead().interval(out_t, 80)
    assert lo.item() == pytest.approx(stats.t.ppf(0.1, 3.5, 1, 2)) and hi.item() > lo.item()


@pytest.mark.parametrize("loss", ["normal", "studentt", "quantile"])
@pytest.mark.parametrize("revin", [True, False])
def test_loss_gradient_finite_on_flat_windows(loss, revin):
    """Near-constant windows (std -> 0, RevIN's eps floor) with a jump after them: finite loss/grads."""
    head = make_head(HeadConfig(loss))
    raw = torch.randn(4, 6, head.k, 2, generator=_gen(5), requires_grad=True)
    x = 3.0 + 1e-7 * torch.randn(4, 32, 2, generator=_gen(6))
    y = torch.full((4, 6, 2), 3.0)
    y[:, 3:] += 5.0
    norm = RevIN(2) if revin else None
    scale = WindowScale(norm, norm.norm(x)[1] if norm else None)
    loss_value = head.loss(head(raw, scale), y)
    loss_value.backward()
    assert torch.isfinite(loss_value) and torch.isfinite(raw.grad).all()


def test_crps_of_heads():
    n = 4000
    y = torch.randn(n, 1, generator=_gen(7), dtype=torch.float64)
    out = torch.stack([torch.zeros(n, 1), torch.ones(n, 1), torch.full((n, 1), 200.0)], dim=-2).double()
    exact_normal = crps_normal(0.0, 1.0, y)
    torch.testing.assert_close(NormalHead().crps(out[..., :2, :], y), exact_normal)
    t_crps = StudentTHead().crps(out, y)  # df 200: nearly the normal, up to sampling error
    assert abs(t_crps.mean() - exact_normal.mean()) < 0.01
    torch.testing.assert_close(PointHead("mae").crps(y + 1, y), torch.ones_like(y))


# ----------------------------------------------------------------------------- conformal
def test_conformal_finite_sample_rank():
    scores = torch.arange(1.0, 10.0).reshape(9, 1, 1)  # n = 9 residuals 1..9
    cal = fit_conformal(-scores)  # sign is irrelevant: |r|
    assert cal.radius(80).item() == 8.0  # k = ceil(10 * 0.8) = 8
    assert cal.radius(50).item() == 5.0  # k = ceil(5) = 5
    assert cal.radius(80.2).item() == cal.radius(80.5).item() == 9.0  # off-grid: next grid level up
    assert min_windows(95) == 19 and min_windows(80) == 4
    with pytest.raises(TsmixError, match="at least 19 calibration windows, got 9"):
        cal.interval(torch.zeros(1, 1), 95)
    lo, hi = cal.interval(np.array([[10.0]]), 80)
    assert (lo.item(), hi.item()) == (2.0, 18.0)


def test_conformal_coverage_on_iid_noise_and_json_roundtrip():
    g = np.random.default_rng(0)
    h, c = 4, 3
    scale = np.array([0.5, 1.0, 3.0])  # per-channel noise level: radii must follow it
    cal = fit_conformal(g.standard_normal((3000, h, c)) * scale)
    cal = Calibration.from_dict(json.loads(json.dumps(cal.to_dict())))
    truth = g.standard_normal((20000, h, c)) * scale
    point = np.zeros_like(truth)
    for level in (50, 80, 95):
        lo, hi = cal.interval(point, level)
        assert coverage(truth, lo, hi) == pytest.approx(level / 100, abs=0.03)
        per_channel = [coverage(truth[..., j], lo[..., j], hi[..., j]) for j in range(c)]
        assert max(abs(p - level / 100) for p in per_channel) < 0.03
    np.testing.assert_allclose(cal.radius(95).mean(axis=0), 1.96 * scale, rtol=0.08)
    method, bands = forecast_bands(PointHead(), torch.zeros(h, c), [80], calibration=cal)
    assert method == "split-conformal" and bands[80][0].shape == (h, c)


def test_scaled_conformal_follows_each_windows_spread():
    """Heteroscedastic windows: the noise of each window is proportional to its input spread s(x).
    Absolute scores give one radius for all (calm windows over-, volatile ones under-covered);
    scaled scores |r| / s(x) cover each regime at its level, also when calibration and test mix the
    regimes differently (a volatile validation period, a calm test period)."""
    g = np.random.default_rng(1)
    h, c = 3, 2

    def windows(n, p_volatile):
        s = np.where(g.random((n, c)) < p_volatile, 4.0, 0.5)  # (n, C) window spread
        return g.standard_normal((n, h, c)) * s[:, None, :], s

    r_cal, s_cal = windows(4000, 0.7)  # calibration: mostly volatile
    r_test, s_test = windows(20000, 0.2)  # test: mostly calm
    absolute, scaled = fit_conformal(r_cal), fit_conformal(r_cal, scales=s_cal)
    assert scaled.scaled and scaled.method == "split-conformal (scaled)" and not absolute.scaled
    point = np.zeros_like(r_test)
    for level in (80, 95):
        lo, hi = scaled.interval(point, level, s_test)
        assert coverage(r_test, lo, hi) == pytest.approx(level / 100, abs=0.02)
        calm = s_test[:, None, :].repeat(h, 1) < 1
        inside = (lo <= r_test) & (r_test <= hi)
        assert inside[calm].mean() == pytest.approx(level / 100, abs=0.02)  # each regime, not on average
        assert inside[~calm].mean() == pytest.approx(level / 100, abs=0.03)
        lo_a, hi_a = absolute.interval(point, level)
        assert coverage(r_test, lo_a, hi_a) > level / 100 + 0.03  # absolute over-covers the calm test
    # unit-free: rescaling residuals and spreads together leaves the radii unchanged
    np.testing.assert_allclose(fit_conformal(7 * r_cal, scales=7 * s_cal).radii, scaled.radii)
    back = Calibration.from_dict(json.loads(json.dumps(scaled.to_dict())))
    assert back.score == "scaled_residual" and np.array_equal(back.radii, scaled.radii)
    lo_t, hi_t = scaled.interval(torch.zeros(5, h, c), 80, torch.as_tensor(s_test[:5]))
    hi_np = scaled.interval(np.zeros((5, h, c)), 80, s_test[:5])[1]
    np.testing.assert_allclose(hi_t.numpy(), hi_np, rtol=1e-6)
    with pytest.raises(TsmixError, match="pass scale=window_scale"):
        scaled.interval(point, 80)
    with pytest.raises(TsmixError, match="scales must be finite, positive"):
        fit_conformal(r_cal, scales=np.zeros_like(s_cal))


def test_window_scale_is_the_lookback_spread():
    x = torch.randn(4, 30, 3, dtype=torch.float64) * torch.tensor([1.0, 2.0, 5.0], dtype=torch.float64)
    s = window_scale(x)
    assert s.shape == (4, 3)
    np.testing.assert_allclose(s.numpy(), np.sqrt(x.numpy().var(axis=1) + 1e-5), rtol=1e-5)
    assert torch.equal(window_scale(x, out_index=2), s[:, 2:3])  # MS: the forecast channel only
    assert (window_scale(torch.zeros(1, 8, 2)) > 0).all()  # a flat window keeps a positive scale


def test_conformal_rejects_bad_residuals():
    with pytest.raises(TsmixError, match="windows, horizon, channels"):
        fit_conformal(np.zeros((5, 3)))
    with pytest.raises(TsmixError, match="NaN"):
        fit_conformal(np.full((5, 2, 1), np.nan))
    with pytest.raises(TsmixError, match="not a conformal calibration"):
        Calibration.from_dict({"levels": [80]})


# ----------------------------------------------------------------------------- frames
def _bands():
    point = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])  # (H=3, C=2)
    return point, {80.0: (point - 1, point + 1), 95.0: (point - 2, point + 2)}, {0.1: point - 1.5}


def test_long_frame_columns_and_values():
    point, bands, qs = _bands()
    ds = np.array(["2024-01-01", "2024-01-02", "2024-01-03"], dtype="datetime64[ns]")
    df = long_frame(point, ds, ["a", "b"], bands, qs, method="split-conformal")
    assert list(df.columns) == ["unique_id", "ds", "y_hat", "y_hat-lo-80", "y_hat-hi-80", "y_hat-lo-95",
                                "y_hat-hi-95", "y_hat-q0.1"]
    assert df["unique_id"].tolist() == ["a"] * 3 + ["b"] * 3
    assert df["ds"].tolist() == list(ds) * 2
    assert df["y_hat"].tolist() == [1.0, 2.0, 3.0, 10.0, 20.0, 30.0]
    assert df["y_hat-hi-95"].tolist() == [3.0, 4.0, 5.0, 12.0, 22.0, 32.0]
    assert df.attrs["interval_method"] == "split-conformal"


def test_wide_frame_columns_and_values():
    point, bands, qs = _bands()
    ds = np.arange(3)
    df = wide_frame(point, ds, ["HUFL", "OT"], {97.5: bands[80.0]}, qs, date_col="date")
    assert list(df.columns) == ["date", "HUFL", "HUFL-lo-97.5", "HUFL-hi-97.5", "HUFL-q0.1",
                                "OT", "OT-lo-97.5", "OT-hi-97.5", "OT-q0.1"]
    assert df["OT-lo-97.5"].tolist() == [9.0, 19.0, 29.0]
    assert df["HUFL-q0.1"].tolist() == [-0.5, 0.5, 1.5]
    with pytest.raises(TsmixError, match="point forecast must be"):
        wide_frame(point, ds, ["only-one"])


def test_frames_from_head_outputs():
    head = QuantileHead(resolve_quantiles(None, [80]))
    out = torch.arange(9.0).reshape(3, 3, 1).expand(3, 3, 2)  # (H=3, Q=3, C=2), sorted along Q
    method, bands = forecast_bands(head, out, [80])
    qs = forecast_quantiles(head, out, [0.1, 0.9])
    df = long_frame(head.point(out), np.arange(3), ["x", "y"], bands, qs, method=method)
    assert df["y_hat"].tolist() == [1.0, 4.0, 7.0] * 2
    assert df["y_hat-lo-80"].tolist() == df["y_hat-q0.1"].tolist() == [0.0, 3.0, 6.0] * 2
    assert df.attrs["interval_method"] == "quantile"
