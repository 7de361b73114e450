"""tsmix.forecasting: registered forecasting models over any mixer, trainer, Forecaster.

``Forecaster`` is the estimator (fit / predict / evaluate / save / load), ``Ensemble`` the mean of
several; ``ForecasterConfig``
holds every hyper-parameter; models register themselves (``register_model``, one file each in
``tsmix.forecasting.models``) and ``build_model`` turns a config into the network; presets
(``PRESETS``, ``paper_preset``) are named data registered with each model.
"""

from tsmix.forecasting.config import ForecasterConfig
from tsmix.forecasting.dlinear import DLinear
from tsmix.forecasting.encoders import EncoderConfig
from tsmix.forecasting.ensemble import Ensemble
from tsmix.forecasting.forecaster import Forecaster
from tsmix.forecasting.models.dlinear import DLinearConfig
from tsmix.forecasting.models.itransformer import ITransformerConfig, VariateEncoder
from tsmix.forecasting.models.patchtst import PatchEncoder, PatchTSTConfig
from tsmix.forecasting.models.rlinear import RLinear, RLinearConfig
from tsmix.forecasting.presets import PRESETS, paper_preset
from tsmix.forecasting.registry import (
    ModelNeeds,
    ModelSpec,
    TrainDefaults,
    available_models,
    build_model,
    model_spec,
    register_model,
    unregister_model,
)
from tsmix.forecasting.revin import RevIN

__all__ = [
    "PRESETS",
    "DLinear",
    "DLinearConfig",
    "EncoderConfig",
    "Ensemble",
    "Forecaster",
    "ForecasterConfig",
    "ITransformerConfig",
    "ModelNeeds",
    "ModelSpec",
    "PatchEncoder",
    "PatchTSTConfig",
    "RLinear",
    "RLinearConfig",
    "RevIN",
    "TrainDefaults",
    "VariateEncoder",
    "available_models",
    "build_model",
    "model_spec",
    "paper_preset",
    "register_model",
    "unregister_model",
]
