"""Curvature diagnostic: exact values on maps with known second derivatives, the eps plateau,
anisotropic metrics, and the paper's claim that fixed-weight attention is flat until gated."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import tsmix
from tsmix.diagnostics import (
    EPS_GRID,
    anisotropic_precision,
    curvature,
    curvature_metrics,
    curvature_sweep,
    find_plateau,
    unit_directions,
)


def _x(*shape, seed=0, scale=1.0):
    return scale * torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def test_affine_map_has_zero_curvature():
    torch.manual_seed(0)
    lin = nn.Sequential(nn.Flatten(), nn.Linear(15, 7))
    x = _x(32, 5, 3)
    rep = curvature_sweep(lin, x, directions=8)
    for m in rep["metrics"]:
        p = rep["plateau"][m]
        assert p["kappa"] == 0.0 and p["found"] and p["points"] == len(EPS_GRID)
    # the raw values sit far below the roundoff floor at every eps
    assert all(v < fl for v, fl in zip(rep["curves"]["iso"], rep["floor"]["iso"]))
    assert curvature(lin, x.float(), directions=4) < 1e-6
    # the caller's module is untouched (float32, training mode)
    assert lin[1].weight.dtype == torch.float32 and lin.training


def test_squared_norm_has_curvature_two_everywhere():
    f = Fn(lambda x: x.flatten(1).square().sum(-1))  # D^2 f [v, v] = 2 ||v||^2 = 2
    rep = curvature_sweep(f, _x(16, 4, 3), directions=6)
    assert all(k == pytest.approx(2.0, rel=1e-6) for k in rep["curves"]["iso"])
    assert rep["plateau"]["iso"]["found"] and abs(rep["plateau"]["iso"]["kappa"] - 2.0) < 1e-6


def test_bilinear_map_matches_analytic_per_direction():
    gen = torch.Generator().manual_seed(1)
    a, b = torch.randn(6, 10, generator=gen, dtype=torch.float64), torch.randn(6, 10, generator=gen,
                                                                                  dtype=torch.float64)
    f = Fn(lambda x: (x @ a.T) * (x @ b.T))  # D^2 f [v, v] = 2 (A v) * (B v)
    x, k = _x(20, 10, seed=2), 7
    v = unit_directions(x, k, seed=3)  # (K, B, 10), the directions curvature() draws with seed=3
    analytic = (2 * (v @ a.T) * (v @ b.T)).norm(dim=-1).mean().item()
    got = curvature(f, x, eps=1e-3, directions=k, seed=3)
    assert got == pytest.approx(analytic, rel=1e-6)


def test_paper_kappa_of_the_sphere_projection():
    """The paper's kappa(x) = || f(x + eps v) - 2 f(x) + f(x - eps v) || / eps^2 at eps = 1e-3, averaged
    over random unit directions, on its own constructive example f(y) = y / ||y|| (the gate that maps a
    plane onto the unit sphere). On ||x|| = 1, with c = <x, v>, D^2 f[v, v] = -2 c v + (3 c^2 - 1) x,
    so kappa(x, v) = sqrt(1 + 2 c^2 - 3 c^4): 1 on a tangent direction (a great circle's curvature)."""
    x = _x(12, 5, seed=4)
    x = x / x.norm(dim=-1, keepdim=True)  # points on the unit sphere
    sphere = Fn(lambda y: y / y.norm(dim=-1, keepdim=True))
    v = unit_directions(x, 9, seed=5)  # (K, B, 5): the directions curvature(seed=5) draws
    c = (v * x).sum(-1)  # (K, B)
    analytic = (1 + 2 * c**2 - 3 * c**4).sqrt().mean().item()
    assert curvature(sphere, x, eps=1e-3, directions=9, seed=5) == pytest.approx(analytic, rel=1e-5)
    # along a tangent line t -> (1, t) at t = 0 (a 1-d input: v = +-1) kappa is the circle's curvature, 1
    circle = Fn(lambda t: sphere(torch.cat([torch.ones_like(t), t], dim=-1)))
    t0 = torch.zeros(3, 1, dtype=torch.float64)
    assert curvature(circle, t0, directions=2) == pytest.approx(1.0, rel=1e-5)


def test_anisotropic_precision_properties():
    for cond in (2.0, 5.0, 20.0):
        lam = anisotropic_precision(12, cond, seed=4)
        assert lam.max() / lam.min() == pytest.approx(cond, rel=1e-12)
        assert lam.mean().item() == pytest.approx(1.0, rel=1e-12)
    assert torch.equal(anisotropic_precision(12, 5.0, seed=4), anisotropic_precision(12, 5.0, seed=4))
    assert not torch.equal(anisotropic_precision(12, 5.0, seed=4), anisotropic_precision(12, 5.0, seed=5))
    assert torch.equal(anisotropic_precision(5, 1.0), torch.ones(5, dtype=torch.float64))
    with pytest.raises(tsmix.TsmixError, match="cond"):
        anisotropic_precision(4, 0.5)


def test_anisotropic_metric_weights_the_curved_output():
    # only output coordinate j is curved (kappa 2 there); the rest is affine
    m, j, seed = 6, 4, 11
    w = torch.randn(m, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)

    def f(x):
        y = x @ w.T
        y[:, j] = y[:, j] + x.square().sum(-1)
        return y

    conds = (2.0, 5.0, 20.0)
    rep = curvature_sweep(Fn(f), _x(10, 3), directions=4, conds=conds, seed=seed)
    assert rep["plateau"]["iso"]["kappa"] == pytest.approx(2.0, rel=1e-6)
    for c in conds:
        lam = anisotropic_precision(m, c, seed=seed)
        assert rep["plateau"][f"cond{c:g}"]["kappa"] == pytest.approx(2.0 * lam[j].sqrt().item(), rel=1e-6)


def test_plateau_of_constructed_curves():
    eps = list(EPS_GRID)
    kappa = 3.0
    # roundoff ~ 1/eps^2 at the small end, truncation ~ eps^2 at the large end
    vals = [kappa * (1 + (e / 2e-2) ** 2) + 1e-8 / e**2 for e in eps]
    p = find_plateau(eps, vals, rtol=0.05)
    assert p["found"] and p["eps_lo"] == eps[2] and p["eps_hi"] == eps[6]
    assert p["kappa"] == pytest.approx(kappa, rel=0.02) and p["spread"] <= 0.05
    # values under the floor are zero; a run never mixes zero and nonzero values
    p = find_plateau(eps, [1e-9] * 4 + [1.0] * 5, floor=[1e-6] * 9)
    assert p["kappa"] == 1.0 and p["points"] == 5 and p["eps_lo"] == eps[4]
    p = find_plateau(eps, [1e-9] * 6 + [1.0, 2.0, 4.0], floor=[1e-6] * 9)
    assert p["kappa"] == 0.0 and p["points"] == 6
    # nothing flat: best run has < 3 points and is flagged
    p = find_plateau(eps, [2.0**i for i in range(9)], rtol=0.05)
    assert not p["found"] and p["points"] == 1
    with pytest.raises(tsmix.TsmixError):
        find_plateau(eps, [1.0, 2.0])


def test_sweep_plateau_excludes_truncation_at_large_eps():
    omega = 300.0  # high frequency: at eps = 1e-2 the O((omega eps v)^2) term is ~15%
    f = Fn(lambda x: torch.sin(omega * x))
    x = _x(8, 5, seed=5)
    rep = curvature_sweep(f, x, directions=5, conds=(), seed=6)
    v = unit_directions(x, 5, seed=6)
    analytic = (omega**2 * torch.sin(omega * x) * v.square()).norm(dim=-1).mean().item()
    p = rep["plateau"]["iso"]
    assert p["found"] and p["eps_hi"] < 1e-2 and p["eps_lo"] == 1e-4
    assert p["kappa"] == pytest.approx(analytic, rel=0.01)
    assert abs(rep["curves"]["iso"][-1] / analytic - 1) > 0.05  # the excluded end really is off


def test_sweep_plateau_excludes_roundoff_at_small_eps_in_float32():
    # float32: at small eps the second difference is within roundoff of f (floor ~ u ||f|| / eps^2),
    # so those points count as 0 and the plateau is the large-eps end
    f = Fn(lambda x: x * x)  # kappa = 2 ||v * v|| per direction
    x = _x(32, 8, seed=7, scale=0.1).float()
    rep = curvature_sweep(f, x, directions=8, conds=(), dtype=torch.float32, seed=2)
    p = rep["plateau"]["iso"]
    analytic = (2 * unit_directions(x, 8, seed=2).square()).norm(dim=-1).mean().item()
    assert p["found"] and p["eps_lo"] > 1e-4 and p["eps_hi"] == 1e-2
    assert p["kappa"] == pytest.approx(analytic, rel=0.02)
    assert rep["curves"]["iso"][0] <= rep["floor"]["iso"][0]  # flagged as roundoff
    # float64 (the default) is flat over the whole grid
    rep64 = curvature_sweep(f, x, directions=8, conds=(), seed=2)
    assert rep64["plateau"]["iso"]["points"] == 9
    assert rep64["plateau"]["iso"]["kappa"] == pytest.approx(analytic, rel=1e-5)
    # float64 (the default) is flat over the whole grid
    assert curvature_sweep(f, x, directions=8, conds=())["plateau"]["iso"]["points"] == 9


def test_dropout_module_is_measured_in_eval_mode_and_left_in_train():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Dropout(0.5), nn.Linear(16, 3)).train()
    x = _x(12, 4)
    a, b = curvature(net, x, directions=3), curvature(net, x, directions=3)
    net_eval = nn.Sequential(*net).eval()
    assert a == b == pytest.approx(curvature(net_eval, x, directions=3), rel=1e-12)
    assert a > 0 and net.training


def test_report_is_plain_and_metrics_are_floats():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 2))
    rep = curvature_sweep(net, _x(6, 3), directions=2)
    json.dumps(rep)  # plain numbers, lists and dicts only
    met = curvature_metrics(rep, prefix="curv")
    assert set(met) >= {"curv_iso", "curv_cond2", "curv_cond20", "curv_iso_relative", "curv_iso_eps_lo"}
    assert all(isinstance(v, float) for v in met.values())


def test_bad_inputs_name_the_fix():
    with pytest.raises(tsmix.TsmixError, match="batch"):
        curvature(Fn(lambda x: x.sum()), _x(4, 3))
    with pytest.raises(tsmix.TsmixError, match="non-finite"):
        curvature(Fn(lambda x: x / 0.0), _x(4, 3))
    with pytest.raises(tsmix.TsmixError, match="directions"):
        curvature(Fn(lambda x: x), _x(4, 3), directions=0)
    lin32 = nn.Linear(3, 2)
    with pytest.raises(tsmix.TsmixError, match="dtype"):
        curvature(lambda x: lin32(x), _x(4, 3))  # a callable is not cast: a clear hint, not a crash


def _uniform_attention(variant: str, seed: int = 0, **opts) -> nn.Module:
    """Gated mixer whose attention weights are constant (q = k = 0): Y is affine in x."""
    torch.manual_seed(seed)
    m = tsmix.build_mixer("gated", 8, heads=2, variant=variant, **opts).double()
    with torch.no_grad():
        m.qkv.weight[:16].zero_()
        m.qkv.bias[:16].zero_()
    return m


def test_fixed_weight_attention_is_flat_and_gating_bends_it():
    x = _x(16, 6, 8, seed=8)
    kw = dict(directions=4, conds=(5.0,))
    k_none = curvature_sweep(_uniform_attention("none"), x, **kw)["plateau"]["iso"]["kappa"]
    assert k_none == 0.0  # affine: the paper's flatness of ungated attention
    for variant in ("silu", "sigmoid", "nonsparse"):
        p = curvature_sweep(_uniform_attention(variant), x, **kw)["plateau"]["iso"]
        assert p["found"] and p["kappa"] > 0.0  # nonzero means above the roundoff floor
    # mult: Y + alpha (Y sigmoid(WY) - Y), so on a flat Y kappa is exactly linear in alpha
    alphas = (0.25, 0.5, 0.75, 1.0)
    ks = [curvature(_uniform_attention("mult", alpha=a), x, directions=4) for a in alphas]
    assert all(k1 < k2 for k1, k2 in zip(ks, ks[1:]))
    for a, k in zip(alphas, ks):
        assert k / a == pytest.approx(ks[-1], rel=1e-6)


@pytest.mark.parametrize("seed", [0, 1])
def test_gate_strength_orders_relative_curvature(seed):
    # Input-dependent attention with a sharp gate: kappa / slope rises with alpha. Raw kappa need
    # not (a gate below 1 also shrinks the output, and kappa scales with it), but it is convex in
    # alpha: the second difference is affine in alpha.
    x = _x(16, 6, 8, seed=9)
    ks, rel = [], []
    for a in (0.0, 0.5, 1.0):
        torch.manual_seed(seed)
        m = tsmix.build_mixer("gated", 8, heads=2, variant="mult", alpha=a).double()
        with torch.no_grad():
            m.gate.weight.mul_(8.0)
        rel.append(curvature_sweep(m, x, directions=4, conds=())["plateau"]["iso"]["relative"])
        ks.append(curvature(m, x, directions=4))
    assert rel[0] < rel[1] < rel[2]
    assert ks[1] <= 0.5 * (ks[0] + ks[2]) + 1e-12
