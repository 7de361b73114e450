"""Free Energy Mixer priors: ``fem-sm``, ``fem-gla``, ``fem-ssm``, ``fem-aft``.

The shared FEM read (options, C/L/T/G components, streaming) is
:class:`tsmix.mixers._fem_core.FreeEnergyMixer`; each class here defines one selection prior
(``tsmix.ops.fem_priors``) on top of it. On CPU at short sequences with narrow heads (the
encoders' shapes) ``fem-sm`` and ``fem-aft`` run their whole read channel-major
(``_forward_t``, pieces shared in :mod:`tsmix.mixers._fem_t`); fem-aft's read is then one
``bmm`` by its ``(E, N, N)`` decay kernel (:func:`tsmix.ops.fem_priors.aft_read_t`), elsewhere
its columns go through the scans of :func:`tsmix.ops.fem_priors.aft_read_columns`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tsmix.errors import TsmixError
from tsmix.mixers._fem_core import (
    FEATURE_FLOOR,
    SSM_FLOOR,
    FEMOptions,
    FreeEnergyMixer,
    fem_space,
    inv_softplus,
    qk_width,
)
from tsmix.mixers._fem_t import ChannelMajorRead
from tsmix.mixers.linear import log_feature_map
from tsmix.mixers.softmax import linear_t, split_heads
from tsmix.ops import fem_priors as P
from tsmix.ops.attention import SMALL_SEQUENCE, attend_t, small_attention
from tsmix.ops.gla_chunk import MAX_FACTORIZED_CHUNK, floor_decay
from tsmix.ops.gla_small import dense_bidir_shape_fits, dense_decay_blocks_t, gla_dense_bidir_t
from tsmix.ops.rope import rope
from tsmix.registry import register_mixer


def _phi(z: torch.Tensor) -> torch.Tensor:
    # elu + 1 + floor, the form the committed fem-gla results were trained with; the floor bounds
    # the float32 cancellation of elu(z) + 1 (see linear.feature_map) to ~6e-5 of a feature.
    return F.elu(z) + 1.0 + FEATURE_FLOOR


def _log_phi(z: torch.Tensor) -> torch.Tensor:
    """log(elu(z) + 1 + floor) without forming an underflowing feature."""
    return torch.logaddexp(log_feature_map(z), torch.full_like(z, math.log(FEATURE_FLOOR)))


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
    position_aware=lambda o: o.cond or o.rope,  # softmax alone is permutation-equivariant
    space=fem_space("fem-sm", lambda t: {"dropout": t.suggest_float("fem-sm.dropout", 0.0, 0.3)}),
)
class FEMSoftmax(ChannelMajorRead, FreeEnergyMixer):
    """FEM on a softmax-attention prior: [v, exp(beta v)] read by one SDPA call."""

    name, streaming = "fem-sm", False

    def _build_prior(self, dim, heads):
        if self.options.qk_cap <= 0:
            raise TsmixError(f"mixer {self.name!r}: qk_cap must be > 0, got {self.options.qk_cap}")
        w = qk_width(dim, heads, self.options.qk_ratio, self.name, self.options.rope)
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

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, D) -> (B, N, D)
        o = self.options
        dk, n = self.widths["q"] // self.heads, x.shape[1]
        if o.rope or o.recompute or not small_attention(x.device, dk, n, o.dropout if self.training else 0.0):
            return super().forward(x)  # token-major fast path (SDPA where attend picks it)
        return self._forward_t(x)

    def _forward_t(self, x: torch.Tensor) -> torch.Tensor:
        """The whole read channel-major: every per-channel tensor is ``(channels, B N)``.

        Why: at the patch encoder's shape (dv = 2, d_k = 4) each token-major tensor has 2-8
        wide rows, so slicing the fused projection, the per-head gate RMS and packing
        ``[v, exp(beta v)]`` per head are strided passes that do not vectorize. Channel-major,
        every projection part is a contiguous row block of one ``addmm``, the gate RMS a
        reduction over ``dv`` rows of B N-long vectors, and the attention operands are
        ``(H B, width, N)`` blocks; only q, k, the packed columns and the read are permuted
        once each, with runs of N contiguous. Same maths as the token-major
        :meth:`tsmix.mixers._fem_core.FreeEnergyMixer.forward` and the small-head path of
        :func:`tsmix.ops.attention.attend` (``baddbmm`` scaled by ``d_k^-1/2``, softmax, ``bmm``).
        """
        b, n, _ = x.shape
        parts = self._t_parts(x)
        y = self._t_read(*self._t_qk(parts, b, n), *self._t_columns(parts, b, n), b, n)
        return self._t_out(y, x.shape)

    def _t_qk(self, parts: dict[str, torch.Tensor], b: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Clamped queries and keys as ``(H B, d_k, N)`` blocks (one head of one sequence each)."""
        cap, dk = self.options.qk_cap, self.widths["q"] // self.heads
        q = self._blocks(parts["q"].clamp(-cap, cap), dk, b, n)  # (H B, d_k, N)
        k = self._blocks(parts["k"].clamp(-cap, cap), dk, b, n)
        return q, k

    def _t_read(self, q, k, u, lam, g, beta, b: int, n: int) -> torch.Tensor:
        """Read ``u`` with the attention weights of ``q, k`` (:func:`~tsmix.ops.attention.attend_t`:
        ``u p^T`` in cache-sized blocks), unpack ``mu`` and ``F``, combine: ``(E, B N)``."""
        return self._t_unpack(attend_t(q, k, u, self.causal), lam, g, beta, b, n)

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
    position_aware=True,  # the decayed scan orders the tokens
    streaming=True,
    space=fem_space(
        "fem-gla",
        lambda t: {
            "gate_tau": t.suggest_float("fem-gla.gate_tau", 4.0, 32.0, log=True),
            "decay": t.suggest_categorical("fem-gla.decay", ["head", "key"]),
        },
    ),
)
class FEMGLA(ChannelMajorRead, FreeEnergyMixer):
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
        w = qk_width(dim, heads, o.qk_ratio, self.name, False)
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
        # features of contiguous copies: elu (and its backward) on the head-split strided views
        # does not vectorize (3x the time at the variate shape), and the read wants (B, H, N, d_k)
        q, k = _phi(pin["zq"].contiguous()), _phi(pin["zk"].contiguous())
        return P.gla_prior_read(q, k, u, pin["log_a"], self.causal, self.chunk)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, D) -> (B, N, D)
        small = dense_bidir_shape_fits(x.device, x.shape[1], self.widths["q"] // self.heads)
        if small and not self.causal and not self.options.recompute:
            y = self._forward_t(x)
            if y is not None:
                return y
        return super().forward(x)  # token-major (gla_bidir picks the dense form or a scan)

    def _forward_t(self, x: torch.Tensor) -> torch.Tensor | None:
        """Bidirectional on short CPU sequences: the whole read channel-major (``(channels, B N)``,
        see :mod:`tsmix.mixers._fem_t`), the prior read by the dense decay attention on ``(H B, ., N)``
        blocks (:func:`~tsmix.ops.gla_small.gla_dense_bidir_t`, the normalizer a row of ones beside
        the columns). Why: token-major, the features, the head split of q, k, log-decays and
        columns, and the normalization are passes over 1-8 wide strided heads. None when a total
        decay exceeds the dense form's bound (the caller takes the exact scan)."""
        b, n, _ = x.shape
        h, dk = self.heads, self.widths["q"] // self.heads
        log_a = F.logsigmoid(linear_t(self.gate, x.reshape(-1, x.shape[-1]).t())) / self.options.gate_tau
        la = dense_decay_blocks_t(log_a, h, b, n)  # (H B, 1 or d_k, N), floored
        if la is None:
            return None
        parts = self._t_parts(x)
        q = self._blocks(_phi(parts["q"]), dk, b, n)  # (H B, d_k, N), features of contiguous rows
        k = self._blocks(_phi(parts["k"]), dk, b, n)
        u, lam, g, beta = self._t_columns(parts, b, n)  # (H B, P dv, N)
        r = gla_dense_bidir_t(q, k, torch.cat([u, torch.ones_like(u[:, :1])], 1), la)  # last row: Σ weights
        r = r[:, :-1] / r[:, -1:].clamp_min(torch.finfo(r.dtype).tiny)
        return self._t_out(self._t_unpack(r, lam, g, beta, b, n), x.shape)

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
    # the fused read (tsmix.ops.ssm_scan) at the shapes it is taken; False = the plain autograd
    # read (twice differentiable; the reference the fused one is tested against)
    fused: bool = True


@register_mixer(
    "fem-ssm",
    options=FEMSSMOptions,
    position_aware=True,
    streaming=True,
    space=fem_space("fem-ssm", lambda t: {"state": t.suggest_categorical("fem-ssm.state", [8, 16])}),
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
                self.in_proj.bias[rows].copy_(inv_softplus(dt - SSM_FLOOR))

    def _prior_inputs(self, x, parts):
        # each slice made contiguous before its transcendental op: on a strided slice of the fused
        # projection softplus does not vectorize (several times slower at the patch shape)
        dt = F.softplus(parts["dt"].contiguous()) + SSM_FLOOR  # (B, N, E) > 0
        b, c = self.bc_proj(x).chunk(2, dim=-1)
        b, c = F.softplus(b.contiguous()) + SSM_FLOOR, torch.softmax(c.contiguous(), -1)
        # positive input map; the output map is a distribution over the state (its scale cancels)
        return {"dt": dt, "a": -self.a_log.exp(), "b": b, "c": c}

    def _prior_read(self, pin, u):
        return P.ssm_prior_read(pin["dt"], pin["a"], pin["b"], pin["c"], u, self.causal, self.options.fused)

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


@register_mixer(
    "fem-aft", options=FEMAFTOptions, position_aware=True, streaming=True, space=fem_space("fem-aft")
)
class FEMAFT(ChannelMajorRead, FreeEnergyMixer):
    """FEM on an AFT prior: per-channel weights exp(key_s - gamma |t - s|) (AFT-simple at gamma = 0)."""

    name, per_channel = "fem-aft", True

    def _build_prior(self, dim, heads):
        o = self.options
        if not 0 < o.key_cap <= 40 or not 0 < o.decay_min <= o.decay_max:
            raise TsmixError(f"mixer {self.name!r}: need 0 < key_cap <= 40 and 0 < decay_min <= decay_max")
        gamma = torch.exp(torch.linspace(math.log(o.decay_min), math.log(o.decay_max), self.e))
        self.decay_raw = nn.Parameter(inv_softplus(gamma))
        return {"key": self.e}

    def _prior_inputs(self, x, parts):
        cap = self.options.key_cap
        return {"key": parts["key"].clamp(-cap, cap), "log_decay": -F.softplus(self.decay_raw).to(x.dtype)}

    def _prior_read(self, pin, u):
        return P.aft_prior_read(pin["key"], pin["log_decay"], u, self.causal)

    def _prior_logp(self, pin):
        return P.aft_prior_logp(pin["key"], pin["log_decay"], self.causal)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, D) -> (B, N, D)
        if x.device.type != "cpu" or self.options.recompute or x.shape[1] > SMALL_SEQUENCE:
            return super().forward(x)  # token-major fast path (the scans of aft_read_columns)
        return self._forward_t(x)

    def _forward_t(self, x: torch.Tensor) -> torch.Tensor:
        """The whole read channel-major (``(channels, B N)``, see :mod:`tsmix.mixers._fem_t`), the
        prior read as one ``bmm`` by the ``(E, N, N)`` decay kernel (:func:`P.aft_read_t`).

        Why: on short sequences the token-major scans cost a Python step (and its adjoint) per
        position on ``(B, E)`` slices, most of fem-aft's time at the variate shape; the kernel is
        ``N^2`` per channel, shared by the batch, and needs no permute channel-major."""
        parts = self._t_parts(x)
        lam, g = self._t_gates(parts)
        v, ex, beta = self._t_values(parts)
        cap = self.options.key_cap
        key, log_decay = parts["key"].clamp(-cap, cap), -F.softplus(self.decay_raw).to(x.dtype)
        r = P.aft_read_t(key, log_decay, [v] if ex is None else [v, ex], x.shape[1], self.causal)
        return self._t_out(self._t_post(r[0], r[1] if len(r) > 1 else None, lam, g, beta), x.shape)

    def _fast_pack(self, v, e):
        return (v,) if e is None else (v, e)  # the columns stay apart until _fast_read weights them

    def _fast_read(self, pin, u):
        cols = P.aft_read_columns(pin["key"], pin["log_decay"], list(u), self.causal)
        return cols[0], (cols[1] if len(cols) > 1 else None)

    def _prior_state(self, batch, cols, device, dtype):
        return torch.zeros(batch, self.e, cols + 1, device=device, dtype=dtype)

    def _prior_step(self, pin, u, state):
        r, state = P.aft_prior_step(pin["key"][:, 0], pin["log_decay"], u[:, 0], state)
        return r[:, None], state
