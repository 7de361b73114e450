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


def test_production_fit_registers_with_no_test_score(mini_csv, tmp_path, monkeypatch, capsys):
    import mlflow

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    rc = main(["fit", "--dataset", str(mini_csv), "--model", "dlinear", "--lookback", "48",
               "--horizon", "12", "--epochs", "2", "--threads", "1", "--no-progress", "--production",
               "--tracking-uri", uri, "--register-as", "prod", "--out", str(tmp_path / "run")])
    assert rc == 0, capsys.readouterr()
    client = mlflow.MlflowClient(uri)
    version = client.get_model_version("prod", "1")
    assert version.tags["test_mse"].startswith("none (production fit")
    assert "no test MSE (production fit on every row)" in version.description


def test_panel_fit_is_tracked_and_registered(tmp_path, monkeypatch, capsys):
    import mlflow
    import numpy as np

    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    pd.concat([pd.DataFrame({"unique_id": f"s{i}", "ds": pd.date_range("2020", periods=n, freq="h"),
                             "y": np.sin(np.arange(n) / 6 + i) + 0.1 * rng.normal(size=n)})
               for i, n in enumerate([300, 400])]).to_csv(tmp_path / "long.csv", index=False)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    rc = main(["fit", "--dataset", str(tmp_path / "long.csv"), "--model", "dlinear", "--lookback", "24",
               "--horizon", "6", "--epochs", "1", "--threads", "1", "--no-progress", "--val-size", "60",
               "--tracking-uri", uri, "--register-as", "panel", "--out", str(tmp_path / "run")])
    assert rc == 0, capsys.readouterr()
    mlflow.set_tracking_uri(uri)
    model = mlflow.pyfunc.load_model("models:/panel@champion")
    history = pd.read_csv(tmp_path / "long.csv").groupby("unique_id").tail(24)
    out = model.predict(history, params={"horizon": 3})
    assert list(out.columns[:3]) == ["unique_id", "ds", "y_hat"] and len(out) == 2 * 3
    run = client_run = mlflow.MlflowClient(uri).get_run(model.metadata.run_id)
    assert client_run.data.metrics["test_mse"] > 0
    assert any(a.path == "plots" for a in mlflow.MlflowClient(uri).list_artifacts(run.info.run_id))
