"""The shared model check: every registered model (and a plugin model) goes through it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tsmix import mixer_spec
from tsmix.errors import TsmixError
from tsmix.forecasting import Forecaster, model_spec

ROWS, LOOKBACK, HORIZON = 400, 48, 12
TINY = dict(
    epochs=2, d_model=16, heads=2, layers=1, d_ff=32, patch_len=8, stride=4, batch_size=32, lr=2e-3,
    lr_schedule="constant", dropout=0.0, progress=False, seed=7,
)


@pytest.fixture(scope="session")
def etth1_slice(data_dir) -> pd.DataFrame:
    return pd.read_csv(data_dir / "ETT-small" / "ETTh1.csv", nrows=ROWS, parse_dates=["date"])


def check_model(model: str, mixer: str, frame: pd.DataFrame, tmp_path: Path) -> Forecaster | None:
    """Tiny fit (loss falls), diagnostics, predict (shape, timestamps), save/load with equal outputs."""
    f = Forecaster(model, mixer=mixer, lookback=LOOKBACK, horizon=HORIZON, **TINY)
    uses_mixer = model_spec(model).uses_mixer
    if uses_mixer and not mixer_spec(mixer).supports_bidirectional:
        with pytest.raises(TsmixError, match="causal"):  # an encoder sees the whole window
            f.fit(frame)
        return None
    f.fit(frame)
    losses = [h["train_loss"] for h in f.history]
    assert all(np.isfinite(losses)) and np.isfinite(f.metrics_["mse"])
    assert losses[-1] < losses[0], losses

    diag = f.mixer_diagnostics()  # merged from the mixers that expose diagnostics() (hasattr, not name)
    if uses_mixer and hasattr(mixer_spec(mixer).cls, "diagnostics"):
        assert diag and all(k.startswith("blocks.0.mixer.") and np.isfinite(v) for k, v in diag.items())
    else:
        assert diag == {}

    pred = f.predict()
    assert list(pred.columns) == ["date", *frame.columns[1:]]
    assert pred.shape == (HORIZON, frame.shape[1])
    expected = pd.date_range(frame["date"].iloc[-1], periods=HORIZON + 1, freq="h")[1:]
    assert (pd.DatetimeIndex(pred["date"]) == expected).all()
    assert np.isfinite(pred.iloc[:, 1:].to_numpy()).all()

    run = f.save(tmp_path / "run")
    assert {"config.json", "model.safetensors", "metrics.json", "forecast.png"} <= {
        p.name for p in run.iterdir()
    }
    g = Forecaster.load(run)
    np.testing.assert_array_equal(g.predict().to_numpy(), pred.to_numpy())
    window = frame.iloc[100:100 + LOOKBACK + 5]  # predict from another history, both agree
    np.testing.assert_array_equal(g.predict(window).to_numpy(), f.predict(window).to_numpy())
    assert g.get_params() == {**f.config.resolved().to_dict()}
    return f


@pytest.fixture
def model_check() -> Callable[[str, str, pd.DataFrame, Path], Forecaster | None]:
    return check_model
