"""The pyfunc model is portable: it bundles tsmix and its requirements, loads where tsmix is not
importable, takes string dates, integer columns and ``horizon`` / ``level`` / ``quantiles`` params, and
serves CSV and JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import requires
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from mlflow.exceptions import MlflowException
from packaging.requirements import Requirement

from tsmix.errors import TsmixError
from tsmix.forecasting import Forecaster
from tsmix.tuning.pyfunc import input_example
from tsmix.tuning.tracking import track_fit, using_tracking

LOOKBACK, HORIZON = 48, 12
QS = [0.1, 0.9]  # quantiles asked of the served model

# Run in a fresh interpreter: every import of tsmix from anywhere but the model directory
# raises ImportError (covers editable finders, .pth files and site-packages alike), then the
# model is loaded and predicts. argv: model dir, example parquet, output parquet.
ISOLATED_LOAD = r"""
import importlib.abc, json, os, sys
import pandas as pd

MODEL = os.path.realpath(sys.argv[1])

class OnlyBundled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] != "tsmix":
            return None
        for finder in sys.meta_path[sys.meta_path.index(self) + 1:]:
            spec = finder.find_spec(name, path, target) if hasattr(finder, "find_spec") else None
            if spec is None:
                continue
            where = [w for w in [spec.origin, *(spec.submodule_search_locations or [])] if w]
            if all(os.path.realpath(w).startswith(MODEL + os.sep) for w in where):
                return spec
            raise ImportError(f"{name} from outside the model: {where}")
        return None

sys.meta_path.insert(0, OnlyBundled())
try:
    import tsmix
    sys.exit("tsmix imported before the model was loaded: the blocker does not work")
except ImportError:
    pass
import mlflow.pyfunc
model = mlflow.pyfunc.load_model(MODEL)
out = model.predict(pd.read_parquet(sys.argv[2]), params={"horizon": 5})
out.to_parquet(sys.argv[3])
import tsmix
files = [getattr(m, "__file__", None) or "" for n, m in sys.modules.items() if n.partition(".")[0] == "tsmix"]
print(json.dumps({"tsmix": tsmix.__file__, "model": MODEL, "modules": len(files),
                  "outside": [f for f in files if not os.path.realpath(f).startswith(MODEL + os.sep)]}))
"""


@pytest.fixture(scope="module")
def logged(mini_csv, tmp_path_factory):
    """A DLinear fitted for one epoch on the ETTh1 slice, tracked in sqlite; the model downloaded."""
    import mlflow

    root = tmp_path_factory.mktemp("pyfunc")
    f = Forecaster(model="dlinear", lookback=LOOKBACK, horizon=HORIZON, epochs=1, progress=False, threads=1)
    run = track_fit(f, str(mini_csv), tracking_uri=f"sqlite:///{root / 'mlflow.db'}", out_dir=root / "run")
    with using_tracking(run.tracking_uri):
        model_dir = Path(mlflow.artifacts.download_artifacts(run.model_uri, dst_path=str(root / "model")))
    example = input_example(f, str(mini_csv))
    return f, example, model_dir, mlflow.pyfunc.load_model(str(model_dir))


def values(frame: pd.DataFrame) -> np.ndarray:
    return frame.iloc[:, 1:].to_numpy(dtype=float)


def test_model_bundles_tsmix_and_declares_resolvable_requirements(logged):
    _, _, model_dir, _ = logged
    code = model_dir / "code" / "tsmix"
    for sub in ("", "datasets", "forecasting", "tuning", "models", "mixers"):
        assert (code / sub / "__init__.py").is_file(), sub
    assert (code / "forecasting" / "benchmark" / "published.csv").is_file()  # package data travels
    assert not list(code.rglob("__pycache__")) and not list(code.rglob("tests"))
    reqs = [Requirement(line) for line in (model_dir / "requirements.txt").read_text().split()]
    names = {r.name for r in reqs}
    assert "tsmix" not in names  # no pin of a package no index serves: it travels as code
    declared = [Requirement(r) for r in requires("tsmix")]
    assert names == {r.name for r in declared if "extra" not in str(r.marker)}  # runtime deps, no dev extras
    torch = next(r for r in reqs if r.name == "torch")
    assert torch.specifier and not any(s.operator == "==" for s in torch.specifier)


@pytest.mark.slow
def test_loads_and_predicts_where_tsmix_is_not_importable(logged, tmp_path, svc):
    f, example, model_dir, model = logged
    example.to_parquet(tmp_path / "example.parquet")
    env = svc.child_env()
    env.pop("PYTHONPATH", None)
    args = [str(model_dir), str(tmp_path / "example.parquet"), str(tmp_path / "out.parquet")]
    proc = subprocess.run([sys.executable, "-c", ISOLATED_LOAD, *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(report["tsmix"]).is_relative_to(Path(report["model"]) / "code")
    assert report["modules"] > 10 and report["outside"] == []
    got = pd.read_parquet(tmp_path / "out.parquet")
    want = model.predict(example).iloc[:5]
    assert got["date"].tolist() == want["date"].tolist()
    np.testing.assert_allclose(values(got), values(want), rtol=1e-6)
    np.testing.assert_allclose(values(want), values(f.predict(example))[:5], rtol=1e-6)


def test_string_dates_int_columns_and_column_order(logged):
    f, example, _, model = logged
    want = f.predict(example)
    for dates in (example["date"].dt.strftime("%Y-%m-%dT%H:%M:%S"), example["date"].astype(str)):
        got = model.predict(example.assign(date=dates))
        assert got["date"].tolist() == want["date"].tolist()
        np.testing.assert_allclose(values(got), values(want), rtol=1e-6)
    whole = example.assign(**{c: example[c].round().astype("int64") for c in example.columns[1:]})
    shuffled = whole[["OT", "date", *example.columns[1:-1]]].assign(extra="ignored")
    got = model.predict(shuffled)
    as_floats = whole.astype({c: "float64" for c in whole.columns[1:]})
    np.testing.assert_allclose(values(got), values(f.predict(as_floats)), rtol=1e-6)
    with pytest.raises(TsmixError, match=r"missing column\(s\) \['OT'\]"):
        model.predict(example.drop(columns="OT"))


def test_horizon_and_level_params(logged):
    f, example, _, model = logged
    full = model.predict(example)
    assert len(full) == HORIZON  # default: the trained horizon
    short = model.predict(example, params={"horizon": 4})
    assert len(short) == 4 and short.equals(full.iloc[:4])
    with pytest.raises(TsmixError, match=f"horizon=13 is longer than the {HORIZON} steps") as err:
        model.predict(example, params={"horizon": HORIZON + 1})
    assert isinstance(err.value, MlflowException)  # served as a 400 with this message
    with pytest.raises(TsmixError, match="positive"):
        model.predict(example, params={"horizon": 0})
    banded = model.predict(example, params={"level": [80]})  # conformal bands of the point model
    assert "OT-lo-80" in banded.columns and "OT-hi-80" in banded.columns
    with pytest.raises(TsmixError, match="level must lie strictly between 0 and 100"):
        model.predict(example, params={"level": [100]})
    with pytest.raises(MlflowException):  # the Forecaster's own checks reach REST clients too
        model.predict(example.tail(LOOKBACK - 1))
    schema = {p.name: p for p in model.metadata.get_params_schema().params}
    assert schema["horizon"].default == HORIZON and schema["level"].shape == (-1,)
    assert schema["quantiles"].default == [] and schema["quantiles"].shape == (-1,)


def test_quantiles_param_returns_the_forecasters_columns(logged):
    """The MSE model's conformal quantiles: the columns and values of ``Forecaster.predict``."""
    f, example, _, model = logged
    want = f.predict(example, quantiles=[0.1, 0.9]).iloc[:5]
    got = model.predict(example, params={"quantiles": [0.1, 0.9], "horizon": 5})
    assert "OT-q0.1" in got.columns and "OT-q0.9" in got.columns
    assert list(got.columns) == list(want.columns) and got["date"].tolist() == want["date"].tolist()
    np.testing.assert_allclose(values(got), values(want), rtol=1e-6)
    assert (got["OT-q0.1"] < got["OT-q0.9"]).all()
    both = model.predict(example, params={"quantiles": [0.5], "level": [80]})
    assert {"OT-q0.5", "OT-lo-80", "OT-hi-80"} <= set(both.columns)
    for bad in ([1.5], [0.0], [0.2, 0.2]):  # the library's checks, served as 400s
        with pytest.raises(TsmixError, match="quantiles") as err:
            model.predict(example, params={"quantiles": bad})
        assert isinstance(err.value, MlflowException)


def test_input_example_keeps_the_data_zone(logged, mini_csv):
    f, _, _, _ = logged
    frame = pd.read_csv(mini_csv, parse_dates=["date"])
    frame["date"] = frame["date"].dt.tz_localize("Europe/Berlin")
    example = input_example(f, frame)
    assert str(example["date"].dt.tz) == "Europe/Berlin"
    assert example["date"].tolist() == frame["date"].tail(LOOKBACK).tolist()


@pytest.mark.slow
def test_rest_serves_csv_and_json(logged, tmp_path, svc):
    f, example, model_dir, model = logged
    split = json.loads(example.to_json(orient="split", date_format="iso", index=False))
    records = json.loads(example.to_json(orient="records", date_format="iso"))
    js = "application/json"
    with svc.serve(model_dir, tmp_path) as post:
        answers = {
            "csv": post(example.to_csv(index=False), "text/csv"),
            "split": post(json.dumps({"dataframe_split": split, "params": {"horizon": 6}}), js),
            "records": post(json.dumps({"dataframe_records": records}), js),
            "too long": post(json.dumps({"dataframe_split": split, "params": {"horizon": 99}}), js),
            "quantiles": post(json.dumps({"dataframe_split": split, "params": {"quantiles": QS}}), js),
            "bad quantile": post(json.dumps({"dataframe_split": split, "params": {"quantiles": [1.5]}}), js),
        }
    want = model.predict(example)
    for key, rows in (("csv", HORIZON), ("split", 6), ("records", HORIZON)):
        status, body = answers[key]
        assert status == 200, (key, body[-2000:])
        got = pd.DataFrame(json.loads(body)["predictions"])
        assert list(got.columns) == list(want.columns), key
        assert pd.to_datetime(got["date"]).tolist() == want["date"].iloc[:rows].tolist(), key
        np.testing.assert_allclose(values(got), values(want)[:rows], rtol=1e-6, err_msg=key)
    status, body = answers["too long"]
    assert status == 400 and "horizon=99 is longer than the 12 steps" in json.loads(body)["message"]
    status, body = answers["quantiles"]
    assert status == 200, body[-2000:]
    got = pd.DataFrame(json.loads(body)["predictions"])
    want = model.predict(example, params={"quantiles": QS})
    assert list(got.columns) == list(want.columns) and "OT-q0.9" in got.columns
    np.testing.assert_allclose(values(got), values(want), rtol=1e-6)
    status, body = answers["bad quantile"]
    assert status == 400 and "quantiles" in json.loads(body)["message"]
