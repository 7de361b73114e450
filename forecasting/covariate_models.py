"""Covariates around any registered model: the mixer (and the model) never knows.

A registered builder maps ``(B, L, C) -> (B, H, C)`` and knows nothing of covariates. The wrapper
here feeds them in the way that suits the model, read from its registration, never from its name:

* kinds listed in ``ModelNeeds.covariates`` (``hist_exog``, ``futr_exog``) are taken by the model
  itself as extra input variates: models that mix across variates (iTransformer: one token per
  variate) see the covariate series next to the target and attend to them. A future covariate's
  variate is the last ``L`` steps of its lookback + horizon span, so its horizon part is in the
  token (all of it when ``L >= H``); only the target's output is kept.
* every other kind (the documented default: all of them, as for the channel-independent patch
  encoder and DLinear, which would treat extra variates as unrelated series) goes through a linear
  covariate path added to the base forecast: future covariates step by step over the horizon
  (B, H, Cf) -> (B, H, 1), static attributes (numeric + embedded categories) and a linear summary of
  the past-only covariates to one (B, H) term each. Those maps start at zero, so at initialisation
  the wrapper forecasts exactly what its base model does.

The base model ends in its output head (``tsmix.forecasting.probabilistic``: point, quantile, normal,
Student-t), so the wrapper returns the head's output: (B, H, 1) for a point head, (B, H, K, 1)
otherwise. The linear covariate term is a shift of the forecast's location: added to a point
forecast, to every quantile (a common shift keeps them non-crossing) or to a distribution's loc,
never to a scale or shape parameter.

Static attributes never become variates: a constant series carries no time information and
instance normalization would zero it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from tsmix.forecasting.probabilistic.heads import DistributionHead, Head, QuantileHead
from tsmix.forecasting.registry import ModelSpec, build_model
from tsmix.forecasting.trainer import output_head

KINDS = ("hist_exog", "futr_exog", "static")
VARIATE_KINDS = ("hist_exog", "futr_exog")  # kinds that are series, so they can be variates


def variate_kinds(spec: ModelSpec) -> tuple[str, ...]:
    """Covariate kinds ``spec``'s model takes as extra input variates (its ``needs.covariates``)."""
    return tuple(k for k in VARIATE_KINDS if k in spec.needs.covariates)


@dataclass(frozen=True)
class CovariateLayout:
    """Widths of a panel's covariates and how each kind reaches the model (what a saved run keeps)."""

    lookback: int  # L
    horizon: int  # H
    hist: int  # Ch past-only covariate columns
    futr: int  # Cf future-known columns (user columns, then calendar features)
    static: int  # Cs numeric static attributes
    cardinalities: tuple[int, ...] = ()  # vocabulary size of each categorical static attribute
    as_variates: tuple[str, ...] = ()  # kinds fed to the base model as extra variates

    @property
    def channels(self) -> int:
        """Input variates of the base model: the target plus the covariates taken as variates."""
        v = self.as_variates
        return 1 + self.hist * ("hist_exog" in v) + self.futr * ("futr_exog" in v)

    @classmethod
    def of(cls, schema: Any, spec: ModelSpec) -> CovariateLayout:
        """The layout of a ``PanelSchema`` for model ``spec``."""
        st = schema.static
        return cls(lookback=schema.lookback, horizon=schema.horizon, hist=len(schema.columns.hist_exog),
                   futr=schema.futr_channels, static=0 if st is None else len(st.numeric),
                   cardinalities=() if st is None else st.cardinalities, as_variates=variate_kinds(spec))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CovariateLayout:
        return cls(**{**d, "cardinalities": tuple(d["cardinalities"]),
                      "as_variates": tuple(d["as_variates"])})


def _zero_linear(n_in: int, n_out: int) -> nn.Linear:
    """A linear map that starts at zero: the correction is learned, not guessed at init."""
    lin = nn.Linear(n_in, n_out)
    nn.init.zeros_(lin.weight)
    nn.init.zeros_(lin.bias)
    return lin


def shift_location(head: Head, out: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """``out`` (the head's output) with its location moved by ``delta`` (B, H, 1)."""
    if isinstance(head, QuantileHead):  # (B, H, Q, 1): every quantile is a location
        return out + delta.unsqueeze(-2)
    if isinstance(head, DistributionHead):  # (B, H, K, 1): loc at k = 0; scale / df are not shifted
        return torch.cat([out[..., :1, :] + delta.unsqueeze(-2), out[..., 1:, :]], dim=-2)
    return out + delta  # point head (B, H, 1)


class CovariateModel(nn.Module):
    """A registered model plus its covariates: ``(x, hist, futr, static, static_cat)`` -> its head's
    output, (B, H, 1) for a point head, (B, H, K, 1) for a quantile / distribution head."""

    def __init__(self, base: nn.Module, layout: CovariateLayout) -> None:
        super().__init__()
        self.base, self.layout = base, layout
        lay, H = layout, layout.horizon
        self.hist_in = "hist_exog" in lay.as_variates and lay.hist > 0
        self.futr_in = "futr_exog" in lay.as_variates and lay.futr > 0
        # the linear path: each piece exists only when its kind is there and is not a variate
        self.futr_proj = _zero_linear(lay.futr, 1) if lay.futr and not self.futr_in else None
        self.hist_proj = _zero_linear(lay.lookback * lay.hist, H) if lay.hist and not self.hist_in else None
        self.embeds = nn.ModuleList(nn.Embedding(n, _embed_dim(n)) for n in lay.cardinalities)
        n_static = lay.static + sum(_embed_dim(n) for n in lay.cardinalities)
        self.static_proj = _zero_linear(n_static, H) if n_static else None

    @property
    def head(self) -> Head:
        """The output head of the base network (``mse`` point head for a bare network)."""
        return output_head(self.base)

    def forward(self, x: torch.Tensor, hist: torch.Tensor, futr: torch.Tensor, static: torch.Tensor,
                static_cat: torch.Tensor) -> torch.Tensor:
        """x (B, L, 1), hist (B, L, Ch), futr (B, L+H, Cf), static (B, Cs), static_cat (B, Ck)
        -> the head output, target channel only."""
        L = self.layout.lookback
        parts = [x]
        if self.hist_in:
            parts.append(hist)
        if self.futr_in:
            parts.append(futr[:, -L:])  # (B, L, Cf): the span ending at the horizon's last step
        inp = parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)  # (B, L, channels)
        out = self.base(inp)  # (B, H, channels) or (B, H, K, channels): channels last either way
        y = out if out.shape[-1] == 1 else out[..., :1]  # the target's forecast only
        head = self.head
        if self.futr_proj is not None:
            y = shift_location(head, y, self.futr_proj(futr[:, L:]))  # (B, H, Cf) -> (B, H, 1)
        if self.hist_proj is not None:
            y = shift_location(head, y, self.hist_proj(hist.flatten(1)).unsqueeze(2))  # (B, L*Ch) -> (B,H,1)
        if self.static_proj is not None:
            feats = [static, *(emb(static_cat[:, j]) for j, emb in enumerate(self.embeds))]
            y = shift_location(head, y, self.static_proj(torch.cat(feats, dim=1)).unsqueeze(2))  # (B,H,1)
        return y


def _embed_dim(cardinality: int) -> int:
    """Width of a category embedding: about half the vocabulary, at most 8 (few categories, few rows)."""
    return max(1, min(8, (cardinality + 1) // 2))


def build_covariate_model(config: Any, layout: CovariateLayout) -> CovariateModel:
    """The network of a ``ForecasterConfig`` over ``layout.channels`` variates, with the covariate paths."""
    return CovariateModel(build_model(config, layout.channels), layout)
