"""``tsmix fit --tracking-uri/--register-as``: the fit command tracks and registers through MLflow."""

from __future__ import annotations

import pandas as pd
import pytest

from tsmix.cli import main

pytestmark = pytest.mark.services


def test_fit_command_registers_and_the_alias_predicts(mini_csv, tmp_path, monkeypatch, capsys):
    import mlflow

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    rc = main(["fit", "--dataset", str(mini_csv), "--model", "dlinear", "--lookback", "48",
               "--horizon", "12", "--epochs", "1", "--threads", "1", "--no-progress",
               "--tracking-uri", uri, "--register-as", "cli-demo", "--out", str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "registered models:/cli-demo@champion (version 1)" in out
    assert (tmp_path / "run" / "config.json").exists()
    mlflow.set_tracking_uri(uri)
    model = mlflow.pyfunc.load_model("models:/cli-demo@champion")
    history = pd.read_csv(mini_csv, parse_dates=["date"]).tail(48)
    forecast = model.predict(history)
    assert forecast.shape == (12, history.shape[1])
    assert (forecast["date"] > history["date"].iloc[-1]).all()


def test_fit_command_unreachable_server_fails_before_training(mini_csv, tmp_path, capsys):
    rc = main(["fit", "--dataset", str(mini_csv), "--model", "dlinear", "--lookback", "48",
               "--horizon", "12", "--epochs", "1", "--tracking-uri", "http://127.0.0.1:9",
               "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "not reachable" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()
