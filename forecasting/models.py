"""``build_model(config, channels)``: the one place a ForecasterConfig becomes an nn.Module."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from tsmix.forecasting.config import ForecasterConfig
from tsmix.forecasting.dlinear import DLinear
from tsmix.forecasting.encoders import EncoderConfig, PatchEncoder, VariateEncoder


def _encoder_config(cfg: ForecasterConfig, channels: int) -> EncoderConfig:
    return EncoderConfig(
        channels=channels,
        lookback=cfg.lookback,
        horizon=cfg.horizon,
        mixer=cfg.mixer,
        mixer_options=dict(cfg.mixer_options),
        d_model=cfg.d_model,
        heads=cfg.heads,
        layers=cfg.layers,
        d_ff=cfg.d_ff,
        dropout=cfg.dropout,
        head_dropout=cfg.head_dropout,
        ffn=cfg.ffn,
        norm=cfg.norm,
        prenorm=cfg.prenorm,
        revin=cfg.revin,
        revin_affine=cfg.revin_affine,
        patch_len=cfg.patch_len,
        stride=cfg.stride,
        padding_patch=cfg.padding_patch,
    )


def _patchtst(cfg: ForecasterConfig, channels: int) -> nn.Module:
    return PatchEncoder(_encoder_config(cfg, channels))


def _itransformer(cfg: ForecasterConfig, channels: int) -> nn.Module:
    return VariateEncoder(_encoder_config(cfg, channels))


def _dlinear(cfg: ForecasterConfig, channels: int) -> nn.Module:
    return DLinear(channels, cfg.lookback, cfg.horizon, cfg.kernel_size, cfg.individual)


# model name -> builder(resolved config, input channels) -> module mapping (B, L, C) -> (B, H, C)
MODELS: dict[str, Callable[[ForecasterConfig, int], nn.Module]] = {
    "patchtst": _patchtst,
    "itransformer": _itransformer,
    "dlinear": _dlinear,
}

# models whose forward uses the token mixer (DLinear has none: one fit covers every mixer)
USES_MIXER = frozenset({"patchtst", "itransformer"})


def build_model(config: ForecasterConfig, channels: int) -> nn.Module:
    """The network for ``config`` (resolved first) over ``channels`` input variates."""
    return MODELS[config.model](config.resolved(), channels)


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
