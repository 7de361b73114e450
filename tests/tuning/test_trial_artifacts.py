"""Per-trial artifacts (#17): every COMPLETE trial's nested run carries its config and a forecast
plot drawn on the VALIDATION split only; nothing a trial logs mentions test metrics; a plot that
fails to draw costs a warning, never the trial."""

from __future__ import annotations

import inspect
import json

import pandas as pd
import pytest

from tsmix.tuning.study import run_study
from tsmix.tuning.tracking import TRIAL_PLOT

TINY = dict(model="dlinear", epochs=1, lookback=48, horizon=12, threads=1, verbose=False, refit=False,
            pruner="none")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TEST_WORDS = ("test_mse", "test_mae", "test_windows", "per_channel")


def trial_runs(uri: str, experiment: str) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], "tags.`optuna.trial` != ''")
    return [r for r in runs if "tsmix.refit" not in r.data.tags]


@pytest.fixture
def plotted(monkeypatch):
    """Record the timestamps every forecast plot draws (history and forecast) while still drawing it."""
    import tsmix.forecasting.plotting as plotting

    calls, draw = [], plotting.plot_window
    signature = inspect.signature(draw)

    def spy(*args, **kwargs):
        a = signature.bind(*args, **kwargs).arguments
        calls.append((pd.DatetimeIndex(a["history_ts"]), pd.DatetimeIndex(a["future_ts"]), a["title"]))
        return draw(*args, **kwargs)

    monkeypatch.setattr(plotting, "plot_window", spy)
    return calls


def test_each_trial_logs_config_and_a_validation_plot(mini_csv, tmp_path, plotted):
    from mlflow import MlflowClient

    from tsmix.datasets import prepare

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = run_study(str(mini_csv), trials=2, storage=f"sqlite:///{tmp_path / 'optuna.db'}", study="art",
                       tracking_uri=uri, **TINY)
    assert result.complete == 2
    client = MlflowClient(tracking_uri=uri)
    runs = trial_runs(uri, "art")
    assert len(runs) == 2
    for r in runs:
        rid = r.info.run_id
        assert {a.path for a in client.list_artifacts(rid)} == {"config.json", "plots"}
        assert [a.path for a in client.list_artifacts(rid, "plots")] == [TRIAL_PLOT]
        png = open(client.download_artifacts(rid, TRIAL_PLOT, str(tmp_path)), "rb").read()
        assert png.startswith(PNG_MAGIC) and len(png) > 5000  # a drawn figure, not an empty file
        # nothing a trial logs mentions the test split's scores
        config = open(client.download_artifacts(rid, "config.json", str(tmp_path))).read()
        logged = json.dumps([sorted(r.data.metrics), r.data.params, r.data.tags]) + config
        assert not [w for w in TEST_WORDS if w in logged]

    # the plots show the last validation window: its forecast ends where validation ends
    prepared = prepare(str(mini_csv), 48, 12, "M")
    val_end = prepared.series.index[prepared.borders["val"][1] - 1]
    test_only = prepared.series.index[prepared.borders["val"][1]:]  # rows no trial may see
    assert len(plotted) == 2
    for history_ts, future_ts, title in plotted:
        assert future_ts[-1] == val_end and " val: " in title
        assert not set(history_ts) & set(test_only) and not set(future_ts) & set(test_only)


def test_a_failing_plot_warns_and_the_trial_completes(mini_csv, tmp_path, monkeypatch):
    from mlflow import MlflowClient

    from tsmix.forecasting import Forecaster

    def broken(self, path, split="test", channel=None):
        raise RuntimeError("no canvas")

    monkeypatch.setattr(Forecaster, "plot_forecast", broken)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with pytest.warns(UserWarning, match="val forecast plot was not logged.*no canvas"):
        result = run_study(str(mini_csv), trials=1, storage=f"sqlite:///{tmp_path / 'optuna.db'}",
                           study="broken", tracking_uri=uri, **TINY)
    assert (result.complete, result.failed) == (1, 0)
    (run,) = trial_runs(uri, "broken")
    assert run.info.status == "FINISHED" and run.data.tags["optuna.state"] == "COMPLETE"
    assert {a.path for a in MlflowClient(tracking_uri=uri).list_artifacts(run.info.run_id)} == {"config.json"}
