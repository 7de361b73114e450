"""A fit tracked in a real ``mlflow server``: params, per-epoch losses, metrics, plot, model,
registry alias, ``models:/NAME@champion`` loading, and REST serving with ``mlflow models serve``."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
import uuid

import numpy as np
import pandas as pd
import pytest

from tsmix.errors import TsmixError
from tsmix.forecasting import Forecaster
from tsmix.tuning.pyfunc import input_example
from tsmix.tuning.tracking import check_tracking, flatten, resolve_tracking_uri, track_fit

pytestmark = pytest.mark.services
LOOKBACK, HORIZON, EPOCHS = 48, 12, 2


def tiny() -> Forecaster:
    return Forecaster(model="dlinear", lookback=LOOKBACK, horizon=HORIZON, epochs=EPOCHS, progress=False,
                      threads=1)


@pytest.fixture(scope="module")
def tracked(mlflow_server, mini_csv, tmp_path_factory):
    name = f"dlinear-{uuid.uuid4().hex[:8]}"
    out = tmp_path_factory.mktemp("tracked") / "run"
    f = tiny()
    run = track_fit(f, str(mini_csv), tracking_uri=mlflow_server, experiment="tracking-test",
                    register_as=name, alias="champion", out_dir=out)
    return f, run, name


def test_fit_is_logged_registered_and_aliased(tracked, mlflow_server, mini_csv):
    from mlflow import MlflowClient

    f, run, name = tracked
    assert (run.out_dir / "config.json").is_file() and (run.out_dir / "model.safetensors").is_file()
    client = MlflowClient(tracking_uri=mlflow_server)
    data = client.get_run(run.run_id).data
    assert data.params["model"] == "dlinear" and data.params["lookback"] == str(LOOKBACK)
    assert data.params["epochs"] == str(EPOCHS)
    assert data.metrics["test_mse"] == pytest.approx(f.metrics_["mse"])
    assert data.metrics["val_mse"] == pytest.approx(f.metrics_["val_mse"])
    assert "per_channel.OT.mse" in data.metrics
    for key in ("train_loss", "val_loss"):
        hist = client.get_metric_history(run.run_id, key)
        assert [m.step for m in sorted(hist, key=lambda m: m.step)] == list(range(1, EPOCHS + 1))
        assert [m.value for m in sorted(hist, key=lambda m: m.step)] == pytest.approx(
            [h[key] for h in f.history])
    paths = {a.path for a in client.list_artifacts(run.run_id, "plots")}
    assert paths == {"plots/forecast.png"}
    assert {a.path for a in client.list_artifacts(run.run_id, "run")} >= {"run/config.json"}
    version = client.get_model_version_by_alias(name, "champion")
    assert version.version == run.version == "1" and version.run_id == run.run_id


def test_models_uri_with_alias_loads_and_predicts(tracked, mlflow_server, mini_csv):
    import mlflow

    from tsmix.tuning.tracking import using_tracking

    f, run, name = tracked
    example = input_example(f, str(mini_csv))
    with using_tracking(mlflow_server):
        model = mlflow.pyfunc.load_model(f"models:/{name}@champion")
    assert model.metadata.get_input_schema() is None  # the model checks its input (text dates, ints)
    params = [p.name for p in model.metadata.get_params_schema().params]
    assert params[:2] == ["horizon", "level"]  # the pyfunc's own tests pin the rest (quantiles)
    out = model.predict(example)
    want = f.predict(example)
    assert out.shape == (HORIZON, 1 + 7) and list(out.columns) == list(want.columns)
    np.testing.assert_allclose(out.iloc[:, 1:].to_numpy(), want.iloc[:, 1:].to_numpy(), rtol=1e-6)
    assert (out["date"] > example["date"].max()).all()


def test_rest_serving_answers_invocations(tracked, mlflow_server, mini_csv, tmp_path, svc):
    f, run, name = tracked
    port = svc.free_port()
    log = tmp_path / "serve.log"
    cmd = [sys.executable, "-m", "mlflow", "models", "serve", "--env-manager", "local",
           "-m", f"models:/{name}@champion", "-h", "127.0.0.1", "-p", str(port)]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path,
                                env=svc.child_env(MLFLOW_TRACKING_URI=mlflow_server), start_new_session=True)
    try:
        svc.wait_http(f"http://127.0.0.1:{port}/ping", proc, 180, log)
        example = input_example(f, str(mini_csv))
        split = json.loads(example.to_json(orient="split", date_format="iso", index=False))
        body = json.dumps({"dataframe_split": split}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            preds = pd.DataFrame(json.loads(resp.read())["predictions"])
    finally:
        svc.stop(proc)
    want = f.predict(example)
    assert preds.shape == (HORIZON, 1 + 7) and list(preds.columns) == list(want.columns)
    assert pd.to_datetime(preds["date"]).tolist() == want["date"].tolist()
    np.testing.assert_allclose(preds.iloc[:, 1:].to_numpy(float), want.iloc[:, 1:].to_numpy(), rtol=1e-6)


def test_unreachable_server_fails_before_training(mini_csv, tmp_path, svc):
    f = tiny()
    dead = f"http://127.0.0.1:{svc.free_port()}"
    with pytest.raises(TsmixError, match="not reachable"):
        track_fit(f, str(mini_csv), tracking_uri=dead, out_dir=tmp_path / "run")
    assert not f.is_fitted  # nothing was trained
    assert not (tmp_path / "run").exists()


def test_tune_cli_with_unreachable_server_creates_nothing(mini_csv, tmp_path, monkeypatch, capsys, svc):
    from tsmix.cli import main

    monkeypatch.chdir(tmp_path)
    rc = main(["tune", "--dataset", str(mini_csv), "--model", "dlinear", "--trials", "2", "--epochs", "1",
               "--lookback", "48", "--horizon", "12", "--study", "s",
               "--tracking-uri", f"http://127.0.0.1:{svc.free_port()}"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "tsmix tune: error: MLflow tracking server" in err and "not reachable" in err
    assert list(tmp_path.iterdir()) == []  # no study storage, no run directory


def test_default_tracking_uri_is_sqlite_in_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_tracking_uri(None) == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    assert resolve_tracking_uri("sqlite:///x/m.db") == f"sqlite:///{tmp_path.resolve() / 'x' / 'm.db'}"
    with pytest.raises(TsmixError, match="does not exist"):
        check_tracking("sqlite:///missing/m.db")


def test_flatten_nested_config():
    assert flatten({"a": 1, "mixer_options": {"beta": 0.5, "n": {"k": 2}}}) == {
        "a": 1, "mixer_options.beta": 0.5, "mixer_options.n.k": 2}


def test_tracking_flags_for_other_commands():
    import argparse

    from tsmix.tuning.cli import add_tracking_arguments, tracking_requested

    p = argparse.ArgumentParser()
    add_tracking_arguments(p)
    assert not tracking_requested(p.parse_args([]))
    assert tracking_requested(p.parse_args(["--track"]))
    args = p.parse_args(["--register-as", "m", "--alias", "prod"])
    assert tracking_requested(args)
    assert (args.register_as, args.alias, args.experiment) == ("m", "prod", "tsmix")
