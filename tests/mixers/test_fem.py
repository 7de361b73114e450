"""Free Energy Mixer: readout properties, every prior's forms agreeing, C at 10,000 steps,
robustness, the parameter budget, and the channel-wise selection task."""

from __future__ import annotations

import math

import pytest
import torch

import tsmix
from tsmix.ops.time_decay import TimeDecayCondition

DIM, HEADS = 16, 2
f64 = torch.float64
PRIORS = ["fem-sm", "fem-gla", "fem-ssm", "fem-aft"]
LINEAR_TIME = ["fem-gla", "fem-ssm", "fem-aft"]


def make(name: str, causal: bool, dtype=f64, seed: int = 0, active_cond: bool = True, **opts):
    """A mixer with C switched *on* (its output projection starts at zero, which would hide it)."""
    torch.manual_seed(seed)
    if name == "fem-gla":
        opts.setdefault("chunk", 4)  # several chunks even for short test sequences
    m = tsmix.build_mixer(name, DIM, heads=HEADS, causal=causal, **opts)
    if active_cond and m.cond is not None:
        with torch.no_grad():
            m.cond.proj.normal_(0.0, 0.5)
    return m.to(dtype).eval()


def _x(n: int, seed: int = 0, dtype=f64, scale: float = 1.0, batch: int = 2) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(batch, n, DIM, generator=g, dtype=dtype)


def _reads(m, x):
    """(mu, F) per channel from the fast path's single prior read of [v, exp(beta v)]."""
    s = m.cond(x) if m.cond is not None else None
    pin, v, _, _, beta = m._project(x, s)
    return m._unpack(m._prior_read(pin, m._pack(v, beta)), beta)


def _force_lambda_zero(m) -> None:
    rows = m.slice("lam")
    with torch.no_grad():
        m.in_proj.weight[rows] = 0.0
        m.in_proj.bias[rows] = -1e4  # sigmoid(-1e4) == 0 exactly


# ----------------------------------------------------------------------------- readout properties


@pytest.mark.parametrize("causal", [True, False])
def test_lambda_zero_gate_one_is_softmax_attention(causal):
    """FEM-SM with lambda = 0, g = 1 (and C off, full value width) *is* the softmax mixer."""
    m = make("fem-sm", causal, value_ratio=1.0, cond=False, outer_gate=False)
    _force_lambda_zero(m)
    sm = tsmix.build_mixer("softmax", DIM, heads=HEADS, causal=causal).to(f64).eval()
    w, b = m.in_proj.weight, m.in_proj.bias
    with torch.no_grad():
        sm.qkv.weight.copy_(torch.cat([w[m.slice(k)] for k in "qkv"]))
        sm.qkv.bias.copy_(torch.cat([b[m.slice(k)] for k in "qkv"]))
        sm.out.load_state_dict(m.out.state_dict())
    x = _x(15, 1)
    torch.testing.assert_close(m(x), sm(x), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(m(x), sm.reference(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", PRIORS)
@pytest.mark.parametrize("causal", [True, False])
def test_lambda_zero_gate_one_is_the_prior_read(name, causal):
    m = make(name, causal, cond=False, outer_gate=False)
    _force_lambda_zero(m)
    x = _x(19, 2)
    pin, v, _, _, _ = m._project(x, None)
    plain, _ = m._unpack(m._prior_read(pin, m._pack(v, None)), None)  # the prior read of v alone
    torch.testing.assert_close(m(x), m.out(plain.reshape(*x.shape[:2], -1)), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", PRIORS)
@pytest.mark.parametrize("causal", [True, False])
def test_free_energy_at_least_mean_per_channel(name, causal):
    m = make(name, causal)
    mu, f = _reads(m, _x(21, 3, scale=3.0))
    assert (f - mu >= -1e-12).all()
    assert (f - mu).max() > 1e-3  # and the LSE branch is not a copy of the mean


@pytest.mark.parametrize("name", PRIORS)
def test_free_energy_tends_to_mean_as_beta_vanishes(name):
    m = make(name, True)
    with torch.no_grad():
        m.beta_raw.fill_(-60.0)  # beta = floor = 1e-4
    x = _x(17, 4)
    mu, f = _reads(m, x)
    vmax = m.in_proj(x)[..., m.slice("v")].abs().max() * 10  # generous bound on |v (1 + s)|
    assert ((f - mu).abs() <= 1e-4 * vmax**2).all()  # F - mu <= beta Var / 2 (+ higher order)
    assert (f - mu).abs().max() < 1e-3


@pytest.mark.parametrize("name", PRIORS)
@pytest.mark.parametrize("causal", [True, False])
def test_free_energy_tends_to_support_max_as_beta_grows(name, causal):
    """The prior's one-pass read of [v, exp(beta v)] (no bound, float64): F rises with beta
    towards the max of v over the prior's support, within log(1 / p(argmax)) / beta."""
    m = make(name, causal)
    x = _x(13, 5)
    pin, v_lay, _, _, _ = m._project(x, m.cond(x))
    v_lay = v_lay / v_lay.abs().max()  # |v| <= 1: exp(beta v) stays finite in float64 up to beta ~ 700
    b, n = x.shape[:2]
    v = v_lay.reshape(b, n, -1)  # (B, N, E)
    e = v.shape[-1]
    logp = m._prior_logp(pin)  # (B, H|E, N, N): the support and its worst log-weight
    support = logp > -math.inf
    worst = logp.masked_fill(~support, math.inf).amin(-1)  # (B, H|E, N)
    if m.per_channel:
        vv = v.transpose(1, 2)[..., None, :]  # (B, E, 1, N)
        smax = vv.masked_fill(~support, -math.inf).amax(-1).transpose(1, 2)  # (B, N, E)
        worst = worst.transpose(1, 2)
    else:
        vh = v.view(b, n, HEADS, -1).permute(0, 2, 3, 1)[..., None, :]  # (B, H, dv, 1, N)
        smax = vh.masked_fill(~support[:, :, None], -math.inf).amax(-1)  # (B, H, dv, N)
        smax = smax.permute(0, 3, 1, 2).reshape(b, n, e)
        worst = worst.transpose(1, 2).repeat_interleave(e // HEADS, dim=-1)
    prev = None
    for beta in (1.0, 10.0, 100.0, 500.0):
        bt = m._layout(torch.full((e,), beta, dtype=f64))
        _, f = m._unpack(m._prior_read(pin, m._pack(v_lay, bt)), bt)  # F = log(Z) / beta
        f = f.reshape(b, n, e)
        gap = smax - f
        assert (gap >= -1e-10).all() and (gap <= -worst / beta + 1e-10).all()
        if prev is not None:
            assert (f >= prev - 1e-10).all()
        prev = f


# ----------------------------------------------------------------------------- forms agree


OPTION_SETS = [  # ablations and variants
    {},
    {"lse": False},
    {"temperature": False},
    {"outer_gate": False},
    {"value_ratio": 1.0},
    {"recompute": True},  # checkpointed elementwise work: same values, same gradients
]


@pytest.mark.parametrize("name", PRIORS)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("opts", OPTION_SETS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "-")
def test_fast_equals_reference_with_active_conditioning(name, causal, opts, same_map):
    m = make(name, causal, **opts)
    x = _x(23, 6).requires_grad_(True)
    y, r = m(x), m.reference(x)
    same_map(y, r, [x, *m.parameters()], allow_unused=True)


@pytest.mark.parametrize("name", LINEAR_TIME)
def test_streaming_equals_parallel(name):
    m = make(name, True)
    x = _x(29, 7)
    torch.testing.assert_close(m.recurrent(x), m(x), rtol=1e-11, atol=1e-11)
    m32 = make(name, True, torch.float32)
    x32 = _x(40, 8, torch.float32)
    state, ys = None, []
    for t in range(x32.shape[1]):
        y, state = m32.step(x32[:, t], state)
        ys.append(y)
    torch.testing.assert_close(torch.stack(ys, 1), m32(x32), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("causal", [True, False])
def test_gla_prior_with_per_key_dim_decay(causal):
    """fem-gla's decay="key" (GLA paper) path: factorized chunks agree with the plain prior and,
    causal, with streaming; the future moves no past output even by a rounding."""
    m = make("fem-gla", causal, decay="key", chunk=8)
    x = _x(29, 14).requires_grad_(True)
    y, r = m(x), m.reference(x)
    torch.testing.assert_close(y, r, rtol=1e-10, atol=1e-10)
    g1 = torch.autograd.grad(y.square().sum(), [x, *m.parameters()])
    g2 = torch.autograd.grad(r.square().sum(), [x, *m.parameters()])
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
    if causal:
        torch.testing.assert_close(m.recurrent(x), y, rtol=1e-11, atol=1e-11)
        m32 = make("fem-gla", True, torch.float32, decay="key")
        x32 = _x(40, 15, torch.float32)
        x2 = x32.clone()
        x2[:, 21:] = 1e4
        assert torch.equal(m32(x32)[:, :21], m32(x2)[:, :21])
    with pytest.raises(tsmix.TsmixError, match="chunk"):
        tsmix.build_mixer("fem-gla", DIM, heads=HEADS, decay="key", chunk=16)


@pytest.mark.parametrize("name,causal", [("fem-sm", True), ("fem-gla", False)])
def test_step_refuses_without_a_streaming_state(name, causal):
    with pytest.raises(tsmix.TsmixError, match="causal linear-time priors"):
        make(name, causal).step(torch.randn(1, DIM, dtype=f64))


# ----------------------------------------------------------------------------- robustness


@pytest.mark.parametrize("name", PRIORS)
def test_no_lookahead_with_active_conditioning(name):
    """Huge future values leave every earlier output bit for bit unchanged (no shared max,
    normalizer or in-chunk reference point that the future could move by even a rounding)."""
    m = make(name, True, torch.float32)
    x = _x(40, 9, torch.float32)
    for t in (0, 5, 17, 33):
        x2 = x.clone()
        x2[:, t + 1 :] = _x(40 - t - 1, 10 + t, torch.float32, scale=1e4)
        assert torch.equal(m(x)[:, : t + 1], m(x2)[:, : t + 1])


@pytest.mark.parametrize("name", PRIORS)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_huge_inputs_finite_with_active_conditioning(name, causal, dtype):
    m = make(name, causal, dtype)
    x = _x(37, 11, torch.float32, scale=1e4).to(dtype).requires_grad_(True)
    y = m(x)
    assert torch.isfinite(y.float()).all()
    y.float().square().mean().backward()
    assert torch.isfinite(x.grad.float()).all()
    assert all(torch.isfinite(p.grad.float()).all() for p in m.parameters() if p.grad is not None)


@pytest.mark.parametrize("causal", [True, False])
def test_conditioning_branch_exact_on_10000_steps(causal):
    """C in float32 (log-space chunked scan) vs its float64 step-by-step reference."""
    torch.manual_seed(0)
    c = TimeDecayCondition(DIM, 4, 16, causal, True)
    with torch.no_grad():
        c.proj.normal_(0.0, 0.5)
        c.inp.bias[8:].fill_(-6.0)  # slow decays: softplus(-6) ~ 2.5e-3, memory of ~400 steps
    x = _x(10_000, 12, torch.float32, batch=1)
    fast = c(x).double()
    ref = c.double().reference(x.double())
    err = ((fast - ref).abs().max() / ref.abs().max()).item()
    assert err < 1e-4, err


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n", [1, 2, 23, 300])  # 300: past SHORT_SCAN_MAX_LEN, the chunked scan
def test_conditioning_gain_equals_one_plus_reference(causal, n):
    """C's fused gain (layout-permuted norms, step-loop scan with a hand-written backward) and
    its fused modulation ``z * gain`` (token- and channel-major) against 1 + its plain loop
    reference: values and gradients, float64."""
    torch.manual_seed(1)
    c = TimeDecayCondition(DIM, 4, 24, causal, True).double()
    with torch.no_grad():
        c.proj.normal_(0.0, 0.5)
        c.inp.bias[8:].fill_(-1.0)
        c.ln.weight.normal_(1.0, 0.3)
        c.ln.bias.normal_(0.0, 0.3)
    x = _x(n, 16).requires_grad_(True)
    z = torch.randn(*x.shape[:2], 24, dtype=f64, requires_grad=True)
    ref = 1.0 + c.reference(x)
    zt = z.detach().flatten(0, 1).t().contiguous().requires_grad_(True)  # channel-major (24, B N)
    forms = [  # (fast, plain, leaves): gain, gain channel-major, and the fused z * gain both ways
        (c.gain(x), ref, [x]),
        (c.gain_t(x), ref.flatten(0, 1).t(), [x]),
        (c.modulate(z, x), z * ref, [x, z]),
        (c.modulate_t(zt, x), zt * ref.flatten(0, 1).t(), [x, zt]),
    ]
    for y, r, leaves in forms:
        torch.testing.assert_close(y, r, rtol=1e-12, atol=1e-12)
        w = torch.randn_like(y)
        g1 = torch.autograd.grad((y * w).sum(), [*leaves, *c.parameters()], retain_graph=True)
        g2 = torch.autograd.grad((r * w).sum(), [*leaves, *c.parameters()], retain_graph=True)
        for a, b in zip(g1, g2):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
        # a second backward through the retained graph (the fused modulation reuses a buffer in
        # its first backward) gives the same gradients
        g3 = torch.autograd.grad((y * w).sum(), [*leaves, *c.parameters()])
        for a, b in zip(g3, g2):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def _plain_forward(m, x):
    """The plain-layout forward (C's forward, _project, _pack, _unpack, _mix)."""
    s = m.cond(x) if m.cond is not None else None
    pin, v, lam, g, beta = m._project(x, s)
    return m.out(m._mix(*m._unpack(m._prior_read(pin, m._pack(v, beta)), beta), lam, g))


@pytest.mark.parametrize("name", PRIORS)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(
    "opts", OPTION_SETS[:4], ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "-"
)
def test_fast_layout_equals_plain_layout_float32(name, causal, opts):
    """The fast data flow against the plain one on the same prior read, float32 at the patch
    encoder's head width (dv = 2): equal within float32 rounding, outputs and gradients."""
    torch.manual_seed(0)
    m = tsmix.build_mixer(name, DIM, heads=4, causal=causal, **opts).eval()
    if m.cond is not None:
        with torch.no_grad():
            m.cond.proj.normal_(0.0, 0.5)
    x = _x(42, 17, torch.float32, batch=3).requires_grad_(True)
    y, r = m(x), _plain_forward(m, x)
    torch.testing.assert_close(y, r, rtol=1e-5, atol=1e-5)
    w = torch.randn_like(y)
    g1 = torch.autograd.grad((y * w).sum(), [x, *m.parameters()])
    g2 = torch.autograd.grad((r * w).sum(), [x, *m.parameters()])
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------- budget, options


def test_parameter_budget_is_attention_like():
    d = 64
    att = sum(p.numel() for p in tsmix.build_mixer("softmax", d, heads=4).parameters())
    fem = sum(p.numel() for p in tsmix.build_mixer("fem-sm", d, heads=4, cond=False).parameters())
    fem_c = sum(p.numel() for p in tsmix.build_mixer("fem-sm", d, heads=4).parameters())
    assert abs(fem - 4 * d * d) / (4 * d * d) < 0.03  # Q, K (D^2 each) + V, lambda, g, O (D^2 / 2 each)
    assert abs(fem - att) / att < 0.01
    assert fem < fem_c < 1.15 * fem  # C is low rank


def test_option_errors_name_the_fix():
    with pytest.raises(tsmix.TsmixError, match="value_ratio"):
        tsmix.build_mixer("fem-sm", DIM, heads=HEADS, value_ratio=0.3)
    with pytest.raises(tsmix.TsmixError, match="exp_cap"):
        tsmix.build_mixer("fem-gla", DIM, heads=HEADS, exp_cap=200.0)
    with pytest.raises(tsmix.TsmixError, match="qk_ratio"):
        tsmix.build_mixer("fem-sm", DIM, heads=HEADS, qk_ratio=0.625, rope=True)


def test_diagnostics_report_lambda_and_beta():
    m = make("fem-gla", True)
    m(_x(9, 13))
    d = m.diagnostics()
    assert set(d) == {"beta_mean", "beta_min", "beta_max", "lambda_mean"}
    assert all(isinstance(v, float) for v in d.values())
    assert 0 < d["lambda_mean"] < 1 and d["beta_mean"] == pytest.approx(2.0, rel=1e-5)


# ----------------------------------------------------------------------------- channel-wise selection


def test_channel_select_task_targets():
    from tsmix.models.synthetic.channel_select import ChannelSelectConfig, ChannelSelectTask

    task = ChannelSelectTask(ChannelSelectConfig(channels=3, vocab=5, length=7, seed=3))
    assert len(set(task.pos.tolist())) == 3
    sym, target = task.sample(11, torch.Generator().manual_seed(0))
    for j, p in enumerate(task.pos.tolist()):
        assert torch.equal(target[:, j], sym[:, p, j])
    with pytest.raises(tsmix.TsmixError, match="length"):
        ChannelSelectTask(ChannelSelectConfig(channels=8, length=4))


def test_channel_select_one_fem_head_solves_it_one_softmax_head_cannot():
    """Small version of ``python -m tsmix.models.synthetic.channel_select`` (2 channels, 4
    symbols, 6 positions): one FEM-SM head reaches >= 0.99, one softmax head with the same
    parameter count stays far below (it can put weight on one position for all channels)."""
    from dataclasses import replace

    from tsmix.models.synthetic.channel_select import ChannelSelectConfig, run

    base = ChannelSelectConfig(
        channels=2, vocab=4, length=6, dim=16, steps=300, batch=64, lr=1e-2, eval_samples=2048, seed=0
    )
    prev = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: threads only add overhead
    try:
        fem = run(replace(base, mixer="fem-sm", mixer_options=(("cond", False),)))
        sm = run(replace(base, mixer="softmax", mixer_options=()))
    finally:
        torch.set_num_threads(prev)
    assert abs(fem["mixer_params"] - sm["mixer_params"]) / sm["mixer_params"] < 0.02
    assert fem["accuracy"] >= 0.99, fem
    assert sm["accuracy"] <= 0.9, sm


# ----------------------------------------------------------------------------- channel-major paths


@pytest.mark.parametrize("name", ["fem-sm", "fem-aft"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n", [7, 21])
@pytest.mark.parametrize(
    "opts", OPTION_SETS[:4], ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "-"
)
def test_channel_major_path_taken_and_equals_reference(name, causal, n, opts, spy, same_map):
    """At the iTransformer encoder's kind of shape (a few sequences of 7 / 21 tokens, dv = 4) the
    CPU forward takes the channel-major path (fem-aft: the read as one bmm by the decay kernel),
    and it equals the plain reference in float64: outputs 1e-10, gradients 1e-9."""
    torch.manual_seed(3)
    m = tsmix.build_mixer(name, 32, heads=4, causal=causal, **opts).double().eval()
    if m.cond is not None:
        with torch.no_grad():
            m.cond.proj.normal_(0.0, 0.5)
    calls = spy(type(m), "_forward_t")
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, n, 32, generator=g, dtype=f64, requires_grad=True)
    y, r = m(x), m.reference(x)
    assert calls, "the channel-major path was not taken"
    same_map(y, r, [x, *m.parameters()], allow_unused=True)


@pytest.mark.parametrize("decay", ["head", "key"])
@pytest.mark.parametrize("n", [7, 42])
@pytest.mark.parametrize(
    "opts", OPTION_SETS[:4], ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "-"
)
def test_fem_gla_channel_major_path_taken_and_equals_reference(decay, n, opts, spy, same_map):
    """Bidirectional fem-gla on short CPU sequences runs channel-major (``_forward_t``: features,
    log-decays and columns as ``(H B, ., N)`` blocks, the dense decay attention with a row of ones
    as the normalizer); float64 against the plain reference, outputs 1e-10 and gradients 1e-9."""
    torch.manual_seed(3)
    m = tsmix.build_mixer("fem-gla", 32, heads=4, causal=False, decay=decay, **opts).double().eval()
    if m.cond is not None:
        with torch.no_grad():
            m.cond.proj.normal_(0.0, 0.5)
    calls = spy(type(m), "_forward_t")
    x = torch.randn(3, n, 32, generator=torch.Generator().manual_seed(5), dtype=f64, requires_grad=True)
    y, r = m(x), m.reference(x)
    assert len(calls) == 1
    same_map(y, r, [x, *m.parameters()], allow_unused=True)


def test_fem_gla_channel_major_matches_token_major_float32_and_falls_back():
    """Patch shape, float32: the channel-major forward equals the token-major one within rounding
    (outputs and input gradients); gates at the floor (total decay over the bound) make
    ``_forward_t`` decline, and the forward still equals the reference (the exact scan)."""
    from tsmix.mixers._fem_core import FreeEnergyMixer

    torch.manual_seed(0)
    m = tsmix.build_mixer("fem-gla", 16, heads=4, causal=False)
    x = torch.randn(8, 42, 16, requires_grad=True)
    y, t = m(x), FreeEnergyMixer.forward(m, x)
    torch.testing.assert_close(y, t, rtol=1e-5, atol=1e-5)
    gy, gt = (torch.autograd.grad(u.square().sum(), x)[0] for u in (y, t))
    torch.testing.assert_close(gy, gt, rtol=1e-4, atol=1e-5)
    m64 = tsmix.build_mixer("fem-gla", 16, heads=4, causal=False, gate_tau=0.1).double()
    with torch.no_grad():
        m64.gate.bias.fill_(-50.0)  # logsigmoid(-50) / 0.1 = -500 per step: floored, 42 x 5 > 40
    x64 = x.detach().double()
    assert m64._forward_t(x64) is None
    torch.testing.assert_close(m64(x64), m64.reference(x64), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("causal", [True, False])
def test_aft_read_t_equals_the_scan_read(causal):
    """fem-aft's short-sequence read (one bmm by the (E, N, N) decay kernel, channel-major) against
    the scan form it replaces there (token-major), values and gradients, float64."""
    from tsmix.ops import fem_priors as P

    g = torch.Generator().manual_seed(7)
    b, n, e = 3, 9, 5
    key = (3 * torch.randn(b, n, e, generator=g, dtype=f64)).requires_grad_(True)
    cols = [torch.randn(b, n, e, generator=g, dtype=f64, requires_grad=True) for _ in range(2)]
    raw = torch.randn(e, generator=g, dtype=f64, requires_grad=True)
    log_decay = -torch.nn.functional.softplus(raw)

    def t(c):  # (B, N, E) -> channel-major (E, B N)
        return c.flatten(0, 1).t()

    fast = [c.t().reshape(b, n, e) for c in P.aft_read_t(t(key), log_decay, [t(c) for c in cols], n, causal)]
    plain = P.aft_prior_read(key, log_decay, torch.stack(cols, dim=-1), causal).unbind(-1)
    w = [torch.randn(b, n, e, generator=g, dtype=f64) for _ in cols]
    leaves = [key, *cols, raw]
    for y, r in zip(fast, plain):
        torch.testing.assert_close(y, r, rtol=1e-12, atol=1e-12)
    g1 = torch.autograd.grad(sum((y * v).sum() for y, v in zip(fast, w)), leaves, retain_graph=True)
    g2 = torch.autograd.grad(sum((r * v).sum() for r, v in zip(plain, w)), leaves)
    for a, c in zip(g1, g2):
        torch.testing.assert_close(a, c, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", ["fem-sm", "fem-aft"])
def test_channel_major_path_under_cpu_bf16_autocast(name):
    """The channel-major paths run under CPU bfloat16 autocast, finite and close to float32."""
    torch.manual_seed(0)
    m = tsmix.build_mixer(name, 32, heads=4, causal=False)
    with torch.no_grad():
        m.cond.proj.normal_(0.0, 0.5)
    x = torch.randn(4, 21, 32, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = m(x)
    y.float().sum().backward()
    assert torch.isfinite(y).all() and torch.isfinite(x.grad).all()
    torch.testing.assert_close(y.float(), m(x).detach(), rtol=0.1, atol=0.1)
