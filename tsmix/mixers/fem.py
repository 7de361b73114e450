"""Free Energy Mixer (FEM, arXiv 2602.07160): a per-channel, value-aware read on top of any prior.

    o_t = g_t * [(1 - lambda_t) * mu_t + lambda_t * F_t]
    mu_t = sum_i p_t(i) v_i,   F_t = (1/beta) log sum_i p_t(i) exp(beta v_i)   (per value channel)

Components, each switchable for ablations:
  C (``cond``)        low-rank time-decay conditioning: a log-space decayed scan of the input
                      that modulates the prior's inputs, the values and the gates (``z (1 + s)``);
  L (``lse``)         the free-energy read, in the same prior pass as mu (``tsmix.ops.lse_read``);
  T (``temperature``) lambda = sigmoid(.) per channel and token (off: read F alone);
  G (``outer_gate``)  g = softplus(.) normalized to unit RMS per head (off: g = 1).
Priors (``tsmix.ops.fem_priors``): softmax through one SDPA call (``fem-sm``), gated linear
attention (``fem-gla``), a selective state-space scan (``fem-ssm``), AFT with a per-channel
position decay (``fem-aft``); each causal or bidirectional. Parameter budget: values of width
``value_ratio * D`` (paper: D/2) and Q, K of width D give Q + K + V + lambda + g + O = 4 D^2.

Every projection C modulates is one fused matmul, so C's modulation is one multiply.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from tsmix.errors import TsmixError
from tsmix.mixers.linear import feature_map, log_feature_map
from tsmix.mixers.softmax import check_heads, split_heads
from tsmix.ops import fem_priors as P
from tsmix.ops.gla_chunk import MAX_FACTORIZED_CHUNK, floor_decay
from tsmix.ops.lse_read import bound_values, free_energy_reference
from tsmix.ops.rope import rope
from tsmix.ops.streaming import run_steps
from tsmix.ops.time_decay import TimeDecayCondition
from tsmix.registry import register_mixer

BETA_FLOOR = 1e-4  # beta = softplus(raw) + floor: F = log(Z) / beta stays well defined
# Floors of the positive maps of the linear-time priors: the token's own weight then keeps the
# prior's normalizer away from 0 even when every feature underflows (|x| ~ 1e4), so neither the
# read nor its gradient can blow up.
FEATURE_FLOOR = 1e-3  # GLA features phi(z) = elu(z) + 1 + floor
SSM_FLOOR = 1e-4  # SSM step sizes and input maps: softplus(.) + floor


@dataclass(frozen=True)
class FEMOptions:
    value_ratio: float = 0.5  # value width E = ratio * D; 0.5 is the paper's budget (≈ 4 D^2 params)
    qk_ratio: float = 1.0  # width of Q and of K, relative to D (attention-like priors)
    cond: bool = True  # C: time-decay conditioning of prior inputs, values and gates
    lse: bool = True  # L: free-energy (log-sum-exp) read beside the mean read
    temperature: bool = True  # T: per-channel gate lambda between mu and F (off: read F only)
    outer_gate: bool = True  # G: softplus outer gate normalized to unit RMS per head (off: g = 1)
    cond_rank: int = 0  # hidden width of C; 0 = max(4, D // 16), the paper's D/16
    beta_init: float = 2.0  # initial inverse temperature (per channel, learnable, positive)
    exp_cap: float = 30.0  # |beta v| is clamped to this before exp: Z stays in [e^-cap, e^cap]
    bias: bool = True  # bias in the projections
    # Recompute the elementwise work around the prior read (projection, C, bounds, gates, LSE
    # unpack, combine) in backward instead of storing it: activation memory close to attention's
    # for some extra time. The prior read itself (SDPA, scans) is never recomputed.
    recompute: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.value_ratio <= 4:
            raise ValueError(f"value_ratio must be in (0, 4], got {self.value_ratio}")
        if not 0 < self.qk_ratio <= 4:
            raise ValueError(f"qk_ratio must be in (0, 4], got {self.qk_ratio}")
        if self.beta_init <= 2 * BETA_FLOOR:
            raise ValueError(f"beta_init must be > {2 * BETA_FLOOR}, got {self.beta_init}")
        if not 0 < self.exp_cap <= 80:
            raise ValueError(f"exp_cap must be in (0, 80] so exp stays finite in float32, got {self.exp_cap}")
        if self.cond_rank < 0:
            raise ValueError(f"cond_rank must be >= 0 (0 = automatic), got {self.cond_rank}")


def _inv_softplus(y: torch.Tensor | float):
    y = torch.as_tensor(y, dtype=torch.float32)
    return y + torch.log(-torch.expm1(-y))


def _phi(z: torch.Tensor) -> torch.Tensor:
    return feature_map(z) + FEATURE_FLOOR


def _log_phi(z: torch.Tensor) -> torch.Tensor:
    """log(elu(z) + 1 + floor) without forming an underflowing feature."""
    return torch.logaddexp(log_feature_map(z), torch.full_like(z, math.log(FEATURE_FLOOR)))


class FreeEnergyMixer(nn.Module):
    """FEM read on a selection prior; subclasses define the prior."""

    name = "fem"
    per_channel = False  # prior per value channel (SSM, AFT) or per head (softmax, GLA)
    streaming = True  # a constant-size recurrent state exists (not for softmax)

    def __init__(self, dim: int, heads: int, causal: bool, options: FEMOptions) -> None:
        super().__init__()
        check_heads(dim, heads, self.name)
        o = options
        e = round(o.value_ratio * dim)
        if e < heads or e % heads:
            raise TsmixError(
                f"mixer {self.name!r}: value width round(value_ratio * dim) = {e} is not a positive "
                f"multiple of heads = {heads}; pick value_ratio so that value_ratio * {dim} is one"
            )
        self.dim, self.heads, self.causal, self.options = dim, heads, causal, o
        self.e, self.dv = e, e // heads
        widths = {"v": e}
        if o.lse and o.temperature:
            widths["lam"] = e
        if o.outer_gate:
            widths["gate"] = e
        widths.update(self._build_prior(dim, heads))  # the prior's modulated inputs
        self.widths = widths
        self.in_proj = nn.Linear(dim, sum(widths.values()), bias=o.bias)  # all C-modulated inputs
        self.beta_raw = None
        if o.lse:
            self.beta_raw = nn.Parameter(_inv_softplus(o.beta_init - BETA_FLOOR).repeat(e))
        self.out = nn.Linear(e, dim, bias=o.bias)
        self.cond = None
        if o.cond:
            rank = o.cond_rank or max(4, dim // 16)
            rank += rank % 2  # bidirectional C splits it in halves
            self.cond = TimeDecayCondition(dim, rank, sum(widths.values()), causal, o.bias)
        self._init_prior()
        self._last_lambda: torch.Tensor | None = None

    def slice(self, name: str) -> slice:
        """Rows of ``in_proj`` (and columns of C's output) that produce input ``name``."""
        start = 0
        for key, w in self.widths.items():
            if key == name:
                return slice(start, start + w)
            start += w
        raise KeyError(name)

    # --- prior interface (subclasses) -------------------------------------------------------
    def _build_prior(self, dim: int, heads: int) -> dict[str, int]:
        raise NotImplementedError  # create unmodulated prior parameters; return modulated widths

    def _init_prior(self) -> None:
        pass

    def _prior_inputs(self, x: torch.Tensor, parts: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def _prior_read(self, pin: dict, u: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError  # u in the prior's layout -> read, same layout

    def _prior_logp(self, pin: dict) -> torch.Tensor:
        raise NotImplementedError  # explicit log p: (B, H, N, N) or (B, E, N, N)

    def _prior_step(self, pin: dict, u: torch.Tensor, state: torch.Tensor):
        raise NotImplementedError

    def _prior_state(self, batch: int, cols: int, device, dtype) -> torch.Tensor:
        raise NotImplementedError

    # --- shared read --------------------------------------------------------------------------
    def beta(self) -> torch.Tensor:
        """Per-channel inverse temperature (E,), positive."""
        return F.softplus(self.beta_raw) + BETA_FLOOR

    def _project(self, x: torch.Tensor, s: torch.Tensor | None):
        """Fused projection, C modulation, gates, bounded values. Gates and values come back in
        the read layout: (B, N, H, dv) for per-head priors, (B, N, E) for per-channel ones."""
        z = self.in_proj(x)  # (B, N, sum of widths)
        if s is not None:
            z = z * (1.0 + s)  # C: one multiply for every modulated input
        parts = dict(zip(self.widths, z.split(list(self.widths.values()), dim=-1)))
        pin = self._prior_inputs(x, parts)
        lay = self._layout
        lam = torch.sigmoid(lay(parts["lam"])) if "lam" in parts else None
        g = None
        if "gate" in parts:  # softplus, then unit RMS over each head's channels
            g = F.softplus(parts["gate"]).view(*x.shape[:2], self.heads, self.dv)
            g = F.rms_norm(g, (self.dv,), eps=1e-6)
            g = g.reshape(*x.shape[:2], self.e) if self.per_channel else g
        v, beta = parts["v"], None
        if self.beta_raw is not None:
            beta = self.beta().to(x.dtype)
            v = bound_values(v, beta, self.options.exp_cap)  # |beta v| <= exp_cap before exp
            beta = lay(beta)
        return pin, lay(v), lam, g, beta

    def _layout(self, t: torch.Tensor) -> torch.Tensor:
        """(..., E) -> (..., H, dv) for per-head priors (a view)."""
        return t if self.per_channel else t.view(*t.shape[:-1], self.heads, self.dv)

    def _pack(self, v: torch.Tensor, beta: torch.Tensor | None) -> torch.Tensor:
        """Values to read: per channel (B, N, E, P); per head (B, H, N, P*dv), P = 2 with L."""
        if self.per_channel:
            return v[..., None] if beta is None else torch.stack([v, torch.exp(beta * v)], dim=-1)
        u = v if beta is None else torch.cat([v, torch.exp(beta * v)], dim=-1)  # (B, N, H, P*dv)
        return u.transpose(1, 2)

    def _unpack(self, r: torch.Tensor, lse: bool):
        if self.per_channel:
            return r[..., 0], (r[..., 1] if lse else None)
        r = r.transpose(1, 2)  # (B, N, H, P*dv)
        return r[..., : self.dv], (r[..., self.dv :] if lse else None)

    @staticmethod
    def _free_energy(z: torch.Tensor | None, beta: torch.Tensor | None) -> torch.Tensor | None:
        """F = log(Z) / beta from the prior's read of exp(beta v)."""
        return None if z is None else torch.log(z.clamp_min(torch.finfo(z.dtype).tiny)) / beta

    def _mix(self, mu, f, lam, g) -> torch.Tensor:
        """``g [(1 - lam) mu + lam F]`` -> (B, N, E)."""
        o = mu
        if f is not None:
            o = f if lam is None else torch.lerp(mu, f, lam)  # (1 - lam) mu + lam F
        if g is not None:
            o = o * g
        if lam is not None:
            self._last_lambda = lam.detach().mean()
        return o.reshape(*o.shape[:2], self.e)

    def _combine(self, mu, f, lam, g) -> torch.Tensor:
        return self.out(self._mix(mu, f, lam, g))

    def _pre(self, x: torch.Tensor):
        s = self.cond(x) if self.cond is not None else None
        pin, v, lam, g, beta = self._project(x, s)
        return pin, self._pack(v, beta), lam, g, beta

    def _post(self, r: torch.Tensor, lam, g, beta) -> torch.Tensor:
        mu, z = self._unpack(r, beta is not None)
        return self._mix(mu, self._free_energy(z, beta), lam, g)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, D) -> (B, N, D)
        if self.options.recompute and torch.is_grad_enabled():
            pin, u, lam, g, beta = checkpoint(self._pre, x, use_reentrant=False)
            r = self._prior_read(pin, u)
            return self.out(checkpoint(self._post, r, lam, g, beta, use_reentrant=False))
        pin, u, lam, g, beta = self._pre(x)
        return self.out(self._post(self._prior_read(pin, u), lam, g, beta))

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """Plain path: explicit log-prior matrix, F by logsumexp in log space, C by a loop."""
        s = self.cond.reference(x) if self.cond is not None else None
        pin, v, lam, g, beta = self._project(x, s)
        logp = self._prior_logp(pin)  # (B, H, N, N) or (B, E, N, N)
        # values as (B, H|E, N, dv|1) and beta as (H|E, 1, dv|1)
        vv = v.transpose(1, 2)[..., None] if self.per_channel else v.transpose(1, 2)
        if beta is None:
            mu, f = logp.exp() @ vv, None
        else:
            bb = beta[:, None, None] if self.per_channel else beta[:, None, :]
            mu, f = free_energy_reference(logp, vv, bb)

        def back(t):
            if t is None:
                return None
            return t[..., 0].transpose(1, 2) if self.per_channel else t.transpose(1, 2)

        return self._combine(back(mu), back(f), lam, g)

    # --- streaming ----------------------------------------------------------------------------
    def init_state(self, batch: int, device=None, dtype=None):
        cols = 2 if self.options.lse else 1
        h = None
        if self.cond is not None:
            h = torch.zeros(batch, self.cond.rank, device=device, dtype=dtype)
        return h, self._prior_state(batch, cols, device, dtype)

    def step(self, x_t: torch.Tensor, state=None):
        """Streaming: ``x_t (B, D)`` and the state -> ``(y_t (B, D), new state)``; O(1) per token."""
        if not self.causal or not self.streaming:
            raise TsmixError(
                f"mixer {self.name!r}: step() streams causal linear-time priors only; build "
                f"fem-gla, fem-ssm or fem-aft with causal=True"
            )
        if state is None:
            state = self.init_state(x_t.shape[0], x_t.device, x_t.dtype)
        h, ps = state
        x = x_t[:, None]  # (B, 1, D)
        s = None
        if self.cond is not None:
            s, h = self.cond.step(x, h)
        pin, v, lam, g, beta = self._project(x, s)
        r, ps = self._prior_step(pin, self._pack(v, beta), ps)
        mu, z = self._unpack(r, beta is not None)
        return self._combine(mu, self._free_energy(z, beta), lam, g)[:, 0], (h, ps)

    def recurrent(self, x: torch.Tensor) -> torch.Tensor:
        """The streaming form over a whole sequence (B, N, D) -> (B, N, D)."""
        return run_steps(self.step, x)

    def diagnostics(self) -> dict[str, float]:
        d: dict[str, float] = {}
        if self.beta_raw is not None:
            beta = self.beta().detach()
            d.update(beta_mean=float(beta.mean()), beta_min=float(beta.min()), beta_max=float(beta.max()))
        if self._last_lambda is not None:
            d["lambda_mean"] = float(self._last_lambda)
        return d


def _qk_width(dim: int, heads: int, ratio: float, name: str, even: bool) -> int:
    w = round(ratio * dim)
    unit = heads * (2 if even else 1)
    if w < unit or w % unit:
        raise TsmixError(
            f"mixer {name!r}: Q/K width round(qk_ratio * dim) = {w} must be a positive multiple of "
            f"{unit} (heads{' x 2 for rope' if even else ''}); adjust qk_ratio"
        )
    return w


def _space(name: str, extra=None):
    def space(trial) -> dict:
        opts = {
            "beta_init": trial.suggest_float(f"{name}.beta_init", 0.5, 4.0, log=True),
            "cond": trial.suggest_categorical(f"{name}.cond", [True, False]),
            "outer_gate": trial.suggest_categorical(f"{name}.outer_gate", [True, False]),
        }
        if extra is not None:
            opts.update(extra(trial))
        return opts

    return space


# ----------------------------------------------------------------------------- priors


@dataclass(frozen=True)
class FEMSMOptions(FEMOptions):
    dropout: float = 0.0  # attention-probability dropout (training only)
    rope: bool = False  # rotary position embedding on Q, K
    rope_base: float = 10000.0  # RoPE frequency base
    # Q, K entries are clamped to +-qk_cap: float32 logits then stay where SDPA's backward, which
    # recomputes exp(s - logsumexp), is accurate (at |s| ~ 1e9 one ulp is 64, and it overflows).
    qk_cap: float = 20.0


@register_mixer(
    "fem-sm",
    options=FEMSMOptions,
    space=_space("fem-sm", lambda t: {"dropout": t.suggest_float("fem-sm.dropout", 0.0, 0.3)}),
)
class FEMSoftmax(FreeEnergyMixer):
    """FEM on a softmax-attention prior: [v, exp(beta v)] read by one SDPA call."""

    name, streaming = "fem-sm", False

    def _build_prior(self, dim, heads):
        if self.options.qk_cap <= 0:
            raise TsmixError(f"mixer {self.name!r}: qk_cap must be > 0, got {self.options.qk_cap}")
        w = _qk_width(dim, heads, self.options.qk_ratio, self.name, self.options.rope)
        return {"q": w, "k": w}

    def _prior_inputs(self, x, parts):
        cap = self.options.qk_cap
        q = split_heads(parts["q"].clamp(-cap, cap), self.heads)  # (B, H, N, d_k)
        k = split_heads(parts["k"].clamp(-cap, cap), self.heads)
        if self.options.rope:
            q, k = rope(q, self.options.rope_base), rope(k, self.options.rope_base)
        return {"q": q, "k": k}

    def _prior_read(self, pin, u):
        p = self.options.dropout if self.training else 0.0
        return P.sm_read(pin["q"], pin["k"], u, self.causal, p)

    def _prior_logp(self, pin):
        return P.sm_logp(pin["q"], pin["k"], self.causal)


@dataclass(frozen=True)
class FEMGLAOptions(FEMOptions):
    # decay granularity: "head" = one scalar per head and step (the FEM release; exact chunked
    # scan with long chunks, few states) | "key" = per key dim, low rank (the GLA paper)
    decay: str = "head"
    gate_rank: int = 16  # rank of the per-key-dim gate D -> rank -> D_qk (decay="key")
    gate_tau: float = 16.0  # a = sigmoid(.)^(1/tau): slow decay (long memory) at init
    chunk: int = 0  # chunk length of the parallel scan; 0 = 64 for "head", 8 for "key" (max 8)


@register_mixer(
    "fem-gla",
    options=FEMGLAOptions,
    space=_space(
        "fem-gla",
        lambda t: {
            "gate_tau": t.suggest_float("fem-gla.gate_tau", 4.0, 32.0, log=True),
            "decay": t.suggest_categorical("fem-gla.decay", ["head", "key"]),
        },
    ),
)
class FEMGLA(FreeEnergyMixer):
    """FEM on a gated-linear-attention prior (positive features, per-head or per-key-dim decay)."""

    name = "fem-gla"

    def _build_prior(self, dim, heads):
        o = self.options
        if o.decay not in ("head", "key"):
            raise TsmixError(f"mixer {self.name!r}: decay must be 'head' or 'key', got {o.decay!r}")
        self.chunk = o.chunk or (64 if o.decay == "head" else MAX_FACTORIZED_CHUNK)
        top = MAX_FACTORIZED_CHUNK if o.decay == "key" else 4096
        if not 2 <= self.chunk <= top:
            raise TsmixError(f"mixer {self.name!r}: chunk must be in [2, {top}] for decay={o.decay!r}")
        if o.gate_rank < 1 or o.gate_tau <= 0:
            raise TsmixError(f"mixer {self.name!r}: need gate_rank >= 1 and gate_tau > 0")
        w = _qk_width(dim, heads, o.qk_ratio, self.name, False)
        if o.decay == "key":
            self.gate = nn.Sequential(nn.Linear(dim, o.gate_rank, bias=False), nn.Linear(o.gate_rank, w))
        else:
            self.gate = nn.Linear(dim, heads)
        return {"q": w, "k": w}

    def _prior_inputs(self, x, parts):
        log_a = floor_decay(F.logsigmoid(self.gate(x)) / self.options.gate_tau)  # (B, N, H or D_qk)
        return {
            "zq": split_heads(parts["q"], self.heads),  # (B, H, N, d_k) pre-features
            "zk": split_heads(parts["k"], self.heads),
            "log_a": split_heads(log_a, self.heads),  # (B, H, N, 1 or d_k)
        }

    def _prior_read(self, pin, u):
        q, k = _phi(pin["zq"]), _phi(pin["zk"])
        return P.gla_prior_read(q, k, u, pin["log_a"], self.causal, self.chunk)

    def _prior_logp(self, pin):
        return P.gla_prior_logp(_log_phi(pin["zq"]), _log_phi(pin["zk"]), pin["log_a"], self.causal)

    def _prior_state(self, batch, cols, device, dtype):
        dk = self.widths["q"] // self.heads
        return torch.zeros(batch, self.heads, dk, cols * self.dv + 1, device=device, dtype=dtype)

    def _prior_step(self, pin, u, state):
        q, k = _phi(pin["zq"][:, :, 0]), _phi(pin["zk"][:, :, 0])
        r, state = P.gla_prior_step(q, k, u[:, :, 0], pin["log_a"][:, :, 0], state)
        return r[:, :, None], state


@dataclass(frozen=True)
class FEMSSMOptions(FEMOptions):
    state: int = 16  # state size R per channel (Mamba's N)
    dt_min: float = 1e-3  # initial step sizes are log-uniform in [dt_min, dt_max]
    dt_max: float = 1e-1


@register_mixer(
    "fem-ssm",
    options=FEMSSMOptions,
    space=_space("fem-ssm", lambda t: {"state": t.suggest_categorical("fem-ssm.state", [8, 16])}),
)
class FEMSSM(FreeEnergyMixer):
    """FEM on a selective state-space prior (Mamba-style scan, one normalized prior per channel)."""

    name, per_channel = "fem-ssm", True

    def _build_prior(self, dim, heads):
        o = self.options
        if o.state < 1 or not 0 < o.dt_min <= o.dt_max:
            raise TsmixError(f"mixer {self.name!r}: need state >= 1 and 0 < dt_min <= dt_max")
        self.bc_proj = nn.Linear(dim, 2 * o.state, bias=o.bias)
        r = torch.arange(1, o.state + 1, dtype=torch.float32)
        self.a_log = nn.Parameter(torch.log(r).repeat(self.e, 1))  # S4D-real: a = -(1 .. R)
        return {"dt": self.e}

    def _init_prior(self):
        o, rows = self.options, self.slice("dt")
        dt = torch.exp(torch.linspace(math.log(o.dt_min), math.log(o.dt_max), self.e))
        with torch.no_grad():  # Mamba's init: softplus(bias) = dt, small weights
            self.in_proj.weight[rows].mul_(0.1)
            if self.in_proj.bias is not None:
                self.in_proj.bias[rows].copy_(_inv_softplus(dt - SSM_FLOOR))

    def _prior_inputs(self, x, parts):
        dt = F.softplus(parts["dt"]) + SSM_FLOOR  # (B, N, E) > 0
        b, c = self.bc_proj(x).chunk(2, dim=-1)
        # positive input map; the output map is a distribution over the state (its scale cancels)
        return {"dt": dt, "a": -self.a_log.exp(), "b": F.softplus(b) + SSM_FLOOR, "c": torch.softmax(c, -1)}

    def _prior_read(self, pin, u):
        return P.ssm_prior_read(pin["dt"], pin["a"], pin["b"], pin["c"], u, self.causal)

    def _prior_logp(self, pin):
        return P.ssm_prior_logp(pin["dt"], pin["a"], pin["b"], pin["c"], self.causal)

    def _prior_state(self, batch, cols, device, dtype):
        return torch.zeros(batch, self.e, self.options.state, cols + 1, device=device, dtype=dtype)

    def _prior_step(self, pin, u, state):
        r, state = P.ssm_prior_step(pin["dt"][:, 0], pin["a"], pin["b"][:, 0], pin["c"][:, 0], u[:, 0], state)
        return r[:, None], state


@dataclass(frozen=True)
class FEMAFTOptions(FEMOptions):
    key_cap: float = 20.0  # AFT keys are clamped to +-key_cap before exp
    decay_min: float = 1e-3  # per-channel position decays gamma, log-spaced in [decay_min, decay_max]
    decay_max: float = 1.0


@register_mixer("fem-aft", options=FEMAFTOptions, space=_space("fem-aft"))
class FEMAFT(FreeEnergyMixer):
    """FEM on an AFT prior: per-channel weights exp(key_s - gamma |t - s|) (AFT-simple at gamma = 0)."""

    name, per_channel = "fem-aft", True

    def _build_prior(self, dim, heads):
        o = self.options
        if not 0 < o.key_cap <= 40 or not 0 < o.decay_min <= o.decay_max:
            raise TsmixError(f"mixer {self.name!r}: need 0 < key_cap <= 40 and 0 < decay_min <= decay_max")
        gamma = torch.exp(torch.linspace(math.log(o.decay_min), math.log(o.decay_max), self.e))
        self.decay_raw = nn.Parameter(_inv_softplus(gamma))
        return {"key": self.e}

    def _prior_inputs(self, x, parts):
        cap = self.options.key_cap
        return {"key": parts["key"].clamp(-cap, cap), "log_decay": -F.softplus(self.decay_raw).to(x.dtype)}

    def _prior_read(self, pin, u):
        return P.aft_prior_read(pin["key"], pin["log_decay"], u, self.causal)

    def _prior_logp(self, pin):
        return P.aft_prior_logp(pin["key"], pin["log_decay"], self.causal)

    def _prior_state(self, batch, cols, device, dtype):
        return torch.zeros(batch, self.e, cols + 1, device=device, dtype=dtype)

    def _prior_step(self, pin, u, state):
        r, state = P.aft_prior_step(pin["key"][:, 0], pin["log_decay"], u[:, 0], state)
        return r[:, None], state
