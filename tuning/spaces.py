"""Search spaces: one ``space(trial) -> dict`` per model, one per mixer (both from registries).

A model space returns keyword arguments of :class:`tsmix.forecasting.Forecaster`; it is
registered with its model (``@register_model(..., space=fn)``) and found only through
:func:`tsmix.forecasting.registry.model_spec`. Mixer spaces live beside their mixers
(``@register_mixer(..., space=fn)``) and are found through :func:`tsmix.registry.mixer_spec`,
so a new model or mixer brings its own space. The mixer itself is a categorical choice
(``"mixer"``) when more than one is offered; a mixer's parameters are prefixed by its name
(``"softmax.dropout"``), so conditional branches never share a name and TPE models each one
separately.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tsmix.errors import TsmixError
from tsmix.forecasting.registry import available_models, model_spec
from tsmix.forecasting.spaces import encoder_space, training_space
from tsmix.registry import available_mixers, mixer_options, mixer_spec

SpaceFn = Callable[[Any], dict[str, Any]]  # optuna.Trial -> Forecaster keyword arguments


@dataclass(frozen=True)
class ModelSpace:
    fn: SpaceFn  # the model's own hyper-parameters (architecture and training)
    uses_mixer: bool  # False: the model has no token mixer (DLinear), no mixer is searched


def model_space(model: str) -> ModelSpace:
    """The search space registered with ``model`` (TsmixError when it has none)."""
    spec = model_spec(model) if model in available_models() else None
    if spec is None or spec.space is None:
        tunable = [m for m in available_models() if model_spec(m).space is not None]
        raise TsmixError(
            f"no search space for model {model!r}; spaces exist for {', '.join(tunable)} "
            f"(register one with @register_model(..., space=fn))"
        )
    return ModelSpace(spec.space, spec.uses_mixer)


def check_mixers(mixers: Sequence[str]) -> tuple[str, ...]:
    """Validate mixer names against the registry (unknown -> TsmixError listing them)."""
    names = tuple(dict.fromkeys(m.strip() for m in mixers if m.strip()))  # order kept, no repeats
    if not names:
        raise TsmixError(f"no mixer given; available mixers: {', '.join(available_mixers())}")
    for name in names:
        mixer_spec(name)
    return names


def mixer_space(trial, mixers: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """Pick the mixer (categorical over ``mixers`` if several) and sample its own space."""
    name = trial.suggest_categorical("mixer", list(mixers)) if len(mixers) > 1 else mixers[0]
    spec = mixer_spec(name)
    options = dict(spec.space(trial)) if spec.space is not None else {}
    mixer_options(name, **options)  # a space returning a non-option fails here, clearly
    return name, options


def suggest(trial, model: str, mixers: Sequence[str]) -> dict[str, Any]:
    """All searched Forecaster keyword arguments of one trial."""
    space = model_space(model)
    params = space.fn(trial)
    if space.uses_mixer:
        name, options = mixer_space(trial, mixers)
        params.update(mixer=name, mixer_options=options)
    return params


__all__ = ["ModelSpace", "SpaceFn", "check_mixers", "encoder_space", "mixer_space", "model_space", "suggest",
           "training_space"]
