"""One check shared by every (model, mixer) pair: tiny fit on an ETTh1 slice, predict, save/load.

Models come from the model registry and mixers from the mixer registry: a model or mixer
registered later is covered here without a new test. A model without a token mixer runs once.
The check itself is ``check_model`` in this folder's conftest.
"""

from __future__ import annotations

import pytest

from tsmix import available_mixers
from tsmix.forecasting import available_models, model_spec

PAIRS = [(m, "softmax") for m in available_models() if not model_spec(m).uses_mixer]
PAIRS += [(m, x) for m in available_models() if model_spec(m).uses_mixer for x in available_mixers()]


@pytest.mark.parametrize(("model", "mixer"), PAIRS, ids=[f"{m}-{x}" for m, x in PAIRS])
def test_model_mixer_pair(model, mixer, etth1_slice, tmp_path, model_check):
    model_check(model, mixer, etth1_slice, tmp_path)
