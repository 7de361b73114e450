"""One check shared by every (model, mixer) pair: tiny fit on an ETTh1 slice, predict, save/load.

A mixer registered later is covered here without a new test.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tsmix import available_mixers, mixer_spec
from tsmix.errors import TsmixError
from tsmix.forecasting import Forecaster

ROWS, LOOKBACK, HORIZON = 400, 48, 12
TINY = dict(
    epochs=2, d_model=16, heads=2, layers=1, d_ff=32, patch_len=8, stride=4, batch_size=32, lr=2e-3,
    lr_schedule="constant", dropout=0.0, progress=False, seed=7,
)
PAIRS = [("dlinear", "softmax")] + [(m, x) for m in ("patchtst", "itransformer") for x in available_mixers()]


@pytest.fixture(scope="module")
def etth1_slice(data_dir) -> pd.DataFrame:
    return pd.read_csv(data_dir / "ETT-small" / "ETTh1.csv", nrows=ROWS, parse_dates=["date"])


@pytest.mark.parametrize(("model", "mixer"), PAIRS, ids=[f"{m}-{x}" for m, x in PAIRS])
def test_model_mixer_pair(model, mixer, etth1_slice, tmp_path):
    f = Forecaster(model, mixer=mixer, lookback=LOOKBACK, horizon=HORIZON, **TINY)
    if model != "dlinear" and not mixer_spec(mixer).supports_bidirectional:
        with pytest.raises(TsmixError, match="causal"):  # an encoder sees the whole window
            f.fit(etth1_slice)
        return
    f.fit(etth1_slice)
    losses = [h["train_loss"] for h in f.history]
    assert all(np.isfinite(losses)) and np.isfinite(f.metrics_["mse"])
    assert losses[-1] < losses[0], losses

    diag = f.mixer_diagnostics()  # merged from the mixers that expose diagnostics() (hasattr, not name)
    if model != "dlinear" and hasattr(mixer_spec(mixer).cls, "diagnostics"):
        assert diag and all(k.startswith("blocks.0.mixer.") and np.isfinite(v) for k, v in diag.items())
    else:
        assert diag == {}

    pred = f.predict()
    assert list(pred.columns) == ["date", *etth1_slice.columns[1:]]
    assert pred.shape == (HORIZON, 8)
    last = etth1_slice["date"].iloc[-1]
    expected = pd.date_range(last, periods=HORIZON + 1, freq="h")[1:]
    assert (pd.DatetimeIndex(pred["date"]) == expected).all()
    assert np.isfinite(pred.iloc[:, 1:].to_numpy()).all()

    run = f.save(tmp_path / "run")
    assert {"config.json", "model.safetensors", "metrics.json", "forecast.png"} <= {
        p.name for p in run.iterdir()
    }
    g = Forecaster.load(run)
    np.testing.assert_array_equal(g.predict().to_numpy(), pred.to_numpy())
    window = etth1_slice.iloc[100:100 + LOOKBACK + 5]  # predict from another history, both agree
    np.testing.assert_array_equal(g.predict(window).to_numpy(), f.predict(window).to_numpy())
    assert g.get_params() == {**f.config.resolved().to_dict()}
