"""Gated attention (`gated`, `gated-g1`): every variant against its formula, the contract checks
for the non-default options, option errors, diagnostics, and the curved-boundary task."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tsmix
from tsmix.mixers.gated import GRANULARITIES, VARIANTS
from tsmix.mixers.softmax import merge_heads
from tsmix.models.synthetic.curved_boundary import (
    CurvedBoundaryModel,
    Representation,
    TaskConfig,
    TrainConfig,
    bayes_accuracy,
    label,
    make_data,
    predict_grid,
    train,
)

DIM, HEADS = 16, 2
CONFIGS = [("gated", {"variant": v}) for v in VARIANTS if v != "mult"]
CONFIGS += [("gated", {"variant": "mult", "alpha": a}) for a in (0.0, 0.3, 1.0)]
CONFIGS += [("gated-g1", {"granularity": g, "gate_init": i}) for g in GRANULARITIES for i in (None, 0.9)]
IDS = [f"{n}-{'-'.join(f'{k}={v}' for k, v in o.items())}" for n, o in CONFIGS]


def make(name, causal=False, dtype=torch.float64, seed=0, **opts):
    torch.manual_seed(seed)
    return tsmix.build_mixer(name, DIM, heads=HEADS, causal=causal, **opts).to(dtype).eval()


def _x(b=2, n=9, seed=0, dtype=torch.float64):
    return torch.randn(b, n, DIM, generator=torch.Generator().manual_seed(seed), dtype=dtype)


@pytest.mark.parametrize("name,opts", CONFIGS, ids=IDS)
@pytest.mark.parametrize("causal", [False, True], ids=["bidir", "causal"])
def test_reference_matches_fast_path_every_option(name, opts, causal):
    m = make(name, causal, **opts)
    x = _x().requires_grad_(True)
    w = _x(seed=1)
    params = [x, *m.parameters()]
    y_fast, y_ref = m(x), m.reference(x)
    torch.testing.assert_close(y_fast, y_ref, rtol=1e-9, atol=1e-9)
    g_fast = torch.autograd.grad((y_fast * w).sum(), params)
    g_ref = torch.autograd.grad((y_ref * w).sum(), params)
    for gf, gr in zip(g_fast, g_ref):
        torch.testing.assert_close(gf, gr, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("name,opts", CONFIGS, ids=IDS)
def test_causal_and_finite_every_option(name, opts):
    m = make(name, True, **opts)
    x = _x(n=11)
    x2 = x.clone()
    x2[:, 6:] += 1e3 * torch.randn_like(x2[:, 6:])
    torch.testing.assert_close(m(x)[:, :6], m(x2)[:, :6], rtol=1e-12, atol=1e-12)
    for dtype in (torch.float32, torch.bfloat16):
        mm = make(name, False, dtype, **opts)
        xx = (1e4 * _x(dtype=torch.float32)).to(dtype).requires_grad_(True)
        y = mm(xx)
        y.float().mean().backward()
        assert torch.isfinite(y.float()).all() and torch.isfinite(xx.grad.float()).all()


def _attn_y(m, x):  # the ungated SDPA output Y (B, N, D), through the explicit softmax
    return merge_heads(m._attention(x, reference=True))


def test_none_variant_is_softmax_attention():
    soft, gated = make("softmax", seed=1), make("gated", variant="none", seed=2)
    gated.load_state_dict(soft.state_dict())
    for causal in (False, True):
        soft.causal = gated.causal = causal
        torch.testing.assert_close(gated(_x()), soft(_x()), rtol=1e-12, atol=1e-12)
    assert gated.gate is None and make("gated", variant="silu").gate is None


def test_variant_formulas():
    x = _x()
    for variant, gate in (
        ("silu", lambda y, m: torch.sigmoid(y)),
        ("sigmoid", lambda y, m: torch.sigmoid(m.gate(y))),
        ("nonsparse", lambda y, m: 0.5 + 0.5 * torch.sigmoid(m.gate(y))),
    ):
        m = make("gated", variant=variant)
        y = _attn_y(m, x)
        torch.testing.assert_close(m(x), m.out(y * gate(y, m)), rtol=1e-12, atol=1e-12)
    m = make("gated", variant="silu")
    torch.testing.assert_close(m(x), m.out(F.silu(_attn_y(m, x))), rtol=1e-12, atol=1e-12)


def test_mult_interpolates_between_ungated_and_sigmoid():
    # out is affine and the gate is 1 + alpha (s - 1): f_alpha = (1 - alpha) f_none + alpha f_sigmoid
    x = _x()
    sig = make("gated", variant="sigmoid", seed=3)
    none = make("gated", variant="none")
    none.load_state_dict({k: v for k, v in sig.state_dict().items() if not k.startswith("gate.")})
    for alpha in (0.0, 0.25, 0.7, 1.0):
        m = make("gated", variant="mult", alpha=alpha)
        m.load_state_dict(sig.state_dict())
        want = (1 - alpha) * none(x) + alpha * sig(x)
        torch.testing.assert_close(m(x), want, rtol=1e-12, atol=1e-12)
    # nonsparse's gate 0.5 + 0.5 s is 1 + 0.5 (s - 1): the same function as alpha = 0.5
    ns = make("gated", variant="nonsparse")
    ns.load_state_dict(sig.state_dict())
    torch.testing.assert_close(ns(x), 0.5 * none(x) + 0.5 * sig(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_g1_gate_comes_from_block_input(granularity):
    m = make("gated-g1", granularity=granularity)
    x = _x()
    g = torch.sigmoid(m.gate(x))  # from x itself, not from Y
    y = m._attention(x, reference=True)  # (B, H, N, Dh)
    if granularity == "headwise":
        assert g.shape == (2, 9, HEADS)
        gated = y * g.transpose(1, 2).unsqueeze(-1)
    else:
        assert g.shape == (2, 9, DIM)
        gated = y * g.view(2, 9, HEADS, -1).transpose(1, 2)
    torch.testing.assert_close(m(x), m.out(merge_heads(gated)), rtol=1e-12, atol=1e-12)
    n_gate = sum(p.numel() for p in m.gate.parameters())
    assert n_gate == (DIM + 1) * (HEADS if granularity == "headwise" else DIM)


@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_g1_gate_init_starts_near_open_and_learns(granularity):
    p = 0.98
    m = make("gated-g1", granularity=granularity, gate_init=p)
    soft = make("softmax")
    soft.load_state_dict({k: v for k, v in m.state_dict().items() if not k.startswith("gate.")})
    x = _x()
    bias, g = m.out.bias, torch.sigmoid(m.gate.bias)
    assert torch.allclose(g, torch.full_like(g, p), rtol=1e-6)  # p up to float32 init rounding
    assert m.gate.weight.abs().max() == 0  # the same gate for every input at the start
    torch.testing.assert_close(m(x), g[0] * (soft(x) - bias) + bias, rtol=1e-12, atol=1e-12)
    assert m.diagnostics()["gate_mean"] == pytest.approx(p, rel=1e-6)
    m.train()
    (m(x) * _x(seed=5)).sum().backward()
    assert m.gate.weight.grad.abs().sum() > 0  # zero-initialized weights still receive gradient


def test_option_errors_name_the_choices():
    with pytest.raises(tsmix.TsmixError, match="none, silu, mult, sigmoid, nonsparse"):
        tsmix.build_mixer("gated", DIM, heads=HEADS, variant="tanh")
    with pytest.raises(tsmix.TsmixError, match=r"\[0, 1\]"):
        tsmix.build_mixer("gated", DIM, heads=HEADS, variant="mult", alpha=1.5)
    with pytest.raises(tsmix.TsmixError, match="variant='mult'"):
        tsmix.build_mixer("gated", DIM, heads=HEADS, variant="sigmoid", alpha=0.5)
    with pytest.raises(tsmix.TsmixError, match="headwise, elementwise"):
        tsmix.build_mixer("gated-g1", DIM, heads=HEADS, granularity="channel")
    for bad in (0.0, 1.0):
        with pytest.raises(tsmix.TsmixError, match="gate_init"):
            tsmix.build_mixer("gated-g1", DIM, heads=HEADS, gate_init=bad)
    with pytest.raises(tsmix.TsmixError, match="divisible"):
        tsmix.build_mixer("gated", 10, heads=3)


def test_diagnostics_report_the_gate():
    x = _x()
    m = make("gated", variant="nonsparse")
    assert m.diagnostics() == {}  # nothing before the first forward
    m(x)
    d = m.diagnostics()
    assert 0.5 <= d["gate_mean"] <= 1.0 and d["gate_closed_frac"] == 0.0
    m = make("gated", variant="mult", alpha=0.4)
    m(x)
    assert 0.6 <= m.diagnostics()["gate_mean"] <= 1.0
    m = make("gated", variant="none")
    m(x)
    assert m.diagnostics() == {}
    assert "gate.weight" not in make("gated", variant="silu").state_dict()  # stats are not state


def test_search_spaces_cover_the_variants():
    optuna = pytest.importorskip("optuna")
    seen = set()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    spec = tsmix.mixer_spec("gated")
    for _ in range(25):
        opts = spec.space(study.ask())
        seen.add(opts["variant"])
        assert ("alpha" in opts) == (opts["variant"] == "mult")
        tsmix.build_mixer("gated", DIM, heads=HEADS, **opts)
    assert seen == set(VARIANTS)


def test_curved_and_linear_labels():
    c = torch.tensor([[1.2, 0.0], [0.0, 2.0], [-0.5, -0.5], [1.0, 1.0]])
    # theta = 0, r = 1.2 -> score 0 (not > 0); theta = pi/2, r = 2: sin(1.25 pi) + 0.48 < 0
    assert label(c[:2], "curved").tolist() == [0.0, 0.0]
    theta, r = torch.atan2(c[2:, 1], c[2:, 0]), c[2:].norm(dim=-1)
    want = (torch.sin(2.5 * theta) + 0.6 * (r - 1.2) > 0).float()
    assert torch.equal(label(c[2:], "curved"), want)
    assert label(c, "linear").tolist() == [1.0, 1.0, 0.0, 1.0]
    with pytest.raises(tsmix.TsmixError, match="curved, linear"):
        TaskConfig(task="spiral")


def test_bayes_accuracy_is_the_ceiling():
    for task in ("curved", "linear"):
        clean = TaskConfig(task=task, n_train=1, n_test=400, noise=0.0)
        d = make_data(clean, seed=1)
        assert bayes_accuracy(clean, d["x_test"], d["y_test"], draws=50) == 1.0  # no noise: c is seen
    noisy = TaskConfig(n_train=1, n_test=1000, noise=0.3)
    d = make_data(noisy, seed=1)
    acc = bayes_accuracy(noisy, d["x_test"], d["y_test"], draws=500)
    assert 0.9 < acc < 0.97  # noise 0.3 over 8 observations blurs the wavy boundary


def test_curved_boundary_model_learns_and_is_deterministic():
    cfg = TaskConfig(n_train=512, n_test=256)
    data = make_data(cfg, seed=0)
    assert data["x_train"].shape == (512, 8, 2) and data["y_test"].shape == (256,)
    assert torch.equal(make_data(cfg, seed=0)["x_test"], data["x_test"])
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        model = CurvedBoundaryModel("gated", dim=16, hidden=16, variant="sigmoid")
        runs.append(train(model, data, TrainConfig(epochs=8, batch_size=64, lr=1e-2)))
    assert runs[0]["test_acc"] == runs[1]["test_acc"]
    assert runs[0]["test_acc"] > 0.75  # chance is ~0.57
    assert Representation(model)(data["x_test"][:3]).shape == (3, 16)
    cx, cy, p = predict_grid(model, cfg, resolution=11, draws=2)
    assert p.shape == (11, 11) and ((p >= 0) & (p <= 1)).all()


@pytest.mark.parametrize(
    "name,opts",
    [
        ("gated", {"variant": "sigmoid"}),
        ("gated", {"variant": "silu"}),
        ("gated-g1", {"granularity": "elementwise"}),
        ("gated-g1", {"granularity": "headwise"}),
    ],
)
@pytest.mark.parametrize("causal", [False, True])
def test_channel_major_attention_taken_and_equals_reference(name, opts, causal, spy, same_map):
    """At the encoders' kind of shape (CPU, heads of 4, short sequences) both gated families take the
    channel-major attention of the softmax mixer, and equal their plain reference in float64."""
    from tsmix.mixers import gated

    calls = spy(gated, "attention_t")
    torch.manual_seed(6)
    m = tsmix.build_mixer(name, 16, heads=4, causal=causal, **opts).double()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(3, 9, 16, dtype=torch.float64, generator=gen, requires_grad=True)
    y, r = m(x), m.reference(x)
    assert calls, "the channel-major attention was not taken"
    same_map(y, r, [x, *m.parameters()])
    m.train()
    m(x)  # no attention dropout: still channel-major in training
    assert len(calls) == 2
