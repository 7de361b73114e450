"""A model fitted on a long panel predicts long input through the MLflow pyfunc: the same forecast as
``Forecaster.predict``, string dates and integer values accepted, future covariates as empty-target
rows, static attributes carried from training or sent as columns, one-line errors for bad input."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow.exceptions import MlflowException

from tsmix.datasets.panel_synthetic import synthetic_panel
from tsmix.errors import TsmixError
from tsmix.forecasting import Forecaster
from tsmix.tuning.pyfunc import PyfuncInputError, log_forecaster
from tsmix.tuning.pyfunc_panel import PanelSpec, panel_example
from tsmix.tuning.tracking import using_tracking

L, H = 24, 6
TINY = dict(epochs=1, batch_size=32, progress=False, threads=1, seed=3)
KEY = ["unique_id", "ds"]


def log_and_load(f: Forecaster, df: pd.DataFrame, root: Path) -> tuple[Path, object]:
    """Save ``f``, log it to a sqlite store under ``root``, download it; (model dir, loaded pyfunc)."""
    run = f.save(root / "run")
    with using_tracking(f"sqlite:///{root / 'mlflow.db'}"):
        with mlflow.start_run():
            info = log_forecaster(f, run, df)
        model_dir = Path(mlflow.artifacts.download_artifacts(info.model_uri, dst_path=str(root / "model")))
    return model_dir, mlflow.pyfunc.load_model(str(model_dir))


@pytest.fixture(scope="module")
def data():
    # ragged: different starts and lengths; s00001 is the shortest
    return synthetic_panel([100, 60, 130], [0, 25, 5], seed=1)


@pytest.fixture(scope="module")
def plain(data, tmp_path_factory):
    """DLinear on the target alone."""
    df = data[0][["unique_id", "ds", "y"]]
    # two horizons of validation: enough windows for conformal 80% intervals
    f = Forecaster("dlinear", lookback=L, horizon=H, val_size=2 * H, **TINY).fit(df)
    return (f, df, *log_and_load(f, df, tmp_path_factory.mktemp("panel-pyfunc")))


@pytest.fixture(scope="module")
def covariates(data, tmp_path_factory):
    """DLinear with a past-only and a future-known covariate and static attributes."""
    df, static = data
    f = Forecaster("dlinear", lookback=L, horizon=H, hist_exog=["load"], futr_exog=["promo"], **TINY)
    f.fit(df, static_df=static)
    return (f, df, static, *log_and_load(f, df, tmp_path_factory.mktemp("panel-pyfunc-cov")))


def split_tail(df: pd.DataFrame, steps: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(history without the last ``steps`` rows of each series, those rows)."""
    last = df.groupby("unique_id").cumcount(ascending=False) < steps
    return df[~last], df[last]


def assert_same(got: pd.DataFrame, want: pd.DataFrame) -> None:
    assert list(got.columns) == list(want.columns) == ["unique_id", "ds", "y_hat"]
    assert got[KEY].astype(str).values.tolist() == want[KEY].astype(str).values.tolist()
    np.testing.assert_allclose(got["y_hat"].to_numpy(), want["y_hat"].to_numpy(), rtol=1e-6)


def test_long_input_forecasts_like_the_forecaster(plain):
    f, df, model_dir, model = plain
    assert model.model_config["panel"] == {
        "id_column": "unique_id", "time_column": "ds", "target_column": "y", "hist_exog": [], "futr_exog": [],
        "static": [], "lookback": L, "horizon": H}
    full = model.predict(df)
    assert full.groupby("unique_id").size().tolist() == [H, H, H]  # default: the trained horizon
    assert_same(full, f.predict(df))
    history, _ = split_tail(df, 10)  # another origin: the request's own history decides
    assert_same(model.predict(history, params={"horizon": 4}), f.predict(history, h=4))
    # the logged example: the last lookback rows of each of the (three) series, as a request
    example = mlflow.models.Model.load(model_dir).load_input_example(model_dir)
    assert list(example.columns) == ["unique_id", "ds", "y"]
    assert example.groupby("unique_id").size().tolist() == [L, L, L]
    assert_same(model.predict(example), f.predict(df))  # its tail is the data's


def test_input_example_from_a_file(plain, tmp_path):
    f, df, _, model = plain
    df.sample(frac=1.0, random_state=1).to_csv(tmp_path / "long.csv", index=False)  # unsorted rows
    example = panel_example(f, str(tmp_path / "long.csv"), PanelSpec.of(f))
    assert example.groupby("unique_id").size().tolist() == [L, L, L]
    assert pd.to_datetime(example["ds"]).tolist() == df.groupby("unique_id").tail(L)["ds"].tolist()
    assert_same(model.predict(example), f.predict(df))


def test_string_dates_int_values_row_order_and_extra_columns(plain):
    f, df, _, model = plain
    whole = df.assign(y=df["y"].round().astype("int64"))
    want = f.predict(whole.astype({"y": "float64"}), h=3)
    for dates in (df["ds"].dt.strftime("%Y-%m-%dT%H:%M:%S"), df["ds"].astype(str)):
        request = whole.assign(ds=dates, note="ignored").sample(frac=1.0, random_state=0)  # shuffled rows
        assert_same(model.predict(request, params={"horizon": 3}), want)
    rest = {c: whole[c].tolist() for c in ("unique_id", "y")} | {"ds": df["ds"].astype(str).tolist()}
    assert_same(model.predict(pd.DataFrame(rest), params={"horizon": 3}), want)  # dict-of-lists as REST sends


def test_bad_requests_are_one_line_errors(plain):
    f, df, _, model = plain
    with pytest.raises(PyfuncInputError, match=r"missing column\(s\) \['y'\]; send a long frame with columns "
                                               r"\['unique_id', 'ds', 'y'\]") as err:
        model.predict(df.drop(columns="y"))
    assert isinstance(err.value, MlflowException)  # served as a 400 with this message
    with pytest.raises(PyfuncInputError, match=f"horizon={H + 1} is longer than the {H} steps"):
        model.predict(df, params={"horizon": H + 1})
    short = df.groupby("unique_id").tail(L - 1)
    with pytest.raises(PyfuncInputError, match="fewer than lookback = 24 rows"):
        model.predict(short)
    empty = pd.concat([df, pd.DataFrame({"unique_id": ["new"], "ds": [df["ds"].max()], "y": [np.nan]})])
    with pytest.raises(PyfuncInputError, match=r"series \['new'\] have no observed 'y' value"):
        model.predict(empty)
    with pytest.raises(PyfuncInputError, match="quantiles"):  # the library's range check, as a 400
        model.predict(df, params={"quantiles": [1.5]})
    assert "\n" not in str(err.value)


def test_intervals_and_quantiles_as_the_panel_estimator_gives_them(plain):
    """level / quantiles reach the panel predict (conformal for this MSE model): its columns and values;
    what it rejects is a 400 with its message."""
    f, df, _, model = plain
    for params in ({"level": [80]}, {"quantiles": [0.1, 0.9]}, {"level": [80], "quantiles": [0.5]}):
        want = f.panel_.predict(df, h=3, **params)
        got = model.predict(df, params={"horizon": 3, **params})
        assert list(got.columns) == list(want.columns) and len(got.columns) > 3, params
        assert got[KEY].astype(str).values.tolist() == want[KEY].astype(str).values.tolist()
        np.testing.assert_allclose(got.iloc[:, 2:].to_numpy(float), want.iloc[:, 2:].to_numpy(float),
                                   rtol=1e-6)
    assert {"y_hat-lo-80", "y_hat-hi-80"} <= set(model.predict(df, params={"level": [80]}).columns)
    with pytest.raises(TsmixError) as lib:
        f.panel_.predict(df, level=[99])  # more validation windows than this tiny model has
    with pytest.raises(PyfuncInputError, match=re.escape(str(lib.value))):
        model.predict(df, params={"level": [99]})


def test_future_covariates_travel_as_empty_target_rows(covariates):
    f, df, static, model_dir, model = covariates
    assert model.model_config["panel"]["futr_exog"] == ["promo"]
    assert set(model.model_config["panel"]["static"]) == {"region", "size"}
    history, future = split_tail(df, H)
    futr_df = future[["unique_id", "ds", "promo"]]
    want = f.predict(history, futr_df=futr_df, static_df=static, h=3)
    request = pd.concat([history, future.assign(y=np.nan, load=np.nan)])  # statics carried from training
    assert_same(model.predict(request, params={"horizon": 3}), want)
    # REST: text dates, nulls for the unknown values
    rest = request.assign(ds=request["ds"].astype(str)).astype(object)
    rest = rest.where(rest.notna(), None)
    assert_same(model.predict(rest, params={"horizon": 3}), want)
    assert_same(model.predict(rest.assign(y=rest["y"].where(rest["y"].notna(), "")), params={"horizon": 3}),
                want)  # "" for the empty target
    # the logged example is such a request: lookback rows, then horizon future rows per series
    example = mlflow.models.Model.load(model_dir).load_input_example(model_dir)
    assert example.groupby("unique_id").size().tolist() == [L + H] * 3
    assert example.groupby("unique_id")["y"].apply(lambda y: y.tail(H).isna().all()).all()
    assert_same(model.predict(example), f.predict(history, futr_df=futr_df, static_df=static))
    # an example from the data's end and a given futr_df: history rows, then futr_df's rows
    given = panel_example(f, history, PanelSpec.of(f), futr_df=futr_df)
    assert given.groupby("unique_id").size().tolist() == [L + H] * 3
    assert_same(model.predict(given, params={"horizon": 3}), want)
    with pytest.raises(PyfuncInputError, match=r"future covariates \['promo'\]: after each series' "
                                               r"history add its next 6 rows with an empty 'y'"):
        model.predict(history)
    with pytest.raises(PyfuncInputError, match=r"does not cover the horizon"):  # the whole trained horizon
        model.predict(pd.concat([history, future.assign(y=np.nan).groupby("unique_id").head(3)]),
                      params={"horizon": 3})
    with pytest.raises(PyfuncInputError, match=r"missing column\(s\) \['promo'\]"):
        model.predict(request.drop(columns="promo"))


def test_static_attributes_as_columns(covariates):
    f, df, static, _, model = covariates
    history, future = split_tail(df, H)
    request = pd.concat([history, future.assign(y=np.nan, load=np.nan)])
    futr_df = future[["unique_id", "ds", "promo"]]
    other = static.assign(size=static["size"] * 3.0)  # sent attributes win over the training ones
    want = f.predict(history, futr_df=futr_df, static_df=other, h=2)
    assert not np.allclose(want["y_hat"], f.predict(history, futr_df=futr_df, static_df=static, h=2)["y_hat"])
    assert_same(model.predict(request.merge(other, on="unique_id"), params={"horizon": 2}), want)
    with pytest.raises(PyfuncInputError, match=r"static column\(s\) \['size'\] but not \['region'\]"):
        model.predict(request.merge(static[["unique_id", "size"]], on="unique_id"))
    renamed = request.assign(unique_id=request["unique_id"].str.replace("s00000", "fresh"))
    with pytest.raises(PyfuncInputError, match=r"series \['fresh'\] were not in training.*add columns"):
        model.predict(renamed)


@pytest.mark.slow
def test_rest_serves_long_json_and_csv(covariates, tmp_path, svc):
    """Over REST: text dates, null / empty targets on the future rows, a 400 for a bad request."""
    f, df, static, model_dir, model = covariates
    history, future = split_tail(df, H)
    request = pd.concat([history.groupby("unique_id").tail(L), future.assign(y=np.nan, load=np.nan)])
    want = model.predict(request, params={"horizon": 4})
    split = json.loads(request.to_json(orient="split", date_format="iso", index=False))  # NaN -> null
    js = "application/json"
    with svc.serve(model_dir, tmp_path) as post:
        answers = {
            "json": post(json.dumps({"dataframe_split": split, "params": {"horizon": 4}}), js),
            "csv": post(request.to_csv(index=False), "text/csv"),  # empty cells
            "no promo": post(json.dumps({"dataframe_split": json.loads(request.drop(columns="promo").to_json(
                orient="split", date_format="iso", index=False))}), js),
        }
    for key, rows in (("json", 4), ("csv", H)):
        status, body = answers[key]
        assert status == 200, (key, body[-2000:])
        got = pd.DataFrame(json.loads(body)["predictions"])
        first = want if rows == 4 else model.predict(request)
        assert list(got.columns) == ["unique_id", "ds", "y_hat"], key
        assert pd.to_datetime(got["ds"]).tolist() == first["ds"].tolist(), key
        np.testing.assert_allclose(got["y_hat"], first["y_hat"], rtol=1e-6, err_msg=key)
    status, body = answers["no promo"]
    assert status == 400 and "missing column(s) ['promo']" in json.loads(body)["message"]


@pytest.mark.slow
def test_panel_model_loads_where_tsmix_is_not_importable(covariates, tmp_path, svc):
    """The bundled package serves panels too: the wide test's isolated loader (every tsmix import from
    outside the model directory fails) predicts the covariate model's logged example."""
    f, df, static, model_dir, model = covariates
    source = Path(__file__).with_name("test_pyfunc.py")
    spec = importlib.util.spec_from_file_location("wide_pyfunc_tests", source)
    wide = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wide)  # for its ISOLATED_LOAD script: predicts with params={"horizon": 5}
    example = mlflow.models.Model.load(model_dir).load_input_example(model_dir)
    example.to_parquet(tmp_path / "example.parquet")
    env = svc.child_env()
    env.pop("PYTHONPATH", None)
    args = [str(model_dir), str(tmp_path / "example.parquet"), str(tmp_path / "out.parquet")]
    proc = subprocess.run([sys.executable, "-c", wide.ISOLATED_LOAD, *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["modules"] > 10 and report["outside"] == []
    assert_same(pd.read_parquet(tmp_path / "out.parquet"), model.predict(example, params={"horizon": 5}))
