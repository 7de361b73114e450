"""Search spaces: one ``space(trial) -> dict`` per model, one per mixer (from the registry).

A model space returns keyword arguments of :class:`tsmix.forecasting.Forecaster`. Mixer
spaces live beside their mixers (``@register_mixer(..., space=fn)``) and are found only
through :func:`tsmix.registry.mixer_spec`, so a new mixer brings its own space. The mixer
itself is a categorical choice (``"mixer"``) when more than one is offered; a mixer's
parameters are prefixed by its name (``"softmax.dropout"``), so conditional branches never
share a name and TPE models each one separately.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tsmix.errors import TsmixError
from tsmix.registry import available_mixers, mixer_options, mixer_spec

SpaceFn = Callable[[Any], dict[str, Any]]  # optuna.Trial -> Forecaster keyword arguments


@dataclass(frozen=True)
class ModelSpace:
    fn: SpaceFn  # the model's own hyper-parameters (architecture and training)
    uses_mixer: bool  # False: the model has no token mixer (DLinear), no mixer is searched


def training_space(trial) -> dict[str, Any]:
    """What every model trains with: learning rate and batch size."""
    return {
        "lr": trial.suggest_float("lr", 1e-4, 1e-2, log=True),
        "batch_size": trial.suggest_categorical("batch_size", [16, 32, 64]),
    }


def dlinear_space(trial) -> dict[str, Any]:
    return {
        **training_space(trial),
        # odd kernels: the moving average stays centred
        "kernel_size": trial.suggest_categorical("kernel_size", [13, 25, 37]),
        "individual": trial.suggest_categorical("individual", [False, True]),
    }


def _encoder_space(trial) -> dict[str, Any]:
    d_model = trial.suggest_categorical("d_model", [16, 32, 64, 128])
    return {
        **training_space(trial),
        "d_model": d_model,
        "heads": trial.suggest_categorical("heads", [2, 4, 8]),  # every choice divides d_model
        "layers": trial.suggest_int("layers", 1, 3),
        "d_ff": d_model * trial.suggest_categorical("ff_ratio", [2, 4]),
        "dropout": trial.suggest_float("dropout", 0.0, 0.3),
    }


def patchtst_space(trial) -> dict[str, Any]:
    patch_len = trial.suggest_categorical("patch_len", [8, 16])  # both fit a lookback >= 16
    return {**_encoder_space(trial), "patch_len": patch_len, "stride": patch_len // 2}


def itransformer_space(trial) -> dict[str, Any]:
    return _encoder_space(trial)


MODEL_SPACES: dict[str, ModelSpace] = {
    "dlinear": ModelSpace(dlinear_space, uses_mixer=False),
    "patchtst": ModelSpace(patchtst_space, uses_mixer=True),
    "itransformer": ModelSpace(itransformer_space, uses_mixer=True),
}


def register_model_space(name: str, fn: SpaceFn, uses_mixer: bool = True) -> None:
    """Search space of a model added to ``tsmix.forecasting.MODELS`` later."""
    MODEL_SPACES[name] = ModelSpace(fn, uses_mixer)


def model_space(model: str) -> ModelSpace:
    try:
        return MODEL_SPACES[model]
    except KeyError:
        raise TsmixError(
            f"no search space for model {model!r}; spaces exist for {', '.join(sorted(MODEL_SPACES))} "
            f"(add one with tsmix.tuning.spaces.register_model_space)"
        ) from None


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
