"""Ensembles: the mean forecast of members with different models and lookbacks, scored on every window."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from tsmix.errors import TsmixError
from tsmix.forecasting import Forecaster
from tsmix.forecasting.ensemble import Ensemble, mean_scores

from .conftest import HORIZON, TINY


def _members(lookbacks=(48, 32)) -> list[Forecaster]:
    return [Forecaster("rlinear", lookback=lookbacks[0], horizon=HORIZON, **TINY),
            Forecaster("patchtst", lookback=lookbacks[1], horizon=HORIZON, **TINY)]


@pytest.fixture(scope="module")
def fitted(etth1_slice) -> Ensemble:
    return Ensemble(_members(), weights=[1.0, 3.0]).fit(etth1_slice)


def test_scores_are_the_weighted_mean_forecast_over_every_window(fitted):
    preds, y = fitted.split_forecasts("test")
    a, b = fitted.members
    # the two lookbacks see the same test targets: one window per target row, in order
    assert preds[0].shape == preds[1].shape == y.shape
    assert y.shape[0] == a.evaluate("test")["windows"] == b.evaluate("test")["windows"]
    mean = 0.25 * preds[0].double() + 0.75 * preds[1].double()
    out = fitted.evaluate("test")
    assert out["mse"] == pytest.approx(float((mean - y.double()).square().mean()), rel=1e-12)
    assert out["mae"] == pytest.approx(float((mean - y.double()).abs().mean()), rel=1e-12)
    assert out["windows"] == y.shape[0]
    # each member's score inside the ensemble is its own evaluate()
    assert out["members"][0] == pytest.approx(a.evaluate("test")["mse"], rel=1e-6)
    assert out["members"][1] == pytest.approx(b.evaluate("test")["mse"], rel=1e-6)
    assert set(out["per_channel"]) == set(a.evaluate("test")["per_channel"])


def test_paper_protocol_keeps_full_batches_only(fitted):
    fair, paper = fitted.evaluate("test"), fitted.evaluate("test", "paper", batch_size=16)
    assert paper["windows"] == (fair["windows"] // 16) * 16 < fair["windows"]
    with pytest.raises(TsmixError, match="protocol must be"):
        fitted.evaluate("test", "drop")
    with pytest.raises(TsmixError, match="split must be"):
        fitted.evaluate("holdout")


def test_scores_from_forecasts_made_once_equal_evaluate(fitted):
    """mean_scores: any subset of a pool of members scored from forecasts made once."""
    preds, y = fitted.split_forecasts("test")
    for protocol in ("fair", "paper"):
        want = fitted.evaluate("test", protocol, batch_size=16)
        got = mean_scores(preds, y, fitted.columns, [1.0, 3.0], protocol=protocol, batch_size=16)
        assert got == want
    a = fitted.members[0].evaluate("test")["mse"]
    assert mean_scores(preds[:1], y, fitted.columns)["mse"] == pytest.approx(a, rel=1e-6)
    with pytest.raises(TsmixError, match="no complete batch of 100000"):
        mean_scores(preds, y, fitted.columns, protocol="paper", batch_size=100_000)
    with pytest.raises(TsmixError, match="weights must be 2"):
        mean_scores(preds, y, fitted.columns, [1.0])


@pytest.mark.parametrize("chunk", [1, 7 * 5, 10**9])  # a window per chunk, chunks that split the last, one
def test_chunked_scores_equal_the_whole_split_reference(monkeypatch, chunk):
    """mean_scores sums the windows a chunk at a time; the plain float64 formula over the whole split is
    the reference, for the mean and each member, whatever the chunking (values per window: 4 x 3)."""
    import tsmix.forecasting.ensemble as ens

    monkeypatch.setattr(ens, "_CHUNK_VALUES", chunk)
    g = torch.Generator().manual_seed(0)
    y = torch.randn(23, 4, 3, generator=g, dtype=torch.float64)
    preds = [torch.randn(23, 4, 3, generator=g), torch.randn(23, 4, 3, generator=g, dtype=torch.float64)]
    kept = preds[1].clone()
    for protocol, n in (("fair", 23), ("paper", 20)):
        got = mean_scores(preds, y, ["a", "b", "c"], [1.0, 3.0], protocol=protocol, batch_size=5)
        mean = 0.25 * preds[0][:n].double() + 0.75 * preds[1][:n]
        err = mean - y[:n]
        assert got["windows"] == n
        assert got["mse"] == pytest.approx(float(err.square().mean()), rel=1e-12)
        assert got["mae"] == pytest.approx(float(err.abs().mean()), rel=1e-12)
        want_b = float(err[..., 1].square().mean())
        assert got["per_channel"]["b"]["mse"] == pytest.approx(want_b, rel=1e-12)
        for k, p in enumerate(preds):
            own = float((p[:n].double() - y[:n]).square().mean())
            assert got["members"][k] == pytest.approx(own, rel=1e-12)
    assert torch.equal(preds[1], kept)  # a float64 member's forecasts are read, not overwritten


def test_predict_is_the_weighted_mean_of_member_frames(fitted):
    frames = [m.predict() for m in fitted.members]
    out = fitted.predict()
    assert list(out.columns) == list(frames[0].columns) and out.iloc[:, 0].equals(frames[0].iloc[:, 0])
    cols = out.columns[1:]
    expect = 0.25 * frames[0][cols].to_numpy() + 0.75 * frames[1][cols].to_numpy()
    np.testing.assert_allclose(out[cols].to_numpy(), expect, rtol=1e-12)
    with pytest.raises(TsmixError, match="point forecasts only"):
        fitted.predict(level=[80])


def test_save_load_round_trip(fitted, etth1_slice, tmp_path):
    path = fitted.save(tmp_path / "ens")
    again = Ensemble.load(path)
    np.testing.assert_allclose(again.weights, [0.25, 0.75])
    val = again.evaluate("val", data=etth1_slice)["mse"]  # a frame is not saved: pass it again
    assert val == pytest.approx(fitted.evaluate("val")["mse"], rel=1e-12)
    fitted.save(path)  # an ensemble folder is replaced in place
    test = Ensemble.load(path).evaluate("test", data=etth1_slice)["mse"]
    assert test == pytest.approx(fitted.evaluate("test")["mse"], rel=1e-12)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.txt").write_text("keep me")
    with pytest.raises(TsmixError, match="not an ensemble folder"):
        fitted.save(tmp_path / "other")
    with pytest.raises(TsmixError, match="ensemble.json"):
        Ensemble.load(tmp_path / "other")


def test_identical_members_score_like_one(etth1_slice):
    kw = dict(lookback=48, horizon=HORIZON, **TINY)
    a, b = Forecaster("rlinear", **kw), Forecaster("rlinear", **kw)
    ens = Ensemble([a, b]).fit(etth1_slice)  # same seed: the same model twice
    assert torch.equal(*ens.split_forecasts("val")[0])
    assert ens.evaluate("test")["mse"] == pytest.approx(a.evaluate("test")["mse"], rel=1e-6)


def test_bad_ensembles_are_refused(etth1_slice):
    with pytest.raises(TsmixError, match="at least 2"):
        Ensemble([Forecaster("rlinear", lookback=48, horizon=HORIZON)])
    with pytest.raises(TsmixError, match="must be tsmix Forecasters"):
        Ensemble([Forecaster("rlinear", lookback=48, horizon=HORIZON), object()])
    with pytest.raises(TsmixError, match="horizon"):
        Ensemble([Forecaster("rlinear", lookback=48, horizon=12),
                  Forecaster("rlinear", lookback=48, horizon=24)])
    with pytest.raises(TsmixError, match="weights"):
        Ensemble(_members(), weights=[1.0, -1.0])
    with pytest.raises(TsmixError, match="weights"):
        Ensemble(_members(), weights=[1.0])
    with pytest.raises(TsmixError, match="not fitted"):
        Ensemble(_members()).evaluate("test")
    a, b = _members()
    a.fit(etth1_slice)
    b.fit(etth1_slice.iloc[:300])  # other rows: other scaling and other test targets
    with pytest.raises(TsmixError, match="scales its data differently|other test targets"):
        Ensemble([a, b]).evaluate("test")


def test_cli_scores_saves_and_forecasts(etth1_slice, tmp_path, capsys):
    from tsmix.cli import main as cli_main

    data = tmp_path / "slice.csv"
    etth1_slice.to_csv(data, index=False)  # a file source: saved runs re-read it
    runs = []
    for k, m in enumerate(_members()):
        m.fit(data)
        runs.append(str(m.save(tmp_path / f"run{k}")))
    expect = Ensemble([Forecaster.load(r) for r in runs], [1.0, 3.0]).evaluate("val")
    assert cli_main(["ensemble", "--runs", *runs, "--weights", "1", "3", "--split", "val", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["mse"] == pytest.approx(expect["mse"], rel=1e-12) and got["members"] == expect["members"]

    out, forecast = tmp_path / "ens", tmp_path / "forecast.csv"
    assert cli_main(["ensemble", "--runs", *runs, "--out", str(out), "--output", str(forecast)]) == 0
    text = capsys.readouterr().out
    assert "test mse" in text and "weight 0.500" in text and forecast.is_file()
    frame = pd.read_csv(forecast)
    assert len(frame) == HORIZON and list(frame.columns) == list(etth1_slice.columns)
    # the saved folder is an ensemble again
    assert cli_main(["ensemble", "--runs", str(out), "--split", "val", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["mse"] == pytest.approx(Ensemble.load(out).evaluate("val")["mse"], rel=1e-12)
    assert cli_main(["ensemble", "--runs", runs[0]]) != 0  # a clear message, no traceback
    assert "at least 2 run directories" in capsys.readouterr().err
    assert cli_main(["ensemble", "--runs", *runs, "--weights", "1"]) != 0
    assert "weights must be 2" in capsys.readouterr().err
