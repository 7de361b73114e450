"""tsmix: time-series forecasting with interchangeable token mixers.

Public API: :func:`build_mixer`, :func:`available_mixers`, :class:`Block`,
:class:`Forecaster` (``tsmix.forecasting``), and the sub-packages ``tsmix.datasets``,
``tsmix.forecasting``, ``tsmix.tuning``, ``tsmix.models``.
"""

from tsmix.block import Block, BlockConfig
from tsmix.errors import TsmixError
from tsmix.registry import (
    available_mixers,
    build_mixer,
    mixer_options,
    mixer_spec,
    register_mixer,
    register_space,
)

__version__ = "0.1.0"

__all__ = [
    "Block",
    "BlockConfig",
    "Forecaster",
    "TsmixError",
    "available_mixers",
    "build_mixer",
    "mixer_options",
    "mixer_spec",
    "register_mixer",
    "register_space",
]


def __getattr__(name: str):
    # Lazy: the Forecaster pulls in the data and training stack, which mixer users
    # (LM/vision pipelines) do not need at import time.
    if name == "Forecaster":
        from tsmix.forecasting import Forecaster

        return Forecaster
    raise AttributeError(f"module 'tsmix' has no attribute {name!r}")
