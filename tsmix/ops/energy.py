"""Energies of NRGPT (attention and feed-forward) and their gradients in closed form.

Every energy here is per token, shape (B, N); its gradient with respect to the normalized
tokens ``g`` is written out by hand so that the mixer's forward pass is one fused
attention call plus a few matmuls, never ``torch.autograd.grad``. The plain energies are
kept beside the closed forms: the tests (and ``NRGPTMixer.reference``) differentiate them
with autograd and compare. The mixer's training path takes the bidirectional attention
term from :mod:`tsmix.ops.energy_fast` (same function, hand-written backward); the closed
forms here are its reference.

Attention energy of token A, head h (J_h = W_K,hᵀ W_Q,h, q = W_Q g, k = W_K g):

    E_A = -(α_h / β) log Σ_{B ∈ S(A)} exp(β k_B · q_A)

with S(A) = {B < A} when causal (the paper's strict prefix; the first token has no
attention energy) and S(A) = all tokens when bidirectional.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from tsmix.ops.attention import causal_mask

ACTIVATIONS = ("relu", "softplus", "gelu")

_INV_SQRT_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


# ----------------------------------------------------------------------------- activations


def activation(h: torch.Tensor, kind: str) -> torch.Tensor:
    """σ(h) for the feed-forward energies (exact erf GELU)."""
    if kind == "relu":
        return F.relu(h)
    if kind == "softplus":
        return F.softplus(h)
    if kind == "gelu":
        return F.gelu(h)
    raise ValueError(f"unknown activation {kind!r}; choose one of {', '.join(ACTIVATIONS)}")


def activation_and_slope(h: torch.Tensor, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(σ(h), σ'(h)) in closed form, differentiable (the forward pass is trained through)."""
    if kind == "relu":
        return F.relu(h), (h > 0).to(h.dtype)
    if kind == "softplus":
        return F.softplus(h), torch.sigmoid(h)
    if kind == "gelu":
        cdf = 0.5 * (1.0 + torch.erf(h * _INV_SQRT_2))  # Φ(h)
        pdf = _INV_SQRT_2PI * torch.exp(-0.5 * h * h)  # φ(h)
        return h * cdf, cdf + h * pdf
    raise ValueError(f"unknown activation {kind!r}; choose one of {', '.join(ACTIVATIONS)}")


# ------------------------------------------------------------------------ attention energy


def _head_weights(alpha: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """(H,) -> (1, H, 1, 1) in the dtype of ``like``."""
    return alpha.to(like.dtype).view(1, -1, 1, 1)


def attention_energy(
    q: torch.Tensor, k: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor, causal: bool
) -> torch.Tensor:
    """Plain attention energy per token: explicit scores and logsumexp. (B, H, N, Dh) -> (B, N).

    Causal rows A >= 1 see keys 0..A-1; their scores are the lower triangle (diagonal
    included) of the shifted matrix q[1:] k[:-1]ᵀ, so no row is ever fully masked (a
    logsumexp over only -inf would give NaN gradients). Row 0 has energy 0 (empty sum).
    """
    beta = beta.to(q.dtype)
    b, h, n, _ = q.shape
    if causal:
        if n == 1:
            return q.new_zeros(b, 1)
        s = beta * (q[:, :, 1:] @ k[:, :, :-1].transpose(-1, -2))  # (B, H, N-1, N-1)
        keep = causal_mask(n - 1, q.device)
        lse = torch.logsumexp(s.masked_fill(~keep, float("-inf")), dim=-1)  # (B, H, N-1)
        lse = torch.cat([lse.new_zeros(b, h, 1), lse], dim=-1)  # (B, H, N)
    else:
        lse = torch.logsumexp(beta * (q @ k.transpose(-1, -2)), dim=-1)  # (B, H, N)
    return -(alpha.to(q.dtype).view(1, -1, 1) * lse).sum(1) / beta  # (B, N)


def attention_energy_grad(
    q: torch.Tensor, k: torch.Tensor, alpha: torch.Tensor, beta: torch.Tensor, causal: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Closed-form gradients of the attention energy w.r.t. queries and keys.

    Returns ``(dq, dk)``, each (B, H, N, Dh):

    - causal: ``dq_A = -α Σ_{B<A} p_AB k_B``, the gradient of token A's own energy E_A
      with respect to its own query. It is attention with values = keys, computed by
      ``scaled_dot_product_attention`` with ``is_causal`` on the shifted sequences
      (queries 1..N-1 against keys 0..N-2), so the fused kernels apply. ``dk`` is None:
      token A's update descends E_A only (the paper's per-token dynamics).
    - bidirectional: the gradient of the total energy Σ_A E_A. Each token is a query in
      its own energy and a key in everyone's: ``dq_A = -α Σ_B p_AB k_B`` and
      ``dk_C = -α Σ_A p_AC q_A``. The key term is a column sum of the probability matrix,
      which no fused kernel returns, so this path forms P (B, H, N, N) explicitly.
    """
    a = _head_weights(alpha, q)
    beta = beta.to(q.dtype)
    if causal:
        b, h, n, dh = q.shape
        first = q.new_zeros(b, h, 1, dh)  # token 0 has no earlier token to attend to
        if n == 1:
            return first, None
        kp = k[:, :, :-1]
        read = F.scaled_dot_product_attention(beta * q[:, :, 1:], kp, kp, is_causal=True, scale=1.0)
        return -a * torch.cat([first, read], dim=2), None
    p = torch.softmax(beta * (q @ k.transpose(-1, -2)), dim=-1)  # (B, H, N, N)
    return -a * (p @ k), -a * (p.transpose(-1, -2) @ q)


# ---------------------------------------------------------------------- feed-forward energies


def ff1_energy(g: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, act: str) -> torch.Tensor:
    """FF1: E = -‖σ(W g + b)‖², (B, N, D) -> (B, N)."""
    return -activation(F.linear(g, w, b), act).square().sum(-1)


def ff1_grad(g: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, act: str) -> torch.Tensor:
    """∂E/∂g = -2 Wᵀ (σ(h) σ'(h)), h = W g + b. (B, N, D) -> (B, N, D)."""
    s, ds = activation_and_slope(F.linear(g, w, b), act)  # (B, N, F)
    return -2.0 * (s * ds) @ w


def ff2w_energy(
    g: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor | None, w2: torch.Tensor, act: str
) -> torch.Tensor:
    """FF2W: E = -gᵀ W₂ σ(W₁ g + b₁), W₁ (F, D), W₂ (D, F). (B, N, D) -> (B, N)."""
    return -(g * F.linear(activation(F.linear(g, w1, b1), act), w2)).sum(-1)


def ff2w_grad(
    g: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor | None, w2: torch.Tensor, act: str
) -> torch.Tensor:
    """∂E/∂g = -W₂ σ(h) - W₁ᵀ (σ'(h) ⊙ W₂ᵀ g), h = W₁ g + b₁. (B, N, D) -> (B, N, D)."""
    s, ds = activation_and_slope(F.linear(g, w1, b1), act)  # (B, N, F)
    return -F.linear(s, w2) - (ds * (g @ w2)) @ w1
