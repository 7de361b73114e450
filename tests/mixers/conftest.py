"""Shared checks of the mixer tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import torch


def assert_same_map(y: torch.Tensor, r: torch.Tensor, inputs: Sequence[torch.Tensor], *,
                    out_tol: float = 1e-10, grad_tol: float = 1e-9, allow_unused: bool = False) -> None:
    """``y`` (a fast path) equals ``r`` (its reference) and so do the gradients of a random
    projection of both with respect to ``inputs`` (input and parameters)."""
    torch.testing.assert_close(y, r, rtol=out_tol, atol=out_tol)
    w = torch.randn_like(y)
    g1 = torch.autograd.grad((y * w).sum(), list(inputs), allow_unused=allow_unused)
    g2 = torch.autograd.grad((r * w).sum(), list(inputs), allow_unused=allow_unused)
    for a, b in zip(g1, g2):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=grad_tol, atol=grad_tol)


@pytest.fixture
def same_map() -> Callable[..., None]:
    return assert_same_map


@pytest.fixture
def spy(monkeypatch) -> Callable[[object, str], list[int]]:
    """``spy(owner, name)`` wraps ``owner.name`` (a module function or a class's method) for the
    test: every call appends 1 to the returned list, then runs the real one."""

    def wrap(owner: object, name: str) -> list[int]:
        calls: list[int] = []
        real = getattr(owner, name)
        monkeypatch.setattr(owner, name, lambda *a, **k: calls.append(1) or real(*a, **k))
        return calls

    return wrap
