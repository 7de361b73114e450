"""Search-space pieces several models share (a model's own space sits in its model file).

A space is ``space(trial) -> dict`` of Forecaster keyword arguments; ``trial`` is an
``optuna.Trial`` (or ``FixedTrial`` to replay finished parameters). A study answers the names it
holds fixed itself (``tsmix.tuning.search``); a name that only feeds a held argument is not asked
(:func:`held`), so the sampler never searches a dimension that changes nothing.
"""

from __future__ import annotations

from typing import Any


def held(trial: Any, name: str) -> bool:
    """Whether the study holds Forecaster argument ``name`` fixed (``--set``): a plain trial holds nothing."""
    return name in getattr(trial, "held", ())


def training_space(trial: Any) -> dict[str, Any]:
    """What every model trains with: learning rate and batch size."""
    return {
        "lr": trial.suggest_float("lr", 1e-4, 1e-2, log=True),
        "batch_size": trial.suggest_categorical("batch_size", [16, 32, 64]),
    }


def encoder_space(trial: Any) -> dict[str, Any]:
    """Width, heads, depth, FFN ratio and dropout of a mixer encoder, plus training."""
    d_model = trial.suggest_categorical("d_model", [16, 32, 64, 128])
    out = {
        **training_space(trial),
        "d_model": d_model,
        "heads": trial.suggest_categorical("heads", [2, 4, 8]),  # every choice divides d_model
        "layers": trial.suggest_int("layers", 1, 3),
        "dropout": trial.suggest_float("dropout", 0.0, 0.3),
    }
    if not held(trial, "d_ff"):  # with d_ff fixed the ratio would be a dead dimension
        out["d_ff"] = d_model * trial.suggest_categorical("ff_ratio", [2, 4])
    return out
