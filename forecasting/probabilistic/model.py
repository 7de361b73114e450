"""``ProbabilisticModel``: instance normalization -> any base network -> an output head.

The base network is built by its usual builder for ``horizon * K`` steps, so it ends in a
``K`` times wider output layer and needs no model-specific code: every encoder, DLinear or
later registered model maps ``(B, L, C) -> (B, H*K, C)`` and the wrapper reads that as
``(B, H, K, C)`` (index ``h * K + k``). RevIN sits here, not in the encoder (build the encoder
with ``revin=False``), so the head can undo it per parameter kind: locations and scales.

For ``K = 1`` (``loss="mse"``/``"mae"``) the forward is the encoder-with-RevIN forward op for
op, and the wrapper builds its weights in the same order from the same seed:
:func:`lift_state_dict` maps an old encoder state dict onto it.

``marks=K`` (calendar features, ``calendar=True``): the input's last ``K`` variates are the window's
calendar positions, as the official iTransformer's timestamp tokens. They skip RevIN (a position in
the day has an absolute meaning; normalizing it per window would erase it), the base network sees
``C + K`` variates, and only the ``C`` series' outputs reach the head.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from tsmix.errors import TsmixError
from tsmix.forecasting.probabilistic.heads import Head, WindowScale, make_head
from tsmix.forecasting.probabilistic.spec import HeadConfig
from tsmix.forecasting.revin import RevIN


class ProbabilisticModel(nn.Module):
    """``forward(x (B, L, C_in)) -> head output``: (B, H, C) for point heads, else (B, H, K, C)."""

    def __init__(self, base: nn.Module, head: Head, channels: int, horizon: int, *,
                 revin: bool = True, revin_affine: bool = False, revin_center: str = "mean",
                 marks: int = 0) -> None:
        super().__init__()
        self.base = base
        self.revin = RevIN(channels, revin_affine, center=revin_center) if revin else None
        self.head = head
        self.horizon = horizon
        self.channels, self.marks = channels, marks

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        stats, marks = None, None
        if self.marks:
            if x.shape[-1] != self.channels + self.marks:
                raise TsmixError(f"the input has {x.shape[-1]} variates, expected {self.channels} series + "
                                 f"{self.marks} calendar features; build the input as the model was fitted")
            x, marks = x[..., : self.channels], x[..., self.channels :]  # (B, L, C), (B, L, K)
        if self.revin is not None:
            x, stats = self.revin.norm(x)
        if marks is None:
            raw = self.base(x)  # (B, H*K, C)
        else:  # calendar positions as they are; only the series' outputs are kept
            raw = self.base(torch.cat([x, marks], dim=-1))[..., : self.channels]  # (B, H*K, C)
        b, steps, c = raw.shape
        if steps != self.horizon * self.head.k:
            raise TsmixError(
                f"the base network returned {steps} steps, expected horizon {self.horizon} x "
                f"{self.head.k} outputs of loss {self.head.name!r}; build it for horizon * head.k steps"
            )
        return self.head(raw.view(b, self.horizon, self.head.k, c), WindowScale(self.revin, stats))

    def point(self, x: torch.Tensor) -> torch.Tensor:
        """(B, L, C) -> the point forecast (B, H, C)."""
        return self.head.point(self(x))


def build_probabilistic(build_base: Callable[[int], nn.Module], channels: int, horizon: int,
                        head: HeadConfig | Head, *, revin: bool = True,
                        revin_affine: bool = False, revin_center: str = "mean",
                        marks: int = 0) -> ProbabilisticModel:
    """Wrap ``build_base(steps)`` (a network for ``steps`` output steps, with its own RevIN off, over
    ``channels + marks`` input variates).

    ``head``: a :class:`HeadConfig` (validated loss/quantiles/level) or a ready head.
    """
    head = make_head(head) if isinstance(head, HeadConfig) else head
    base = build_base(horizon * head.k)  # built first: same RNG order as the bare encoder
    return ProbabilisticModel(base, head, channels, horizon, revin=revin, revin_affine=revin_affine,
                              revin_center=revin_center, marks=marks)


def build_with_head(spec: Any, values: Mapping[str, Any], channels: int,
                    head: HeadConfig | Head, marks: int = 0) -> ProbabilisticModel:
    """A registered model wrapped with ``head``; ``values``: a resolved ForecasterConfig as a dict.

    ``spec`` is a ``tsmix.forecasting.registry.ModelSpec`` (``config``, ``make_config``,
    ``build``). A model whose config has a ``revin`` field normalizes its windows itself: that
    RevIN is switched off inside and applied by the wrapper instead (with ``revin_affine`` and
    ``revin_center``);
    a model without one (DLinear) sees raw windows, as it does today. ``marks``: calendar variates
    after the ``channels`` series (see :class:`ProbabilisticModel`).
    """
    lifted = "revin" in {f.name for f in dataclasses.fields(spec.config)}

    def base(steps: int) -> nn.Module:
        inner = {**values, "horizon": steps, **({"revin": False} if lifted else {})}
        return spec.build(spec.make_config(inner), channels + marks)

    return build_probabilistic(base, channels, int(values["horizon"]), head,
                               revin=lifted and bool(values.get("revin", True)),
                               revin_affine=lifted and bool(values.get("revin_affine", False)),
                               revin_center=str(values.get("revin_center", "mean")), marks=marks)


def lift_state_dict(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """An encoder's own state dict (RevIN inside) -> the wrapper's: ``revin.*`` kept, rest ``base.*``.

    Loads run directories saved before the wrapper existed (point losses only: K = 1).
    """
    return {k if k.startswith("revin.") else f"base.{k}": v for k, v in state.items()}
