"""tsmix.ops.attention.attend: the plain small-head path agrees with SDPA and the reference."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tsmix.ops import attention as A


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(3, 2, 9, 4), (2, 9, 4), (1, 4, 130, 4), (2, 2, 9, 32)])
def test_attend_matches_sdpa_and_reference_float64(causal, shape):
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(shape, dtype=torch.float64, generator=gen, requires_grad=True) for _ in range(2))
    v = torch.randn(*shape[:-1], 5, dtype=torch.float64, generator=gen, requires_grad=True)
    y = A.attend(q, k, v, causal)
    torch.testing.assert_close(y, F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    r = A.attention_reference(q, k, v, causal)
    torch.testing.assert_close(y, r)
    g = torch.randn(y.shape, dtype=torch.float64, generator=gen)
    for a, b in zip(torch.autograd.grad(y, (q, k, v), g), torch.autograd.grad(r, (q, k, v), g)):
        torch.testing.assert_close(a, b)


def test_attend_small_path_is_taken_for_small_heads_only(monkeypatch):
    calls = []
    real = F.scaled_dot_product_attention
    monkeypatch.setattr(A.F, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    x = torch.randn(2, 2, 8, 4)
    A.attend(x, x, x, False)
    assert not calls  # head dim 4, 8 tokens: the plain path
    y = torch.randn(2, 2, 8, 64)
    A.attend(y, y, y, False)
    A.attend(x, x, x, False, dropout_p=0.1)  # dropout stays with SDPA
    assert len(calls) == 2
