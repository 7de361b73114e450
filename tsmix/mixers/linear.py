"""Linear attention and gated linear attention (GLA): chunked parallel form + streaming form.

Both run through :func:`tsmix.ops.gla_chunk.gla_chunked` (matmuls inside chunks, a log-space
scan across them) and agree with their recurrent ``step``/``recurrent`` form and with a plain
quadratic ``reference``. Bidirectional mode adds the anti-causal half (the same scan on the
reversed sequence, exclusive of the current token); bidirectional GLA on short CPU sequences
reads through the dense form of :mod:`tsmix.ops.gla_small`, and bidirectional linear attention
through one ``(Dh, Dh + 1)`` state per head (no decay: ``phi(q) [phi(k)^T v, sum phi(k)]``), or
through the ``(N, N)`` scores when there are fewer tokens than head dims (the cheaper order).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from tsmix.errors import TsmixError
from tsmix.mixers.softmax import check_heads, linear_t, merge_heads, split_heads
from tsmix.ops.attention import causal_mask
from tsmix.ops.gla_chunk import MAX_FACTORIZED_CHUNK, gla_bidir, gla_chunked, gla_reference, gla_step
from tsmix.ops.gla_small import dense_bidir_shape_fits, dense_decay_blocks_t, gla_dense_bidir_t
from tsmix.ops.streaming import run_steps
from tsmix.registry import Mixer, register_mixer

FEATURES = ("elu", "softplus")


def feature_map(z: torch.Tensor, kind: str = "elu") -> torch.Tensor:
    """Positive feature map of normalized linear attention: elu(z) + 1 or softplus(z).

    elu(z) + 1 is evaluated as ``exp(z)`` for z < 0 and ``z + 1`` otherwise: the same function
    without the cancellation of ``elu(z) = exp(z) - 1`` against 1, which in float32 loses every
    bit of a feature below e^-17 (at |x| ~ 1e3 the output was off by up to 70% of its scale).
    """
    if kind == "elu":  # clamp: the branch not taken must not overflow (its inf would NaN the grad)
        return torch.where(z < 0, torch.exp(z.clamp_max(0.0)), z + 1.0)
    return F.softplus(z)


class _EluPlusOne(torch.autograd.Function):
    """``elu(z) + 1`` as ``exp(min(z, 0)) + max(z, 0)`` (bitwise the value of :func:`feature_map`);
    its first term is also the derivative (``e^z`` below 0, 1 from 0 on, the where form's branch
    at 0), kept for a one-pass backward (the feature map was 60% of ``linear`` at the variate
    shape in the ``where`` form on head-split views). Once differentiable: the kept derivative
    is not itself differentiated."""

    @staticmethod
    def forward(ctx, z: torch.Tensor) -> torch.Tensor:
        slope = z.clamp_max(0.0).exp_()
        ctx.save_for_backward(slope)
        return slope + z.clamp_min(0.0)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (slope,) = ctx.saved_tensors
        return grad * slope


def feature_map_fast(z: torch.Tensor, kind: str = "elu") -> torch.Tensor:
    """:func:`feature_map` with fewer elementwise passes (same values; the plain form is the reference)."""
    return _EluPlusOne.apply(z) if kind == "elu" else F.softplus(z)


class _NormalizedRead(torch.autograd.Function):
    """``y = num / max(den, eps)`` from the read ``r = [num, den] (B, H, N, Dh + 1)`` (the ones
    column's read last), written straight into the merged heads' layout ``(B, N, H*Dh)``; the
    backward writes ``dr`` in one buffer. Autograd's slices + broadcast divide + merge copy took a
    quarter of ``linear``'s time at the variate shape."""

    @staticmethod
    def forward(ctx, r: torch.Tensor, eps: float) -> torch.Tensor:  # r (B, H, N, Dh + 1) -> (B, N, H*Dh)
        b, h, n, d1 = r.shape
        den = r[..., -1:]  # (B, H, N, 1)
        keep = den >= eps  # where clamp_min passes the gradient
        inv = den.clamp_min(eps).reciprocal()
        y = r.new_empty(b, n, h, d1 - 1)  # token-major: the merged heads' layout
        torch.mul(r[..., :-1], inv, out=y.transpose(1, 2))
        ctx.save_for_backward(y, inv, keep)
        return y.view(b, n, h * (d1 - 1))

    @staticmethod
    @once_differentiable
    def backward(ctx, g: torch.Tensor):
        y, inv, keep = ctx.saved_tensors
        b, n, h, d = y.shape
        gt = g.reshape(b, n, h, d).transpose(1, 2)  # (B, H, N, Dh) view
        gr = g.new_empty(b, h, n, d + 1)
        torch.mul(gt, inv, out=gr[..., :-1])
        # d/dden of num / den = -y / den, through the clamp only where den >= eps
        gden = (gt * y.transpose(1, 2)).sum(-1, keepdim=True).mul_(inv).neg_()
        gr[..., -1:] = gden.masked_fill_(~keep, 0.0)
        return gr, None


def _with_ones(v: torch.Tensor) -> torch.Tensor:
    """``v (..., N, Dh)`` with a ones column appended ``(..., N, Dh + 1)``: its read is the normalizer."""
    return torch.cat([v, v.new_ones(()).expand(*v.shape[:-1], 1)], dim=-1)


def log_feature_map(z: torch.Tensor, kind: str = "elu") -> torch.Tensor:
    """``log(feature_map(z))`` computed without forming the (possibly underflowing) feature."""
    if kind == "elu":  # elu(z) + 1 = e^z for z < 0, 1 + z otherwise
        return torch.where(z < 0, z, torch.log1p(z.clamp_min(0.0)))
    return torch.log(F.softplus(z))


def _require_causal(mixer: nn.Module) -> None:
    if not mixer.causal:
        raise TsmixError(
            f"{type(mixer).__name__}.step streams causal attention only; build it with causal=True"
        )


def _check_chunk(name: str, chunk: int) -> None:
    if chunk < 2:
        raise ValueError(f"{name}: chunk must be >= 2 (got {chunk})")


@dataclass(frozen=True)
class LinearOptions:
    bias: bool = True  # bias in the q/k/v/out projections
    feature: str = "elu"  # positive feature map: elu (elu + 1) | softplus
    chunk: int = 64  # chunk length of the parallel form (speed only, not the math)
    eps: float = 1e-6  # floor of the normalizer (guards a fully underflowed feature map)

    def __post_init__(self) -> None:
        if self.feature not in FEATURES:
            raise ValueError(f"feature must be one of {', '.join(FEATURES)}, got {self.feature!r}")
        _check_chunk("linear", self.chunk)


def _linear_space(trial) -> dict:
    return {"feature": trial.suggest_categorical("linear.feature", list(FEATURES))}


@register_mixer("linear", options=LinearOptions, streaming=True, space=_linear_space)
class LinearAttention(Mixer):
    """Normalized linear attention phi(q)·Σ phi(k) v / phi(q)·Σ phi(k) (Katharopoulos et al.)."""

    def __init__(self, dim: int, heads: int, causal: bool, options: LinearOptions) -> None:
        super().__init__()
        check_heads(dim, heads, "linear")
        self.dim, self.heads, self.causal, self.options = dim, heads, causal, options
        self.qkv = nn.Linear(dim, 3 * dim, bias=options.bias)
        self.out = nn.Linear(dim, dim, bias=options.bias)

    def _qkv1(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = (split_heads(t, self.heads) for t in self.qkv(x).chunk(3, dim=-1))  # (B, H, N, Dh)
        fq, fk = feature_map(q, self.options.feature), feature_map(k, self.options.feature)
        return fq, fk, _with_ones(v)

    def _qkv_fast(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`_qkv1` without the ones column, arranged for speed: the feature map runs once on
        the contiguous ``[q, k]`` block of the projection, not on the head-split strided views
        (which do not vectorize: 4x slower at the variate shape, D=128, head dim 16)."""
        zqk, zv = self.qkv(x).split([2 * self.dim, self.dim], dim=-1)  # (B, N, 2D), (B, N, D)
        # split/chunk, not slicing: their backward is one cat, a slice's a zero fill + copy each
        f = feature_map_fast(zqk, self.options.feature)  # (B, N, 2D) contiguous
        q, k = (split_heads(t, self.heads) for t in f.chunk(2, dim=-1))  # (B, H, N, Dh)
        return q, k, split_heads(zv, self.heads)

    def _finish(self, r: torch.Tensor) -> torch.Tensor:  # (B, H, N, Dh + 1) -> (B, N, D)
        y = r[..., :-1] / r[..., -1:].clamp_min(self.options.eps)
        return self.out(merge_heads(y))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, D) -> (B, N, D)
        q, k, v = self._qkv_fast(x)  # (B, H, N, Dh)
        if not self.causal:
            return self.out(_NormalizedRead.apply(self._bidir_read(q, k, v), self.options.eps))  # (B, N, D)
        no_decay = q.new_zeros(*q.shape[:-1], 1)
        r, _ = gla_chunked(q, k, _with_ones(v), no_decay, chunk=self.options.chunk)
        return self._finish(r)

    def _bidir_read(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``[phi(q) phi(k)^T v, phi(q) . sum phi(k)]`` ``(B, H, N, Dh + 1)``, the matmuls in the
        cheaper order: with no mask the product associates, so fewer tokens than head dims
        (iTransformer's 7 variates, head dim 16) read through the ``(N, N)`` scores, N^2 (2 Dh + 1)
        multiply-adds, and longer sequences through the ``(Dh, Dh + 1)`` state, N Dh (2 Dh + 1)."""
        n, dh = q.shape[-2:]
        return self._read_by_scores(q, k, v) if n <= dh else self._read_by_state(q, k, v)

    @staticmethod
    def _read_by_scores(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return (q @ k.transpose(-1, -2)) @ _with_ones(v)  # (B, H, N, N) scores first

    @staticmethod
    def _read_by_state(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        # the ones column joins the small (Dh, Dh) state, not the (N, Dh) values
        kv = torch.cat([k.transpose(-1, -2) @ v, k.sum(-2)[..., None]], dim=-1)  # (B, H, Dh, Dh + 1)
        return q @ kv

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """Plain quadratic form: explicit (masked) phi(q) phi(k)^T, then row normalization."""
        q, k, v1 = self._qkv1(x)
        a = q @ k.transpose(-1, -2)  # (B, H, N, N)
        if self.causal:
            a = a.masked_fill(~causal_mask(x.shape[1], x.device), 0.0)
        return self._finish(a @ v1)

    def init_state(self, batch: int, device=None, dtype=None) -> torch.Tensor:
        dh = self.dim // self.heads
        return torch.zeros(batch, self.heads, dh, dh + 1, device=device, dtype=dtype)

    def step(self, x_t: torch.Tensor, state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Streaming: one token ``x_t (B, D)`` and the state -> ``(y_t (B, D), new state)``."""
        _require_causal(self)
        if state is None:
            state = self.init_state(x_t.shape[0], x_t.device, x_t.dtype)
        q, k, v1 = (t[:, :, 0] for t in self._qkv1(x_t[:, None]))  # (B, H, Dh[+1])
        r, state = gla_step(q, k, v1, q.new_zeros(*q.shape[:-1], 1), state)
        return self._finish(r[:, :, None])[:, 0], state

    def recurrent(self, x: torch.Tensor) -> torch.Tensor:
        """The streaming form over a whole sequence (B, N, D) -> (B, N, D)."""
        return run_steps(self.step, x)


@dataclass(frozen=True)
class GLAOptions:
    bias: bool = True  # bias in the q/k/v/out-gate/out projections
    # decay granularity: "key" = per key dim through a low-rank gate (the GLA paper) | "head" =
    # one scalar per head and step (cheaper: exact chunked scan with long chunks, few states)
    decay: str = "key"
    chunk: int = 0  # chunk length of the parallel form; 0 = 8 for "key" (its maximum), 64 for "head"
    gate_rank: int = 16  # rank of the per-key-dim gate, D -> rank -> D
    gate_tau: float = 16.0  # a = sigmoid(.)^(1/tau): tau > 1 starts with slow decay (long memory)
    norm_eps: float = 1e-5  # per-head RMSNorm of the read, before the output gate

    def __post_init__(self) -> None:
        if self.decay not in ("key", "head"):
            raise ValueError(f"gla: decay must be 'key' or 'head' (got {self.decay!r})")
        if self.chunk:
            _check_chunk("gla", self.chunk)
        if self.decay == "key" and self.chunk > MAX_FACTORIZED_CHUNK:
            raise ValueError(f"gla: decay='key' needs chunk <= {MAX_FACTORIZED_CHUNK}, got {self.chunk}")
        if self.gate_rank < 1:
            raise ValueError(f"gla: gate_rank must be >= 1 (got {self.gate_rank})")
        if self.gate_tau <= 0:
            raise ValueError(f"gla: gate_tau must be > 0 (got {self.gate_tau})")


def _gla_space(trial) -> dict:
    return {
        "gate_tau": trial.suggest_float("gla.gate_tau", 4.0, 32.0, log=True),
        "decay": trial.suggest_categorical("gla.decay", ["key", "head"]),
    }


# position-aware: the decay weights a pair by the tokens between them, so order matters
@register_mixer("gla", options=GLAOptions, position_aware=True, streaming=True, space=_gla_space)
class GatedLinearAttention(Mixer):
    """Gated linear attention (Yang et al. 2024): data-dependent decay, swish output gate."""

    def __init__(self, dim: int, heads: int, causal: bool, options: GLAOptions) -> None:
        super().__init__()
        check_heads(dim, heads, "gla")
        self.dim, self.heads, self.causal, self.options = dim, heads, causal, options
        self.qkv = nn.Linear(dim, 3 * dim, bias=options.bias)
        if options.decay == "key":
            rank = options.gate_rank
            self.gate = nn.Sequential(nn.Linear(dim, rank, bias=False), nn.Linear(rank, dim))
        else:
            self.gate = nn.Linear(dim, heads)
        self.chunk = options.chunk or (MAX_FACTORIZED_CHUNK if options.decay == "key" else 64)
        self.out_gate = nn.Linear(dim, dim, bias=options.bias)
        self.norm = nn.RMSNorm(dim // heads, eps=options.norm_eps)
        self.out = nn.Linear(dim, dim, bias=options.bias)

    def _inputs(self, x: torch.Tensor):
        q, k, v = (split_heads(t, self.heads) for t in self.qkv(x).chunk(3, dim=-1))  # (B, H, N, Dh)
        q = q * q.shape[-1] ** -0.5
        log_a = F.logsigmoid(self.gate(x)) / self.options.gate_tau  # (B, N, D or H) <= 0
        return q, k, v, split_heads(log_a, self.heads)

    def _finish(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:  # o (B, H, N, Dh)
        return self.out(merge_heads(self.norm(o)) * F.silu(self.out_gate(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, D) -> (B, N, D)
        if not self.causal and dense_bidir_shape_fits(x.device, x.shape[1], self.dim // self.heads):
            y = self._forward_t(x)
            if y is not None:
                return y
        q, k, v, log_a = self._inputs(x)
        return self._finish(gla_bidir(q, k, v, log_a, self.causal, self.chunk), x)

    def _forward_t(self, x: torch.Tensor) -> torch.Tensor | None:
        """Bidirectional, short sequences on CPU: the whole mixer channel-major, every head of every
        sequence a ``(Dh, N)`` block (as :func:`tsmix.mixers.softmax.attention_t`) read by
        :func:`~tsmix.ops.gla_small.gla_dense_bidir_t`. Why: token-major, the head split and merge
        are strided copies and every elementwise pass (decay factors, per-head norm) runs over
        4-wide strided heads. None when a total decay exceeds the dense form's bound (the caller
        takes the exact scan)."""
        b, n, d = x.shape
        h, dh, o = self.heads, d // self.heads, self.options
        xt = x.reshape(-1, d).t()  # (D, B N)
        la = dense_decay_blocks_t(F.logsigmoid(linear_t(self.gate, xt)).div_(o.gate_tau), h, b, n)
        if la is None:  # (H B, G, N) floored log-decays, or a total decay past the dense bound
            return None
        # q's 1/sqrt(Dh) rides in its projection rows (a (D, D) scale, not a pass over the tokens)
        scale = torch.ones(3 * d, 1, dtype=x.dtype, device=x.device)
        scale[:d] = dh**-0.5
        w, bias = self.qkv.weight * scale, None if self.qkv.bias is None else self.qkv.bias * scale[:, 0]
        z = w @ xt if bias is None else torch.addmm(bias[:, None], w, xt)  # (3D, B N)
        q, k, v = z.view(3, h, dh, b, n).transpose(2, 3).reshape(3, h * b, dh, n).unbind(0)  # one copy
        r = gla_dense_bidir_t(q, k, v, la)  # (H B, Dh, N)
        # the per-head RMSNorm over Dh (nn.RMSNorm's formula, channels on dim 1 here)
        r = r * torch.rsqrt(r.square().mean(1, keepdim=True) + o.norm_eps) * self.norm.weight[:, None]
        r = r.view(h, b, dh, n).transpose(1, 2).reshape(d, b * n)  # merged heads, (D, B N)
        y = r * F.silu(linear_t(self.out_gate, xt))  # (D, B N)
        return F.linear(y.t(), self.out.weight, self.out.bias).view(b, n, d)

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """Plain quadratic form: the explicit decay-weighted (N, N) mixing matrix."""
        q, k, v, log_a = self._inputs(x)
        o = gla_reference(q, k, v, log_a)
        if not self.causal:
            o = o + gla_reference(q.flip(-2), k.flip(-2), v.flip(-2), log_a.flip(-2), False).flip(-2)
        return self._finish(o, x)

    def init_state(self, batch: int, device=None, dtype=None) -> torch.Tensor:
        dh = self.dim // self.heads
        return torch.zeros(batch, self.heads, dh, dh, device=device, dtype=dtype)

    def step(self, x_t: torch.Tensor, state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Streaming: one token ``x_t (B, D)`` and the state -> ``(y_t (B, D), new state)``."""
        _require_causal(self)
        if state is None:
            state = self.init_state(x_t.shape[0], x_t.device, x_t.dtype)
        q, k, v, log_a = (t[:, :, 0] for t in self._inputs(x_t[:, None]))
        o, state = gla_step(q, k, v, log_a, state)
        return self._finish(o[:, :, None], x_t[:, None])[:, 0], state

    def recurrent(self, x: torch.Tensor) -> torch.Tensor:
        """The streaming form over a whole sequence (B, N, D) -> (B, N, D)."""
        return run_steps(self.step, x)
