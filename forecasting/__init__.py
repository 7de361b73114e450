"""tsmix.forecasting: patch/variate encoders over any mixer, DLinear, trainer, Forecaster.

``Forecaster`` is the estimator (fit / predict / evaluate / save / load); ``ForecasterConfig``
holds every hyper-parameter; ``build_model`` turns a config into the network; ``PRESETS``
(``paper_preset``) give the official per-dataset settings.
"""

from tsmix.forecasting.config import MODEL_DEFAULTS, ForecasterConfig
from tsmix.forecasting.dlinear import DLinear
from tsmix.forecasting.encoders import EncoderConfig, PatchEncoder, VariateEncoder
from tsmix.forecasting.forecaster import Forecaster
from tsmix.forecasting.models import MODELS, build_model
from tsmix.forecasting.presets import PRESETS, paper_preset
from tsmix.forecasting.revin import RevIN

__all__ = [
    "MODELS",
    "MODEL_DEFAULTS",
    "PRESETS",
    "DLinear",
    "EncoderConfig",
    "Forecaster",
    "ForecasterConfig",
    "PatchEncoder",
    "RevIN",
    "VariateEncoder",
    "build_model",
    "paper_preset",
]
