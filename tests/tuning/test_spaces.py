"""Search spaces: per-model spaces, mixer spaces discovered through the registry, the mixer as
a categorical choice, replay of a finished trial's params, and clear errors."""

from __future__ import annotations

import dataclasses

import optuna
import pytest

from tsmix.errors import TsmixError
from tsmix.forecasting import Forecaster, ForecasterConfig, available_models
from tsmix.registry import available_mixers, mixer_options, mixer_spec
from tsmix.tuning import spaces
from tsmix.tuning.study import best_params


def ask(seed: int = 0) -> optuna.Trial:
    return optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed)).ask()


@pytest.mark.parametrize("model", available_models())
def test_every_forecasting_model_has_a_space(model):
    trial = ask()
    space = spaces.model_space(model)
    params = space.fn(trial)
    assert params and set(params) <= {f.name for f in dataclasses.fields(ForecasterConfig)}
    Forecaster(model, lookback=48, horizon=12, **params)  # valid Forecaster keyword arguments


@pytest.mark.parametrize("mixer", available_mixers())
def test_each_registered_mixer_space_builds_a_forecaster(mixer):
    trial = ask()
    params = spaces.suggest(trial, "patchtst", [mixer])
    assert params["mixer"] == mixer
    mixer_options(mixer, **params["mixer_options"])  # valid options of that mixer
    if mixer_spec(mixer).space is not None:  # its parameters carry its name
        own = [k for k in trial.params if k.startswith(f"{mixer}.")]
        assert len(own) == len(params["mixer_options"])
    f = Forecaster(lookback=48, horizon=12, **params)
    assert f.config.mixer == mixer and f.config.mixer_options == params["mixer_options"]


def test_mixer_is_a_categorical_choice_over_the_offered_mixers():
    offered = available_mixers()
    seen = set()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    for _ in range(12 * len(offered)):
        trial = study.ask()
        seen.add(spaces.suggest(trial, "itransformer", offered)["mixer"])
        study.tell(trial, 0.0)
    assert isinstance(study.trials[0].distributions["mixer"], optuna.distributions.CategoricalDistribution)
    assert seen == set(offered)


def test_dlinear_searches_no_mixer():
    trial = ask()
    params = spaces.suggest(trial, "dlinear", ["softmax"])
    assert "mixer" not in params and "mixer" not in trial.params
    assert set(params) == {"lr", "batch_size", "kernel_size", "individual"}
    assert params["kernel_size"] % 2 == 1


def test_finished_trial_params_replay_to_the_same_kwargs():
    offered = available_mixers()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    trial = study.ask()
    first = spaces.suggest(trial, "patchtst", offered)
    study.tell(trial, 1.0)
    assert best_params(study, "patchtst", offered, study.best_trial) == first
    assert first["stride"] == first["patch_len"] // 2 and first["d_ff"] % first["d_model"] == 0


def test_replay_restores_set_values_and_space_file_entries():
    """A study run with ``--set`` (a name out of the space) and a ``--space`` entry the built-in
    space lacks replays to exactly what its trials trained with."""
    from tsmix.tuning.study import SETUP_ATTR, _setup, make_search

    search = make_search("rlinear", ["softmax"], {"individual": False},
                         {"lookback": {"type": "categorical", "choices": [336, 512, 720]}})
    config = Forecaster(model="rlinear", individual=False).get_params()
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=5))
    study.set_user_attr(SETUP_ATTR, _setup("ETTh1", search, config))
    trial = study.ask()
    trained = search.suggest(trial)
    study.tell(trial, 1.0)
    assert "individual" not in study.best_trial.params and "lookback" in study.best_trial.params
    replayed = best_params(study, "rlinear", ["softmax"], study.best_trial)
    assert replayed == trained and replayed["individual"] is False
    with pytest.raises(TsmixError, match="cannot replay trial 0 .* as a patchtst trial"):
        best_params(study, "patchtst", ["softmax"], study.best_trial)


def test_unknown_names_are_clear_errors():
    with pytest.raises(TsmixError, match="unknown mixer 'nope'"):
        spaces.check_mixers(["softmax", "nope"])
    with pytest.raises(TsmixError, match="no search space for model 'lstm'"):
        spaces.suggest(ask(), "lstm", ["softmax"])
    with pytest.raises(TsmixError, match="no mixer given"):
        spaces.check_mixers([" ", ""])
    assert spaces.check_mixers(["softmax", "softmax "]) == ("softmax",)


def test_itransformer_searches_the_timestamp_tokens_and_patchtst_does_not():
    trial = ask()
    params = spaces.suggest(trial, "itransformer", ["softmax"])
    assert isinstance(params["calendar"], bool) and "calendar" in trial.params
    assert "calendar" not in spaces.suggest(ask(), "patchtst", ["softmax"])


@pytest.mark.parametrize("model", ["patchtst", "itransformer"])
def test_a_fixed_d_ff_leaves_no_dead_ratio_in_the_search(model):
    from tsmix.tuning.study import make_search

    searched = make_search(model, ("softmax",), {}, None)
    assert "ff_ratio" in searched.distributions()
    held = make_search(model, ("softmax",), {"d_ff": 96}, None)
    assert "ff_ratio" not in held.distributions() and "d_model" in held.distributions()
    trial = ask()
    assert held.suggest(trial)["d_ff"] == 96 and "ff_ratio" not in trial.params
