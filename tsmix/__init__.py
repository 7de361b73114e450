"""tsmix: time-series forecasting with interchangeable token mixers.

Public API: :func:`build_mixer`, :func:`available_mixers`, :func:`mixer_capabilities`,
:class:`Mixer` (the contract), :class:`Block`, :class:`Forecaster` (``tsmix.forecasting``),
and the sub-packages ``tsmix.datasets``, ``tsmix.forecasting``, ``tsmix.tuning``,
``tsmix.models``.
"""

from tsmix.block import Block
from tsmix.errors import TsmixError
from tsmix.registry import (
    Capabilities,
    Mixer,
    available_mixers,
    build_mixer,
    mixer_capabilities,
    mixer_options,
    mixer_spec,
    parse_mixer_options,
    register_mixer,
    register_space,
    unregister_mixer,
)

__version__ = "0.1.0"

__all__ = [
    "Block",
    "Capabilities",
    "Forecaster",
    "Mixer",
    "TsmixError",
    "available_mixers",
    "available_models",
    "build_mixer",
    "mixer_capabilities",
    "mixer_options",
    "mixer_spec",
    "parse_mixer_options",
    "register_mixer",
    "register_space",
    "unregister_mixer",
]


def __getattr__(name: str):
    # Lazy: the Forecaster pulls in the data and training stack, which users of the mixers
    # alone (tsmix.models, benchmarks) do not need at import time.
    if name in ("Forecaster", "available_models"):
        import tsmix.forecasting as forecasting

        return getattr(forecasting, name)
    raise AttributeError(f"module 'tsmix' has no attribute {name!r}")
