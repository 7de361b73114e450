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

Every projection C modulates is one fused matmul, so C's modulation is one multiply. This
module holds the options and the shared read; the priors are registered in ``fem.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from tsmix.errors import TsmixError
from tsmix.mixers.softmax import check_heads
from tsmix.ops.lse_read import bound_values, free_energy_combine, free_energy_reference, lse_pack, lse_unpack
from tsmix.ops.streaming import run_steps
from tsmix.ops.time_decay import TimeDecayCondition
from tsmix.registry import Mixer

BETA_FLOOR = 1e-4  # beta = softplus(raw) + floor: F = log(Z) / beta stays well defined
# Floors of the positive maps of the linear-time priors: the token's own weight then keeps the
# prior's normalizer away from 0 even when every feature underflows (|x| ~ 1e4), so neither the
# read nor its gradient can blow up.
FEATURE_FLOOR = 1e-3  # GLA features phi(z) = elu(z) + 1 + floor
SSM_FLOOR = 1e-4  # SSM step sizes and input maps: softplus(.) + floor
# Heads at least this wide take the outer gate's RMS from F.rms_norm; narrower ones from one
# matmul by a block-diagonal averaging matrix (see FreeEnergyMixer._fast_gate).
GATE_RMS_NORM_DV = 8


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


def inv_softplus(y: torch.Tensor | float):
    y = torch.as_tensor(y, dtype=torch.float32)
    return y + torch.log(-torch.expm1(-y))


class FreeEnergyMixer(Mixer):
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
            self.beta_raw = nn.Parameter(inv_softplus(o.beta_init - BETA_FLOOR).repeat(e))
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
        if self.per_channel:  # one column group per channel: [v] or [v, exp(beta v)] on a new axis
            v, beta = v[..., None], (None if beta is None else beta[..., None])
        u = v if beta is None else lse_pack(v, beta)
        return u if self.per_channel else u.transpose(1, 2)  # per head: (B, N, H, P*dv) -> (B, H, N, .)

    def _unpack(self, r: torch.Tensor, beta: torch.Tensor | None):
        """The prior's read of :meth:`_pack` values -> ``(mu, F)`` in the read layout (F None without L)."""
        if not self.per_channel:
            r = r.transpose(1, 2)  # (B, N, H, P*dv)
        elif beta is not None:
            beta = beta[..., None]
        mu, f = (r, None) if beta is None else lse_unpack(r, beta)
        if self.per_channel:
            return mu[..., 0], (None if f is None else f[..., 0])
        return mu, f

    def _mix(self, mu, f, lam, g) -> torch.Tensor:
        """``g [(1 - lam) mu + lam F]`` -> (B, N, E)."""
        o = free_energy_combine(mu, f, lam, g)
        if lam is not None:
            self._last_lambda = lam.detach().mean()
        return o.reshape(*o.shape[:2], self.e)

    def _combine(self, mu, f, lam, g) -> torch.Tensor:
        return self.out(self._mix(mu, f, lam, g))

    # --- fast path ----------------------------------------------------------------------------
    # The same maths as the plain _project/_pack/_unpack/_mix (reference, step), arranged for
    # the small shapes the encoders use (the patch encoder: 37,632 tokens of E = 8 channels,
    # dv = 2 per head). There the cost is the passes of elementwise ops, not the FLOPs:
    # exp/log/sigmoid/softplus on a strided slice of the fused projection whose rows are 2-8
    # wide do not vectorize (softplus of one 8-wide slice of the 56-wide projection: 8 ms vs
    # 0.45 ms contiguous), and reductions over 2-8 channels pay per row. So: each part is made
    # contiguous once before its transcendental op, the values are packed straight into the
    # prior's layout by one stack, the read is unpacked by one permuting copy into contiguous
    # mu and Z in token order (the out projection's), the per-head RMS of narrow gates is one
    # small matmul, and C is one fused gain (``cond.gain``).
    def _fast_pre(self, x: torch.Tensor):
        """-> ``(pin, u, lam, g, beta)``; ``lam, g (B, N, E)`` and ``beta (E,)`` in token order."""
        return self._fast_parts(x, self._fast_z(x))

    def _fast_z(self, x: torch.Tensor) -> torch.Tensor:
        z = self.in_proj(x)  # (B, N, sum of widths)
        return z if self.cond is None else self.cond.modulate(z, x)  # C: z (1 + s)

    def _fast_parts(self, x: torch.Tensor, z: torch.Tensor):
        parts = dict(zip(self.widths, z.split(list(self.widths.values()), dim=-1)))
        pin = self._prior_inputs(x, parts)
        lam = torch.sigmoid(parts["lam"].contiguous()) if "lam" in parts else None
        g = self._fast_gate(parts["gate"]) if "gate" in parts else None
        v, beta, e = parts["v"].contiguous(), None, None
        if self.beta_raw is not None:
            beta = self.beta().to(x.dtype)
            v = bound_values(v, beta, self.options.exp_cap)  # |beta v| <= exp_cap before exp
            e = torch.exp(beta * v)
        return pin, self._fast_pack(v, e), lam, g, beta

    def _fast_gate(self, zg: torch.Tensor) -> torch.Tensor:
        """``softplus`` then unit RMS over each head's ``dv`` channels, ``(B, N, E)`` in and out."""
        g = F.softplus(zg.contiguous())
        if self.dv >= GATE_RMS_NORM_DV:
            return F.rms_norm(g.view(*g.shape[:-1], self.heads, self.dv), (self.dv,), eps=1e-6).view(g.shape)
        # narrow heads: the per-head mean square as one matmul by the block-diagonal averaging
        # matrix (a reduction over 2-4 channels pays per row; the matmul streams)
        avg = torch.block_diag(*[g.new_full((self.dv, self.dv), 1.0 / self.dv)] * self.heads)
        return g * torch.rsqrt(torch.matmul(g.square(), avg) + 1e-6)

    def _fast_pack(self, v: torch.Tensor, e: torch.Tensor | None) -> torch.Tensor:
        """``v, e (B, N, E)`` -> the prior's columns, written once in its layout: per channel
        ``(B, N, E, P)``, per head ``(B, H, N, P*dv)`` (``[v, e]`` per head, as :meth:`_pack`)."""
        if self.per_channel:
            return v[..., None] if e is None else torch.stack([v, e], dim=-1)
        b, n = v.shape[:2]
        vh = v.view(b, n, self.heads, self.dv).transpose(1, 2)  # (B, H, N, dv) views
        if e is None:
            return vh
        eh = e.view(b, n, self.heads, self.dv).transpose(1, 2)
        return torch.stack([vh, eh], dim=3).view(b, self.heads, n, 2 * self.dv)

    def _fast_unpack(self, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The read of :meth:`_fast_pack` -> ``(mu, Z)``, each ``(B, N, E)`` contiguous (Z None without L)."""
        if self.per_channel:
            b, n = r.shape[:2]
            if r.shape[-1] == 1:
                return r.view(b, n, self.e), None
            rp = r.movedim(-1, 0).contiguous()  # (2, B, N, E): one copy, then contiguous halves
            return rp[0], rp[1]
        b, _, n, w = r.shape
        if w == self.dv:
            return r.transpose(1, 2).reshape(b, n, self.e), None
        rp = r.view(b, self.heads, n, 2, self.dv).permute(3, 0, 2, 1, 4).contiguous()  # (2, B, N, H, dv)
        return rp[0].view(b, n, self.e), rp[1].view(b, n, self.e)

    def _fast_read(self, pin: dict, u) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The prior's read of :meth:`_fast_pack`'s columns -> ``(mu, Z)`` (priors may fuse it)."""
        return self._fast_unpack(self._prior_read(pin, u))

    def _fast_post(self, mu: torch.Tensor, z: torch.Tensor | None, lam, g, beta) -> torch.Tensor:
        f = None
        if z is not None:  # F = log(Z) / beta (Z >= e^-cap in exact arithmetic; tiny guards a rounded 0)
            f = torch.log(z.clamp_min(torch.finfo(z.dtype).tiny)) / beta
        if lam is not None:
            self._last_lambda = lam.detach().mean()
        return free_energy_combine(mu, f, lam, g)  # (B, N, E)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, D) -> (B, N, D)
        if self.options.recompute and torch.is_grad_enabled():
            pin, u, lam, g, beta = checkpoint(self._fast_pre, x, use_reentrant=False)
            mu, z = self._fast_read(pin, u)
            return self.out(checkpoint(self._fast_post, mu, z, lam, g, beta, use_reentrant=False))
        pin, u, lam, g, beta = self._fast_pre(x)
        return self.out(self._fast_post(*self._fast_read(pin, u), lam, g, beta))

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
        return self._combine(*self._unpack(r, beta), lam, g)[:, 0], (h, ps)

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


def qk_width(dim: int, heads: int, ratio: float, name: str, even: bool) -> int:
    w = round(ratio * dim)
    unit = heads * (2 if even else 1)
    if w < unit or w % unit:
        raise TsmixError(
            f"mixer {name!r}: Q/K width round(qk_ratio * dim) = {w} must be a positive multiple of "
            f"{unit} (heads{' x 2 for rope' if even else ''}); adjust qk_ratio"
        )
    return w


def fem_space(name: str, extra=None):
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


