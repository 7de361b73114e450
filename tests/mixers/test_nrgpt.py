"""NRGPT energy mixer and the gpt-rec-parallel baseline: the properties the paper claims.

The contract suite covers shapes, dtypes, causality and reference == forward for the
default options; here: closed-form gradients == autograd for every option, energy descent
(bidirectional total energy; the causal cascade) for random and for trained weights, the
contrast with the unconstrained η, the η constraints themselves, and weight sharing.
"""

from __future__ import annotations

import copy
import itertools

import pytest
import torch

import tsmix
from tsmix.ops.energy import attention_energy, attention_energy_grad

DIM, HEADS = 16, 2
F64 = torch.float64


def make(causal: bool, seed: int = 0, **options) -> torch.nn.Module:
    torch.manual_seed(seed)
    return tsmix.build_mixer("nrgpt", DIM, heads=HEADS, causal=causal, **options).to(F64).eval()


def scale_weights(m: torch.nn.Module, factor: float) -> torch.nn.Module:
    """Larger energy weights (W_Q, W_K, FF): sharper landscapes than at init."""
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() == 2 and not name.startswith("eta"):
                p.mul_(factor)
    return m


def train_briefly(causal: bool, steps: int = 30, seed: int = 0, **options) -> torch.nn.Module:
    """A few Adam steps (lr 1e-2) of mixer + linear readout on a task that needs attention:
    causal: read the previous token; bidirectional: the sequence mean. Returns the mixer."""
    m = make(causal, seed, **options).train()
    readout = torch.nn.Linear(DIM, DIM).to(F64)
    before = copy.deepcopy(m.state_dict())
    opt = torch.optim.Adam([*m.parameters(), *readout.parameters()], lr=1e-2)
    gen = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        x = torch.randn(8, 10, DIM, dtype=F64, generator=gen)
        target = torch.roll(x, 1, dims=1) if causal else x.mean(1, keepdim=True).expand_as(x)
        loss = (readout(x + m(x)) - target)[:, 1:].square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.9 * losses[0], "training did not move the loss"
    moved = max(
        ((p - before[n]).norm() / before[n].norm()).item()
        for n, p in m.state_dict().items()
        if p.dim() == 2
    )
    assert moved > 0.05, "training did not move the energy weights"
    return m.eval()


# ------------------------------------------------------------------ closed form == autograd


def test_attention_energy_grad_matches_autograd_edge_lengths():
    torch.manual_seed(0)
    alpha = torch.rand(3, dtype=F64) + 0.5
    beta = torch.tensor(0.7, dtype=F64)
    for causal, n in itertools.product((True, False), (1, 2, 9)):
        q = torch.randn(2, 3, n, 4, dtype=F64, requires_grad=True)
        k = torch.randn(2, 3, n, 4, dtype=F64, requires_grad=True)
        dq, dk = attention_energy_grad(q, k, alpha, beta, causal)
        e = attention_energy(q, k, alpha, beta, causal)
        if causal and n == 1:  # a lone causal token has no prefix: zero energy, zero force
            assert not e.requires_grad and (e == 0).all() and (dq == 0).all() and dk is None
            continue
        aq, ak = torch.autograd.grad(e.sum(), [q, k])
        torch.testing.assert_close(dq, aq, rtol=1e-10, atol=1e-10)
        if causal:
            assert dk is None  # each token descends its own energy: the query term only
        else:
            torch.testing.assert_close(dk, ak, rtol=1e-10, atol=1e-10)


OPTION_SETS = [
    dict(),
    dict(ff="ff2w"),
    dict(ff="none"),
    dict(activation="gelu"),
    dict(activation="softplus", ff="ff2w"),
    dict(norm="rms"),
    dict(norm="none", eta="psd"),
    dict(eta="free", activation="gelu"),
]


def _ids(options: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in options.items()) or "default"


@pytest.mark.parametrize("options", OPTION_SETS, ids=_ids)
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidir"])
def test_closed_form_matches_autograd_float64(causal, options):
    m = scale_weights(make(causal, **options), 2.0)
    with torch.no_grad():  # move every parameter off its init (γ, b, α, β, L, K too)
        for p in m.parameters():
            p.add_(0.1 * torch.randn_like(p))
    x = torch.randn(2, 11, DIM, dtype=F64, requires_grad=True)
    g = m.norm(x)
    torch.testing.assert_close(m.energy_grad(g), m._autograd_energy_grad(g), rtol=1e-10, atol=1e-10)
    # and the whole T-step map, outputs and gradients (input and every parameter)
    w = torch.randn(2, 11, DIM, dtype=F64)
    y_fast, y_ref = m(x), m.reference(x)
    torch.testing.assert_close(y_fast, y_ref, rtol=1e-10, atol=1e-10)
    params = [p for p in m.parameters() if p.requires_grad]
    g_fast = torch.autograd.grad((y_fast * w).sum(), [x, *params])
    g_ref = torch.autograd.grad((y_ref * w).sum(), [x, *params])
    for a, b in zip(g_fast, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


# --------------------------------------------------------------------------- energy descent


def assert_bidirectional_descent(m: torch.nn.Module, x: torch.Tensor) -> None:
    with torch.no_grad():
        total = m.energy_trace(x).sum(-1)  # (T+1, B)
    steps = total[1:] - total[:-1]
    assert (steps < 0).all(), f"total energy rose: max step {steps.max().item():.3e}"


def assert_causal_cascade(m: torch.nn.Module, x: torch.Tensor) -> None:
    eta = m.eta_matrix()
    with torch.no_grad():
        trace = m.energy_trace(x)  # (T+1, B, N)
        first = trace[1:, :, 0] - trace[:-1, :, 0]
        assert (first < 0).all(), f"first token's energy rose: {first.max().item():.3e}"
        assert (trace[-1].sum(-1) < trace[0].sum(-1)).all(), "summed energy did not end lower"
        # Later tokens once their prefix has settled: hold tokens < A where they are and let
        # token A alone run the same dynamics; E_A must fall at every step, for every A.
        for a in range(1, x.shape[1]):
            xa = x[:, : a + 1].clone()
            energies = []
            for _ in range(m.options.steps):
                g = m.norm(xa)
                energies.append(m.token_energy(g)[:, a])
                xa[:, a] -= m.energy_grad(g)[:, a] @ eta.T
            energies.append(m.token_energy(m.norm(xa))[:, a])
            drops = torch.stack(energies).diff(dim=0)
            assert (drops < 0).all(), f"token {a} with a settled prefix rose by {drops.max().item():.3e}"


@pytest.mark.parametrize("scale", [1.0, 3.0])
def test_bidirectional_total_energy_decreases_every_step(scale):
    for seed in range(3):
        m = scale_weights(make(False, seed, steps=12), scale)
        assert_bidirectional_descent(m, 2.0 * torch.randn(4, 10, DIM, dtype=F64))


@pytest.mark.parametrize("scale", [1.0, 3.0])
def test_causal_cascade_random_weights(scale):
    for seed in range(2):
        m = scale_weights(make(True, seed, steps=12), scale)
        assert_causal_cascade(m, 2.0 * torch.randn(3, 8, DIM, dtype=F64))


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidir"])
def test_descent_after_training(causal):
    trained = train_briefly(causal)
    m = make(causal, steps=12)  # the trained weights, run for more steps than trained with
    m.load_state_dict(trained.state_dict())
    x = torch.randn(4, 10, DIM, dtype=F64)
    if causal:
        assert_causal_cascade(m, x)
    else:
        assert_bidirectional_descent(m, x)


def test_causal_descent_at_large_steps_for_every_constrained_eta():
    # Concave per-token energies: the frozen-prefix step descends for any c: LayerNorm with
    # a learned γ of mixed signs and a bias, RMSNorm, and the no-norm PSD η with a learned
    # antisymmetric part.
    for options in (dict(step=5.0), dict(norm="rms", step=2.0), dict(norm="none", eta="psd", step=0.5)):
        m = scale_weights(make(True, 1, steps=6, **options), 2.0)
        with torch.no_grad():
            if options.get("eta") == "psd":
                m.eta_k.copy_(torch.randn(DIM, DIM, dtype=F64))
                m.eta_l.add_(0.3 * torch.randn(DIM, DIM, dtype=F64))
            elif options.get("norm") is None:
                m.norm.weight.copy_(torch.randn(DIM, dtype=F64))
                m.norm.bias.copy_(torch.randn(DIM, dtype=F64))
        assert_causal_cascade(m, torch.randn(2, 6, DIM, dtype=F64))


def test_unconstrained_eta_can_raise_energy():
    # Same energy weights and inputs; only η differs. The released code's free η raises
    # energies; the constrained default never does.
    x = torch.randn(4, 10, DIM, dtype=F64)
    for causal in (True, False):
        free = make(causal, 0, eta="free", steps=8)
        default = make(causal, 0, steps=8)
        default.load_state_dict({k: v for k, v in free.state_dict().items() if k != "eta_free"})
        with torch.no_grad():
            free_trace, default_trace = free.energy_trace(x), default.energy_trace(x)
        if causal:
            rises_free = (free_trace.diff(dim=0) > 0).float().mean().item()
            rises_default = (default_trace.diff(dim=0) > 0).float().mean().item()
        else:
            rises_free = (free_trace.sum(-1).diff(dim=0) > 0).float().mean().item()
            rises_default = (default_trace.sum(-1).diff(dim=0) > 0).float().mean().item()
        assert rises_default == 0.0
        assert rises_free > 0.1, f"free η raised energy in only {rises_free:.0%} of steps"


def test_concave_ff1_descends_at_any_step_convex_ff2w_does_not():
    # The first causal token feels only its FF energy. FF1 with relu is concave, so the
    # normalized step cannot raise it whatever c is; FF2W is not: with W2 = -W1ᵀ it is
    # convex, and the same step overshoots already at c = 0.1 (why FF1 is the default).
    x = torch.randn(4, 6, DIM, dtype=F64)
    for c in (0.1, 5.0):
        ff1 = scale_weights(make(True, 0, steps=10, step=c), 3.0)
        ff2w = make(True, 0, steps=10, step=c, ff="ff2w", activation="gelu")
        with torch.no_grad():
            ff2w.w1.weight.mul_(3.0)
            ff2w.w2.weight.copy_(-ff2w.w1.weight.T)
            first_ff1 = ff1.energy_trace(x)[:, :, 0].diff(dim=0)
            first_ff2w = ff2w.energy_trace(x)[:, :, 0].diff(dim=0)
        assert (first_ff1 < 0).all()
        assert (first_ff2w > 0).any()


# ------------------------------------------------------------------- η, trace, sharing, misc


def test_psd_eta_has_psd_symmetric_part():
    m = make(True, norm="none", eta="psd")
    with torch.no_grad():
        m.eta_l.copy_(torch.randn(DIM, DIM, dtype=F64))
        m.eta_k.copy_(torch.randn(DIM, DIM, dtype=F64))
    eta = m.eta_matrix()
    assert torch.linalg.eigvalsh((eta + eta.T) / 2).min() >= -1e-12
    assert (eta - eta.T).abs().max() > 1e-3  # the antisymmetric part is free


def test_norm_eta_is_c_diag_gamma():
    m = make(True, step=0.3)
    with torch.no_grad():
        m.norm.weight.copy_(torch.rand(DIM, dtype=F64) + 0.5)
    torch.testing.assert_close(m.eta_matrix(), torch.diag(0.3 * m.norm.weight))


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidir"])
def test_energy_trace_follows_the_forward(causal):
    m = make(causal, steps=3)
    x = torch.randn(2, 7, DIM, dtype=F64)
    with torch.no_grad():
        trace = m.energy_trace(x)
        assert trace.shape == (4, 2, 7)
        torch.testing.assert_close(trace[0], m.energy(x))
        torch.testing.assert_close(trace[-1], m.energy(x + m(x)))
    d = m.diagnostics()
    assert {"beta", "alpha_mean", "eta_norm", "energy_start", "energy_end"} <= d.keys()
    assert d["energy_rise_fraction"] == 0.0 and d["energy_end"] < d["energy_start"]


@pytest.mark.parametrize("name", ["nrgpt", "gpt-rec-parallel"])
def test_one_shared_block_applied_t_times(name):
    # steps=3 equals three applications of the steps=1 map with the same weights.
    torch.manual_seed(0)
    m3 = tsmix.build_mixer(name, DIM, heads=HEADS, causal=True, steps=3).to(F64)
    m1 = tsmix.build_mixer(name, DIM, heads=HEADS, causal=True, steps=1).to(F64)
    m1.load_state_dict(m3.state_dict())
    x = torch.randn(2, 9, DIM, dtype=F64)
    y = x
    for _ in range(3):
        y = y + m1(y)
    torch.testing.assert_close(x + m3(x), y, rtol=1e-12, atol=1e-12)


def test_gpt_rec_parallel_is_attention_plus_mlp():
    torch.manual_seed(0)
    m = tsmix.build_mixer("gpt-rec-parallel", DIM, heads=HEADS, causal=True, steps=1).to(F64)
    x = torch.randn(2, 9, DIM, dtype=F64)
    attn = torch.nn.MultiheadAttention(DIM, HEADS, batch_first=True).to(F64)
    with torch.no_grad():
        attn.in_proj_weight.copy_(m.qkv.weight)
        attn.in_proj_bias.copy_(m.qkv.bias)
        attn.out_proj.weight.copy_(m.proj.weight)
        attn.out_proj.bias.copy_(m.proj.bias)
    h = m.ln1(x)
    mask = torch.ones(9, 9, dtype=torch.bool).triu(1)
    expected = attn(h, h, h, attn_mask=mask, need_weights=False)[0]
    expected = expected + m.down(torch.nn.functional.gelu(m.up(m.ln2(x))))
    torch.testing.assert_close(m(x), expected, rtol=1e-10, atol=1e-10)


def test_option_errors_name_the_fix():
    with pytest.raises(tsmix.TsmixError, match="eta='psd'"):
        tsmix.build_mixer("nrgpt", DIM, heads=HEADS, norm="none")
    with pytest.raises(tsmix.TsmixError, match="norm='none'"):
        tsmix.build_mixer("nrgpt", DIM, heads=HEADS, eta="psd")
    with pytest.raises(tsmix.TsmixError, match="choose one of"):
        tsmix.build_mixer("nrgpt", DIM, heads=HEADS, activation="tanh")
    with pytest.raises(tsmix.TsmixError, match="step"):
        tsmix.build_mixer("nrgpt", DIM, heads=HEADS, step=0.0)
    with pytest.raises(tsmix.TsmixError, match="steps"):
        tsmix.build_mixer("gpt-rec-parallel", DIM, heads=HEADS, steps=0)


# ------------------------------------------------------- fast path == closed form == autograd


def _reads_reference(qk: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """[(P k)ᵀ ; (Pᵀ q)ᵀ] of channel-major blocks ``(2, M, Dh, N)`` from the plain closed form:
    attention_energy_grad with α = 1 is -(P k, Pᵀ q) (the M blocks as M heads of one sequence)."""
    q, k = (t.transpose(1, 2).unsqueeze(0) for t in qk)  # (1, M, N, Dh)
    dq, dk = attention_energy_grad(q, k, torch.ones(q.shape[1], dtype=qk.dtype), beta, False)
    return -torch.stack([dq[0], dk[0]]).transpose(2, 3)


@pytest.mark.parametrize("blocks", ["one", "many"])
@pytest.mark.parametrize("n", [1, 2, 9, 42])
@pytest.mark.parametrize("branch", ["bounded", "max_shift"])
def test_bidir_attention_reads_match_closed_form_float64(monkeypatch, branch, n, blocks):
    from tsmix.ops import energy_fast

    if blocks == "many":  # the batch (6 heads) runs in blocks of SCORE_BLOCK_ELEMS scores: 4, then a ragged 2
        monkeypatch.setattr("tsmix.ops.attention.SCORE_BLOCK_ELEMS", 4 * n * n)

    # Both softmax branches: the row-bound shift (taken at ordinary scores) and the max-shifted
    # softmax (taken when the bound could underflow a row); force each and check it is taken.
    taken = []
    real = energy_fast._bounded_shift_ok

    def spy(bound):
        taken.append(real(bound))
        return branch == "bounded"

    monkeypatch.setattr(energy_fast, "_bounded_shift_ok", spy)
    torch.manual_seed(n)
    qk = torch.randn(2, 6, 4, n, dtype=F64, requires_grad=True)  # 6 blocks (heads x sequences), Dh 4
    beta = torch.tensor(0.7, dtype=F64, requires_grad=True)
    out = energy_fast.bidir_attention_reads_t(qk, beta)
    ref = _reads_reference(qk, beta)
    assert taken == [True]  # ordinary scores: the real check picks the bounded shift
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    w = torch.randn_like(out)
    g_out = torch.autograd.grad((out * w).sum(), [qk, beta])
    g_ref = torch.autograd.grad((ref * w).sum(), [qk, beta])
    for a, b in zip(g_out, g_ref):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_bidir_attention_reads_large_scores_take_the_max_shift(monkeypatch):
    # Scores far beyond exp's range: the bound would underflow whole rows, so the max-shifted
    # softmax must be taken, and it still equals the closed form (peaked, not NaN).
    from tsmix.ops import energy_fast

    taken = []
    real = energy_fast._bounded_shift_ok
    monkeypatch.setattr(energy_fast, "_bounded_shift_ok", lambda b: taken.append(real(b)) or taken[-1])
    torch.manual_seed(0)
    qk = (40.0 * torch.randn(2, 4, 4, 9, dtype=torch.float32)).requires_grad_(True)
    beta = torch.tensor(1.0)
    out = energy_fast.bidir_attention_reads_t(qk, beta)
    assert taken == [False]
    ref = _reads_reference(qk.double(), beta.double())
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), ref, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("options", [*OPTION_SETS, dict(learn_beta=False)], ids=_ids)
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidir"])
def test_fused_forward_matches_closed_form_float64(spy, causal, options, same_map):
    # forward is the fused path (hoisted weights, folded η and α, packed bidirectional reads);
    # closed_form is the step-by-step energy_grad it replaced. Outputs and gradients w.r.t.
    # the input and every parameter, at an off-init point.
    import tsmix.mixers.nrgpt as nrgpt_module

    calls = spy(nrgpt_module, "bidir_attention_reads_t")
    m = scale_weights(make(causal, steps=3, **options), 2.0)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.1 * torch.randn_like(p))
    x = torch.randn(3, 13, DIM, dtype=F64, requires_grad=True)
    y_fast, y_plain = m(x), m.closed_form(x)
    assert len(calls) == (0 if causal else 3)  # bidirectional: the packed reads, once per step
    same_map(y_fast, y_plain, [x, *(p for p in m.parameters() if p.requires_grad)], grad_tol=1e-10)


@pytest.mark.parametrize("causal", [False, True])
def test_gpt_rec_parallel_takes_channel_major_attention_and_equals_reference(causal, spy, same_map):
    """At small heads on short CPU sequences gpt-rec-parallel's attention is the softmax mixer's
    channel-major form (a spy counts one call per step); float64 against the plain reference."""
    from tsmix.mixers import nrgpt

    calls = spy(nrgpt, "attention_t")
    torch.manual_seed(4)
    m = tsmix.build_mixer("gpt-rec-parallel", 16, heads=4, causal=causal, steps=2).to(F64)
    x = torch.randn(3, 9, 16, dtype=F64, generator=torch.Generator().manual_seed(2), requires_grad=True)
    y, r = m(x), m.reference(x)
    assert len(calls) == 2
    same_map(y, r, [x, *m.parameters()])  # outputs 1e-10, gradients 1e-9
