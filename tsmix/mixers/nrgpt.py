"""NRGPT (arXiv 2512.16762): attention and MLP as energy gradients in one weight-shared block.

``nrgpt`` applies one shared block T times; each application is a gradient step of every
token on its energy landscape::

    g = norm(x);  x <- x - η ∂E/∂g,   E = E_attention + E_ff   (energies in tsmix.ops.energy)

``gpt-rec-parallel`` is the paper's baseline: the GPT-J parallel block with shared weights,
``x <- x + attn(LN₁ x) + MLP(LN₂ x)``, applied T times.

Both return the UPDATE ``x_T - x_0`` because :class:`tsmix.Block` adds the residual. Inside a
pre-norm Block the dynamics therefore start from ``norm1(x)``; the exact recurrence on the
residual stream is ``Block(dim, mixer, ffn="none", norm="none")`` (both mixers carry their
own MLP), which is what the LM pipeline uses for them.

The inference-rate matrix η (option ``eta``):

- ``norm`` (default): η = c·diag(γ), γ the norm's scale. Proposition 2.1 (continuous
  time): the step is a descent direction. In discrete time more holds for the causal
  default. With a strict causal prefix, E_A^att = -(α/β) log Σ_B exp(β k_B·W_Q g_A) is
  concave in g_A (-logsumexp of linear maps, α > 0), and so is FF1 with a convex σ (relu,
  softplus): E(g') <= E(g) + v·(g' - g), v = ∂E/∂g. With w = γ⊙v, v·(g' - g) = w·(x̂' - x̂)
  and x' = x - c w; the norm is radial in the centred x (LayerNorm) or in x (RMSNorm), so
  the step only turns x̂ away from w and w·(x̂' - x̂) <= 0 (eps included). Hence token A's
  energy cannot rise for ANY c > 0 while its prefix is fixed, and token 0 (FF energy
  only) falls at every step. FF2W and GELU are not concave (FF2W with W₂ = -W₁ᵀ is convex
  and overshoots already at c = 0.1, see the tests); the bidirectional total energy is not
  jointly concave: its guarantee is Prop. 2.1's continuous-time one, and in discrete
  time no rise was found for c up to 5, β up to 8 and weights up to 6x their init.
- ``psd``: no norm (g = x), η = c·(L Lᵀ + K - Kᵀ), positive semi-definite symmetric part
  (Proposition 2.2); learned L (init I) and K (init 0). The same concavity argument makes
  the causal step a descent for any c, but with no norm the energies are unbounded below
  and x grows with the number of steps.
- ``free``: a learned unconstrained D×D matrix (init N(0, c²/D)), what the released code
  does (its output projection). Kept for comparison only: its energy can rise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tsmix.block import make_norm
from tsmix.mixers.softmax import attention_t, check_heads, merge_heads, split_heads
from tsmix.ops.attention import attend, attention_reference, small_attention
from tsmix.ops.energy import (
    ACTIVATIONS,
    activation_and_slope,
    attention_energy,
    attention_energy_grad,
    ff1_energy,
    ff1_grad,
    ff2w_energy,
    ff2w_grad,
)
from tsmix.ops.energy_fast import bidir_attention_reads_t
from tsmix.registry import Mixer, register_mixer

ETAS = ("norm", "psd", "free")
ENERGY_NORMS = ("layer", "rms", "none")
FF_ENERGIES = ("ff1", "ff2w", "none")


def _one_of(value: str, choices: tuple[str, ...], what: str) -> None:
    if value not in choices:
        raise ValueError(f"unknown {what} {value!r}; choose one of {', '.join(choices)}")


@dataclass(frozen=True)
class NRGPTOptions:
    steps: int = 4  # T: applications of the one shared block, each a descent step
    step: float = 0.1  # c in η = c·diag(γ); also the scale of the psd / free η at init
    eta: str = "norm"  # norm: c·diag(γ) | psd: c·(LLᵀ + K - Kᵀ), no norm | free: unconstrained
    norm: str = "layer"  # g = LayerNorm(x) | RMSNorm(x) | x ("none", needs eta psd or free)
    ff: str = "ff1"  # ff1: -‖σ(Wg)‖² | ff2w: -gᵀW₂σ(W₁g) | none: attention energy only
    ff_mult: int = 4  # hidden width of the FF energy in multiples of dim
    activation: str = "relu"  # relu / softplus keep FF1 concave; gelu is the released code's
    beta_init: float | None = None  # inverse temperature β at init; None = 1/sqrt(head dim)
    learn_beta: bool = True  # β is learned (the head weights α_h always are), as in the paper

    def __post_init__(self) -> None:
        _one_of(self.eta, ETAS, "eta")
        _one_of(self.norm, ENERGY_NORMS, "norm")
        _one_of(self.ff, FF_ENERGIES, "ff")
        _one_of(self.activation, ACTIVATIONS, "activation")
        if not (isinstance(self.steps, int) and self.steps >= 1):
            raise ValueError(f"steps must be an int >= 1, got {self.steps!r}")
        if not self.step > 0:
            raise ValueError(f"step (c) must be > 0, got {self.step!r}")
        if self.ff_mult < 1:
            raise ValueError(f"ff_mult must be >= 1, got {self.ff_mult!r}")
        if self.beta_init is not None and not self.beta_init > 0:
            raise ValueError(f"beta_init must be > 0 or None, got {self.beta_init!r}")
        if self.eta == "norm" and self.norm == "none":
            raise ValueError("eta='norm' is c·diag(γ) of the norm's scale; with norm='none' use eta='psd'")
        if self.eta == "psd" and self.norm != "none":
            raise ValueError(
                "eta='psd' is the no-norm constraint (Prop. 2.2); with a norm use eta='norm', "
                "or set norm='none'"
            )


def _nrgpt_space(trial) -> dict:
    return {
        "steps": trial.suggest_int("nrgpt.steps", 1, 6),
        "step": trial.suggest_float("nrgpt.step", 0.02, 0.3, log=True),
        "ff": trial.suggest_categorical("nrgpt.ff", ["ff1", "ff2w"]),
        "norm": trial.suggest_categorical("nrgpt.norm", ["layer", "rms"]),
    }


def _softplus_inv(y: float) -> float:
    return y + math.log(-math.expm1(-y))


@register_mixer("nrgpt", options=NRGPTOptions, space=_nrgpt_space)
class NRGPTMixer(Mixer):
    """NRGPT energy mixer: T gradient-descent steps on attention + FF energies (shared weights)."""

    def __init__(self, dim: int, heads: int, causal: bool, options: NRGPTOptions) -> None:
        super().__init__()
        check_heads(dim, heads, "nrgpt")
        self.dim, self.heads, self.causal, self.options = dim, heads, causal, options
        o = options
        self.norm = make_norm(o.norm, dim)
        # J_h = W_K,hᵀ W_Q,h: the key and query maps of each head, no bias (a bilinear energy).
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.alpha_raw = nn.Parameter(torch.full((heads,), _softplus_inv(1.0)))  # α_h = softplus > 0
        beta0 = o.beta_init if o.beta_init is not None else (dim // heads) ** -0.5
        self.log_beta = nn.Parameter(torch.tensor(math.log(beta0)), requires_grad=o.learn_beta)
        hidden = o.ff_mult * dim
        self.w1 = nn.Linear(dim, hidden) if o.ff != "none" else None
        self.w2 = nn.Linear(hidden, dim, bias=False) if o.ff == "ff2w" else None
        if o.eta == "psd":
            self.eta_l = nn.Parameter(torch.eye(dim))  # η₊ = c·L Lᵀ, PSD by construction
            self.eta_k = nn.Parameter(torch.zeros(dim, dim))  # η₋ = c·(K - Kᵀ), unconstrained
        elif o.eta == "free":
            # The released code's output projection: a random D×D matrix (its symmetric
            # part is indefinite), scaled to the size of c·I.
            self.eta_free = nn.Parameter(torch.randn(dim, dim) * (o.step / math.sqrt(dim)))
        self._probe: torch.Tensor | None = None  # a few recent inputs, for diagnostics()

    # ----------------------------------------------------------------- parameters as used

    @property
    def alpha(self) -> torch.Tensor:  # (H,)
        return F.softplus(self.alpha_raw)

    @property
    def beta(self) -> torch.Tensor:  # ()
        return self.log_beta.exp()

    def eta_matrix(self) -> torch.Tensor:
        """η as a (D, D) matrix (the update is ``x - η v`` for column vectors v)."""
        o = self.options
        if o.eta == "norm":
            return torch.diag(o.step * self.norm.weight)
        if o.eta == "psd":
            return o.step * (self.eta_l @ self.eta_l.T + self.eta_k - self.eta_k.T)
        return self.eta_free

    def _apply_eta(self, v: torch.Tensor) -> torch.Tensor:  # (B, N, D) -> (B, N, D)
        if self.options.eta == "norm":
            return (self.options.step * self.norm.weight) * v  # diagonal: no matmul
        return v @ self.eta_matrix().T

    # ---------------------------------------------------------------------- energies

    def _ff_energy(self, g: torch.Tensor) -> torch.Tensor:  # (B, N, D) -> (B, N)
        o = self.options
        if o.ff == "ff1":
            return ff1_energy(g, self.w1.weight, self.w1.bias, o.activation)
        if o.ff == "ff2w":
            return ff2w_energy(g, self.w1.weight, self.w1.bias, self.w2.weight, o.activation)
        return g.new_zeros(g.shape[:2])

    def token_energy(self, g_query: torch.Tensor, g_key: torch.Tensor | None = None) -> torch.Tensor:
        """Per-token energy E_A of normalized tokens, (B, N, D) -> (B, N).

        ``g_key`` (default ``g_query``) supplies the keys: with a separate one, the causal
        E_A is a function of token A's own state alone, its prefix held fixed.
        """
        g_key = g_query if g_key is None else g_key
        q = split_heads(self.wq(g_query), self.heads)  # (B, H, N, Dh)
        k = split_heads(self.wk(g_key), self.heads)
        return attention_energy(q, k, self.alpha, self.beta, self.causal) + self._ff_energy(g_query)

    def energy(self, x: torch.Tensor) -> torch.Tensor:
        """Per-token energy of raw states x: (B, N, D) -> (B, N). The total is ``.sum(-1)``."""
        return self.token_energy(self.norm(x))

    def energy_grad(self, g: torch.Tensor) -> torch.Tensor:
        """∂E/∂g in closed form, (B, N, D) -> (B, N, D).

        Causal: row A is ∂E_A/∂g_A (each token descends its own energy). Bidirectional:
        ∂(Σ_A E_A)/∂g, query and key terms.
        """
        o = self.options
        q = split_heads(self.wq(g), self.heads)  # (B, H, N, Dh)
        k = split_heads(self.wk(g), self.heads)
        dq, dk = attention_energy_grad(q, k, self.alpha, self.beta, self.causal)
        v = merge_heads(dq) @ self.wq.weight  # back through q = W_Q g
        if dk is not None:
            v = v + merge_heads(dk) @ self.wk.weight
        if o.ff == "ff1":
            v = v + ff1_grad(g, self.w1.weight, self.w1.bias, o.activation)
        elif o.ff == "ff2w":
            v = v + ff2w_grad(g, self.w1.weight, self.w1.bias, self.w2.weight, o.activation)
        return v

    def _autograd_energy_grad(self, g: torch.Tensor) -> torch.Tensor:
        """∂E/∂g by torch.autograd on the plain energy (differentiable: create_graph)."""
        if not g.requires_grad:
            g = g.detach().requires_grad_(True)
        if self.causal:
            gq = g.clone()  # a separate node: grad w.r.t. it is ∂E_A/∂g_A, keys held apart
            e = self.token_energy(gq, g).sum()
        else:
            gq = g
            e = self.token_energy(g).sum()
        (v,) = torch.autograd.grad(e, gq, create_graph=True)
        return v

    # ----------------------------------------------------------------------- dynamics

    def states(self, x: torch.Tensor) -> list[torch.Tensor]:
        """x_0 .. x_T as T+1 tensors (B, N, D), stepped by the closed form (the forward's function)."""
        out = [x]
        delta = torch.zeros_like(x)
        for _ in range(self.options.steps):
            delta = delta - self._apply_eta(self.energy_grad(self.norm(x + delta)))
            out.append(x + delta)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, D) -> (B, N, D)
        self._probe = x[:4].detach().clone()
        return self._fused_delta(x)

    def closed_form(self, x: torch.Tensor) -> torch.Tensor:
        """The dynamics step by step through :meth:`energy_grad`: the plain closed form that
        :meth:`_fused_delta` reorganises (and the fast path before it existed)."""
        # Accumulate the update apart from x: at |x| ~ 1e4, x_T - x would cancel to zero bits.
        delta = torch.zeros_like(x)
        for _ in range(self.options.steps):
            delta = delta - self._apply_eta(self.energy_grad(self.norm(x + delta)))
        return delta

    def _fused_delta(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, D) -> (B, N, D)
        """:meth:`closed_form` with the per-step work cut down (same function, other rounding).

        - Weights are shared by all T steps, so everything that only involves weights is done
          once, outside the loop: [W_Q; W_K] concatenated (one projection matmul per step), and
          -η folded into the back-projections, Wη := -(W ηᵀ), so a step's update is
          ``delta + [dq | dk] W_QKη + c W₁η`` (two addmm, no elementwise pass over the tokens).
        - Tokens are flattened to (B·N, D); bidirectional, the [q ; k] projection is written
          channel-major and ``bidir_attention_reads_t`` reads every head of every sequence as a
          ``(Dh, N)`` block (one copy in, one out); its -α_h (a per-channel scale) is folded
          into the back-projection too.
        - bidirectional: that function's hand-written backward touches each (N, N) tensor
          once (autograd's generic one of the closed form makes several passes over them,
          which dominates at short N).
        - relu FF1: σ σ' = relu(h)·1[h > 0] = relu(h), one op instead of three.
        """
        o, d, heads = self.options, self.dim, self.heads
        b, n, _ = x.shape
        dh, ff1 = d // heads, o.ff == "ff1"

        eta_diag = o.step * self.norm.weight if o.eta == "norm" else None  # (D,): η = c·diag(γ)
        eta_t = self.eta_matrix().T if o.eta != "norm" else None  # (D, D), once for all steps

        def fold(w: torch.Tensor) -> torch.Tensor:  # (K, D) -> -(W ηᵀ): the force of W, stepped
            return w * -eta_diag if eta_t is None else -(w @ eta_t)  # diagonal η: column scaling

        w_qk = torch.cat([self.wq.weight, self.wk.weight])  # (2D, D), projection [q | k]
        if self.causal:
            w_back = fold(self.wq.weight)  # (D, D); the causal dq carries its -α
        else:  # the reads are [P k | Pᵀ q]: (dq, dk) = -α_h times those rows
            neg_a = (-self.alpha).repeat_interleave(d // heads)  # (D,), -α_h per channel of head h
            w_back = fold(w_qk * neg_a.repeat(2).unsqueeze(1))  # (2D, D)
        w_ff_back = fold(-2.0 * self.w1.weight) if ff1 else None  # (F, D): ∂E/∂g = -2 W₁ᵀ(σ σ')
        alpha, beta = self.alpha, self.beta
        x2 = x.reshape(b * n, d)
        delta = torch.zeros_like(x2)  # (B·N, D)
        for _ in range(o.steps):
            g = self.norm(x2 + delta)  # (B·N, D)
            if self.causal:  # SDPA on the shifted sequences (attention_energy_grad), query term only
                hqk = F.linear(g, w_qk)  # (B·N, 2D) = [q | k]
                q, k = (split_heads(t.reshape(b, n, d), heads) for t in hqk.split(d, dim=1))  # (B, H, N, Dh)
                dq, _ = attention_energy_grad(q, k, alpha, beta, True)
                delta = torch.addmm(delta, merge_heads(dq).reshape(b * n, d), w_back)
            else:  # channel-major: [q ; k] as (2D, B·N), then (2, H·B, Dh, N) blocks, one copy each way
                hqk = torch.mm(w_qk, g.t()).view(2, heads, dh, b, n)
                reads = bidir_attention_reads_t(hqk.transpose(2, 3).reshape(2, heads * b, dh, n), beta)
                reads = reads.view(2, heads, b, dh, n).transpose(2, 3).reshape(2 * d, b * n)  # [A ; C]
                delta = torch.addmm(delta, reads.t(), w_back)
            if ff1:
                hf = F.linear(g, self.w1.weight, self.w1.bias)  # (B·N, F)
                if o.activation == "relu":
                    coef = F.relu(hf)
                else:
                    s, ds = activation_and_slope(hf, o.activation)
                    coef = s * ds
                delta = torch.addmm(delta, coef, w_ff_back)
            elif o.ff == "ff2w":
                v_ff = ff2w_grad(g, self.w1.weight, self.w1.bias, self.w2.weight, o.activation)
                delta = delta - (eta_diag * v_ff if eta_t is None else v_ff @ eta_t)
        return delta.view(b, n, d)

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """The same dynamics with ∂E/∂g from torch.autograd on the plain energy function."""
        with torch.enable_grad():
            delta = torch.zeros_like(x)
            for _ in range(self.options.steps):
                delta = delta - self._apply_eta(self._autograd_energy_grad(self.norm(x + delta)))
        return delta

    def energy_trace(self, x: torch.Tensor) -> torch.Tensor:
        """Per-token energy before the first step and after each: (T + 1, B, N).

        Grad mode is the caller's (wrap in ``torch.no_grad()`` to log).
        """
        return torch.stack([self.energy(s) for s in self.states(x)])

    def diagnostics(self) -> dict[str, float]:
        """β, mean α, ‖η‖ and, on the last forward's first inputs, the summed-energy trace."""
        with torch.no_grad():
            out = {
                "beta": float(self.beta),
                "alpha_mean": float(self.alpha.mean()),
                "eta_norm": float(torch.linalg.matrix_norm(self.eta_matrix().float(), ord=2)),
            }
            if self._probe is None:
                return out
            total = self.energy_trace(self._probe).float().sum(-1)  # (T+1, B)
        steps = total[1:] - total[:-1]
        out["energy_start"] = float(total[0].mean())
        out["energy_end"] = float(total[-1].mean())
        out["energy_drop_per_step"] = float(-steps.mean())
        out["energy_rise_fraction"] = float((steps > 0).float().mean())
        return out


# ============================================================================ baseline


@dataclass(frozen=True)
class GPTRecOptions:
    steps: int = 4  # T: applications of the one shared parallel block
    mlp_ratio: int = 4  # MLP hidden width in multiples of dim
    activation: str = "gelu"  # gelu | relu (the released baseline uses relu)
    norm: str = "layer"  # layer | rms: LN₁ (attention) and LN₂ (MLP)
    bias: bool = True  # biases in the projections and the MLP

    def __post_init__(self) -> None:
        _one_of(self.activation, ("gelu", "relu"), "activation")
        _one_of(self.norm, ("layer", "rms"), "norm")
        if not (isinstance(self.steps, int) and self.steps >= 1):
            raise ValueError(f"steps must be an int >= 1, got {self.steps!r}")
        if self.mlp_ratio < 1:
            raise ValueError(f"mlp_ratio must be >= 1, got {self.mlp_ratio!r}")


def _gpt_rec_space(trial) -> dict:
    return {"steps": trial.suggest_int("gpt-rec-parallel.steps", 1, 6)}


@register_mixer("gpt-rec-parallel", options=GPTRecOptions, space=_gpt_rec_space)
class GPTRecParallel(Mixer):
    """Weight-shared GPT-J parallel block x <- x + attn(LN x) + MLP(LN x), applied T times."""

    def __init__(self, dim: int, heads: int, causal: bool, options: GPTRecOptions) -> None:
        super().__init__()
        check_heads(dim, heads, "gpt-rec-parallel")
        self.dim, self.heads, self.causal, self.options = dim, heads, causal, options
        o = options
        self.ln1, self.ln2 = make_norm(o.norm, dim), make_norm(o.norm, dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=o.bias)
        self.proj = nn.Linear(dim, dim, bias=o.bias)
        self.up = nn.Linear(dim, o.mlp_ratio * dim, bias=o.bias)
        self.down = nn.Linear(o.mlp_ratio * dim, dim, bias=o.bias)
        with torch.no_grad():  # GPT-2's residual scaling: 2T branches add into the stream
            self.proj.weight.mul_((2 * o.steps) ** -0.5)
            self.down.weight.mul_((2 * o.steps) ** -0.5)

    def _mlp(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(self.ln2(x))
        return self.down(F.gelu(h) if self.options.activation == "gelu" else F.relu(h))

    def _attend(self, x: torch.Tensor, plain: bool) -> torch.Tensor:  # (B, N, D) -> (B, N, D)
        if not plain and small_attention(x.device, self.dim // self.heads, x.shape[1]):
            y = attention_t(self.ln1(x), self.qkv, self.heads, self.causal)  # (B N, D), channel-major
            return F.linear(y, self.proj.weight, self.proj.bias).view(x.shape)
        q, k, v = (split_heads(t, self.heads) for t in self.qkv(self.ln1(x)).chunk(3, dim=-1))
        if not plain:
            y = attend(q, k, v, self.causal)
        else:
            y = attention_reference(q, k, v, self.causal)
        return self.proj(merge_heads(y))

    def _run(self, x: torch.Tensor, plain: bool) -> torch.Tensor:
        delta = torch.zeros_like(x)  # the update, kept apart from x (see NRGPTMixer.forward)
        for _ in range(self.options.steps):
            xt = x + delta
            delta = delta + self._attend(xt, plain) + self._mlp(xt)
        return delta

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, D) -> (B, N, D)
        return self._run(x, plain=False)

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """Explicit softmax(QKᵀ/√d)V in place of the fused kernel."""
        return self._run(x, plain=True)


__all__ = ["GPTRecOptions", "GPTRecParallel", "NRGPTMixer", "NRGPTOptions"]
