"""A mixer defined outside tsmix, in its own module file: the contract is checked when it
registers, and once registered it works through build_mixer and trains in both encoders
through the Forecaster with no other edit."""

from __future__ import annotations

import importlib
import math
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest
import torch

import tsmix
from tsmix.registry import unregister_mixer

NAME = "zz-toy-mean"

TOY = '''
from dataclasses import dataclass

import torch
from torch import nn

from tsmix import Mixer, register_mixer
from tsmix.ops.attention import causal_mask


@dataclass(frozen=True)
class ToyOptions:
    scale: float = 1.0  # multiplies the pooled tokens


@register_mixer("{name}", options=ToyOptions)
class MeanMixer(Mixer):
    """Toy: a linear map of the (causal) running mean of the tokens."""

    def __init__(self, dim, heads, causal, options):
        super().__init__()
        self.causal, self.options = causal, options
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):  # (B, N, D) -> (B, N, D)
        n = x.shape[1]
        if self.causal:
            count = torch.arange(1, n + 1, dtype=x.dtype, device=x.device)[:, None]
            pooled = x.cumsum(1) / count
        else:
            pooled = x.mean(1, keepdim=True).expand_as(x)
        return self.proj(self.options.scale * pooled)
{reference}'''

REFERENCE = '''
    def reference(self, x):  # the explicit (N, N) averaging matrix
        n = x.shape[1]
        keep = causal_mask(n, x.device) if self.causal else torch.ones(n, n, dtype=torch.bool)
        w = keep.to(x.dtype) / keep.sum(-1, keepdim=True)
        return self.proj(self.options.scale * (w @ x))
'''


def _import_toy(tmp_path, monkeypatch, module: str, with_reference: bool):
    (tmp_path / f"{module}.py").write_text(
        textwrap.dedent(TOY).format(name=NAME, reference=REFERENCE if with_reference else "")
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return importlib.import_module(module)


@pytest.fixture
def cleanup():
    yield
    unregister_mixer(NAME)
    for mod in [m for m in sys.modules if m.startswith("zz_toy_")]:
        del sys.modules[mod]
    assert NAME not in tsmix.available_mixers()


def test_a_mixer_without_reference_is_refused_at_registration(tmp_path, monkeypatch, cleanup):
    with pytest.raises(TypeError, match=f"mixer '{NAME}' .MeanMixer. does not define reference"):
        _import_toy(tmp_path, monkeypatch, "zz_toy_noref", with_reference=False)
    assert NAME not in tsmix.available_mixers()


@pytest.mark.parametrize(
    "body,problem",
    [
        ("def forward(self, x):\n        return x\n    def reference(self, x):\n        return x",
         "constructible as cls.dim, heads, causal, options."),  # __init__ missing options
        ("def reference(self, x):\n        return x", "does not define forward"),
    ],
)
def test_other_contract_breaches_are_refused(body, problem):
    code = (
        "class Bad(tsmix.Mixer):\n"
        "    def __init__(self, dim, heads, causal):\n"
        "        super().__init__()\n"
        f"    {body}\n"
    )
    space: dict = {"tsmix": tsmix}
    exec(code, space)  # noqa: S102 - a class body written out as a user would
    with pytest.raises(TypeError, match=problem):
        tsmix.register_mixer(NAME)(space["Bad"])
    assert NAME not in tsmix.available_mixers()


def test_streaming_needs_a_step():
    class NoStep(tsmix.Mixer):
        def __init__(self, dim, heads, causal, options):
            super().__init__()

        def forward(self, x):
            return x

        def reference(self, x):
            return x

    with pytest.raises(TypeError, match="does not define step, recurrent"):
        tsmix.register_mixer(NAME, streaming=True)(NoStep)
    with pytest.raises(TypeError, match="needs supports_causal=True"):
        tsmix.register_mixer(NAME, streaming=True, supports_causal=False)
    assert NAME not in tsmix.available_mixers()


def test_a_registered_toy_mixer_builds_and_meets_the_contract(tmp_path, monkeypatch, cleanup):
    _import_toy(tmp_path, monkeypatch, "zz_toy_ok", with_reference=True)
    assert NAME in tsmix.available_mixers()
    caps = tsmix.mixer_capabilities(NAME)
    assert caps.labels() == ["causal", "bidirectional"]  # no position-aware, no streaming
    with pytest.raises(tsmix.TsmixError, match=f"option 'scale' of mixer '{NAME}' must be float"):
        tsmix.build_mixer(NAME, 8, scale="2")
    for causal in (False, True):
        torch.manual_seed(0)
        m = tsmix.build_mixer(NAME, 8, heads=2, causal=causal, scale=2).double()
        x = torch.randn(2, 7, 8, dtype=torch.float64)
        torch.testing.assert_close(m(x), m.reference(x), rtol=1e-12, atol=1e-12)
    x2 = x.clone()
    x2[:, 4:] += 1.0
    torch.testing.assert_close(m(x)[:, :4], m(x2)[:, :4])  # the causal one does not look ahead


def _frame(rows: int = 240, channels: int = 2) -> pd.DataFrame:
    t = np.arange(rows)
    data = {f"c{i}": np.sin(2 * np.pi * t / (12 + 5 * i)) + 0.1 * np.cos(t / 7.0) for i in range(channels)}
    return pd.DataFrame({"date": pd.date_range("2020-01-01", periods=rows, freq="h"), **data})


@pytest.mark.parametrize("model", ["patchtst", "itransformer"])
def test_the_toy_mixer_trains_in_both_encoders(tmp_path, monkeypatch, cleanup, model):
    _import_toy(tmp_path, monkeypatch, "zz_toy_fit", with_reference=True)
    f = tsmix.Forecaster(
        model=model, mixer=NAME, mixer_options={"scale": 0.5}, lookback=24, horizon=8, epochs=1,
        d_model=8, heads=2, layers=1, d_ff=16, patch_len=8, stride=4, batch_size=32, seed=0,
    )
    f.fit(_frame())
    mixers = [m for m in f.model_.modules() if type(m).__name__ == "MeanMixer"]
    assert len(mixers) == 1 and mixers[0].options.scale == 0.5
    assert math.isfinite(f.history[-1]["train_loss"])
    assert math.isfinite(f.evaluate("test")["mse"])
