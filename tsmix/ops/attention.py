"""Explicit softmax attention and the causal mask: the one plain reference every mixer uses.

The fast paths call ``scaled_dot_product_attention`` (fused kernels); the references here
form the (N, N) scores explicitly, so the float64 contract tests compare two genuinely
different computations.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable


def causal_mask(n: int, device: torch.device | str | None = None, *, strict: bool = False) -> torch.Tensor:
    """(n, n) bool, True where query ``t`` may see key ``s``: ``s <= t`` (``s < t`` if strict)."""
    return torch.ones(n, n, dtype=torch.bool, device=device).tril(-1 if strict else 0)


def attention_logits(
    q: torch.Tensor, k: torch.Tensor, causal: bool, scale: float | None = None
) -> torch.Tensor:
    """Scores ``q k^T * scale`` (B, H, N, N) from ``q, k (B, H, N, d)``, -inf above the diagonal
    when causal; ``scale`` None = ``1 / sqrt(d)`` (applied as a division, as SDPA defines it)."""
    s = q @ k.transpose(-1, -2)
    s = s / q.shape[-1] ** 0.5 if scale is None else s * scale
    if causal:
        s = s.masked_fill(~causal_mask(q.shape[-2], q.device), float("-inf"))
    return s


def attention_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float | None = None
) -> torch.Tensor:
    """Plain ``softmax(q k^T * scale) v``, no dropout: ``(B, H, N, d), (B, H, N, d_v) -> (B, H, N, d_v)``."""
    return torch.softmax(attention_logits(q, k, causal, scale), dim=-1) @ v


# Below these sizes the fused CPU kernel of scaled_dot_product_attention loses to three plain
# ops (at the patch encoder's 3584 x 42 x 42 scores with head dim 4: fwd+bwd 46 ms vs 70 ms, one
# thread): its tiling is built for wide heads and long sequences. The plain form materializes the
# (N, N) scores, which at these lengths is smaller than the activations around it.
SMALL_HEAD_DIM = 16
SMALL_SEQUENCE = 128
# Scores per block of the batch (elements) in the hand-written small-sequence kernels (attend_t,
# the dense GLA form, NRGPT's energy reads): ~1 MB in float32, half a core's L2 on the machine
# measured, so one block's (N, N) tensors stay in cache (whole-batch (N, N) passes at the patch
# shape ran at half the speed or less; 2^17..2^19 measured within noise of each other there, 2^18
# 1.1x faster than 2^19 for the softmax read at 224 sequences).
SCORE_BLOCK_ELEMS = 1 << 18


def score_blocks(m: int, n: int, device: torch.device) -> list[slice]:
    """Slices of a batch of ``m`` sequences with ``(n, n)`` scores of about ``SCORE_BLOCK_ELEMS``
    elements each (the module's value at call time: tests shrink it) on CPU; elsewhere the whole
    batch in one (a GPU wants it in one launch)."""
    if device.type != "cpu":
        return [slice(0, m)]
    step = max(1, SCORE_BLOCK_ELEMS // (n * n))
    return [slice(i, i + step) for i in range(0, m, step)]


def small_attention(device: torch.device, head_dim: int, n: int, dropout_p: float = 0.0) -> bool:
    """Whether attention of ``n`` tokens with heads of ``head_dim`` takes the plain small-head
    form (scaled bmm + softmax + bmm) instead of SDPA: CPU, no dropout, below the sizes above."""
    return device.type == "cpu" and dropout_p == 0 and head_dim <= SMALL_HEAD_DIM and n <= SMALL_SEQUENCE


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, dropout_p: float = 0.0
) -> torch.Tensor:
    """``softmax(q k^T / sqrt(d)) v`` ``(B, H, N, d), (B, H, N, d_v) -> (B, H, N, d_v)``, the fast way.

    Small heads on short sequences on CPU (no dropout): scaled bmm + softmax + bmm; otherwise
    ``scaled_dot_product_attention``. Both are the same math; they differ in float32 rounding
    (~1e-6 relative), never in what is attended.
    """
    n, d = q.shape[-2], q.shape[-1]
    if not small_attention(q.device, d, n, dropout_p) or q.dim() < 3:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=causal)
    lead = q.shape[:-2]
    q3, k3, v3 = q.reshape(-1, n, d), k.reshape(-1, n, d), v.reshape(-1, n, v.shape[-1])
    s = torch.baddbmm(q3.new_zeros(()).expand(1, 1, 1), q3, k3.transpose(1, 2), beta=0.0, alpha=d**-0.5)
    if causal:
        s = s.masked_fill(~causal_mask(n, q.device), float("-inf"))
    return torch.bmm(torch.softmax(s, dim=-1), v3).view(*lead, n, v.shape[-1])


def attention_weights_t(q: torch.Tensor, k: torch.Tensor, causal: bool) -> torch.Tensor:
    """Attention weights of channel-major blocks, transposed: ``q, k (M, d, N) -> p^T (M, N_s, N_t)``
    (column ``t`` is query ``t``'s softmax over the keys), scaled by ``d^-1/2``.

    The small-head form for callers whose heads are ``(M, d, N)`` row blocks (one head of one
    sequence each, tokens contiguous): the read of values ``v (M, d_v, N)`` is then ``v @ p^T``,
    and its gradient reaches softmax's backward in ``p^T``'s own layout (no copy of the scores).
    At the patch encoder's shape (3584 blocks of 42 tokens, d = 4) the bmms with the 42-long token
    axis innermost run ~2x faster than with the 4-wide head axis there.
    """
    d, n = q.shape[-2], q.shape[-1]
    st = torch.baddbmm(q.new_zeros(()).expand(1, 1, 1), k.transpose(1, 2), q, beta=0.0, alpha=d**-0.5)
    if causal:
        st = st.masked_fill(~causal_mask(n, q.device).t(), float("-inf"))
    return torch.softmax(st, dim=1)


def _weights(q: torch.Tensor, k: torch.Tensor, scale: float, masked: torch.Tensor | None,
             out: torch.Tensor) -> torch.Tensor:
    """Attention weights ``p (m, N_t, N_s)`` of one block of channel-major ``q, k (m, d, N)``,
    written into ``out`` (``masked``: True where key s is hidden from query t)."""
    s = torch.baddbmm(q.new_zeros(()).expand(1, 1, 1), q.transpose(1, 2), k, beta=0.0, alpha=scale)
    if masked is not None:
        s.masked_fill_(masked, float("-inf"))
    return torch.softmax(s, dim=-1, out=out)


class _AttendT(torch.autograd.Function):
    """``v p^T`` of channel-major blocks, in cache-sized blocks of the batch, hand-written backward.

    With ``r = v p^T`` and its gradient ``g`` (both ``(m, d_v, N)``): ``g_v = g p``, and the
    softmax backward ``dS = p ⊙ (g^T v - (r ⊙ g)-colsum)`` (the row term of softmax's backward,
    ``sum_s p_ts (g^T v)_ts``, is ``(r ⊙ g)`` summed over the value channels: no (N, N)
    reduction), then ``g_q = scale k dS^T``, ``g_k = scale q dS``. Each block's scores, softmax
    and read run while its ``(N, N)`` tensors are in cache (the backward reads its ``p`` back once
    per block); ``p`` is kept row-major over the keys, so softmax runs along the contiguous axis and
    the transposes are the bmm's operand flags. At the patch encoder's shape (3584 blocks of 42
    tokens, d = 4, freed memory retained, idle, one thread) fwd+bwd ~29 ms against ~38 ms for
    autograd over the whole batch (``v @ attention_weights_t``); with ``p^T`` (softmax over the
    strided axis) ~32 ms; recomputing the weights in the backward instead of keeping them ~41 ms.
    Once differentiable."""

    @staticmethod
    def forward(ctx, q, k, v, causal: bool):
        m, d, n = q.shape
        scale = d**-0.5
        masked = ~causal_mask(n, q.device) if causal else None  # (N_t, N_s)
        r = v.new_empty(v.shape)  # (M, d_v, N)
        p = q.new_empty(m, n, n)  # the weights of every block, kept for the backward (as autograd would)
        with torch.autocast(q.device.type, enabled=False):  # out= buffers: no casts inside (attend_t)
            for b in score_blocks(m, n, q.device):
                torch.bmm(v[b], _weights(q[b], k[b], scale, masked, out=p[b]).transpose(1, 2), out=r[b])
        ctx.save_for_backward(q, k, v, r, p)
        ctx.scale = scale
        return r

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        q, k, v, r, p = ctx.saved_tensors
        g = g.contiguous().to(v.dtype)
        gq, gk, gv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        # a backward called inside an autocast region would cast the bmms against their out= buffers
        with torch.autocast(q.device.type, enabled=False):
            rg = (r * g).sum(1).unsqueeze(-1)  # (M, N_t, 1): softmax backward's row term
            for b in score_blocks(q.shape[0], q.shape[2], q.device):
                torch.bmm(g[b], p[b], out=gv[b])
                # (m, Nt, Ns)
                ds = torch.bmm(g[b].transpose(1, 2), v[b]).sub_(rg[b]).mul_(p[b]).mul_(ctx.scale)
                torch.bmm(k[b], ds.transpose(1, 2), out=gq[b])
                torch.bmm(q[b], ds, out=gk[b])
        return gq, gk, gv, None


def attend_t(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """``v @ attention_weights_t(q, k, causal)`` for channel-major blocks ``q, k (M, d, N)``,
    ``v (M, d_v, N)`` -> ``(M, d_v, N)``, blocked over the batch with a hand-written backward
    (:class:`_AttendT`); the small-head read of :func:`tsmix.mixers.softmax.attention_t`.

    Under autocast it runs in float32 and returns the input dtype: at these head dims the bmms are
    bandwidth-bound, so bf16 buys nothing, while a bf16 softmax and its backward are slower on CPU
    (``benchmarks/bench_engine.py``). Traced by ``torch.compile`` it is the plain autograd read."""
    if torch.compiler.is_compiling():
        # the compiler fuses the plain read itself; traced, the blocked loop unrolls into one small
        # kernel per block (patch-encoder step: compiled 2.5x eager blocked vs 1.2x plain)
        return torch.bmm(v, attention_weights_t(q, k, causal))
    dtype = q.dtype
    if dtype != torch.float32 and torch.is_autocast_enabled(q.device.type):
        with torch.autocast(q.device.type, enabled=False):
            r = _AttendT.apply(q.float().contiguous(), k.float().contiguous(), v.float().contiguous(), causal)
        return r.to(dtype)
    return _AttendT.apply(q.contiguous(), k.contiguous(), v.contiguous(), causal)
