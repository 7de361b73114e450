"""Issue #16 leftovers: zoned forecasts, --fill end to end, runs that survive a damaged metrics.json,
orphaned temporary folders, models without a mixer, the final train+val refit, unscored test."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from tsmix.cli import main
from tsmix.datasets import prepare
from tsmix.errors import TsmixError
from tsmix.forecasting import Forecaster
from tsmix.forecasting.rundir_files import WRITER, remove_orphans

TINY = dict(model="dlinear", lookback=48, horizon=12, epochs=2, progress=False, seed=3)


@pytest.fixture(scope="module")
def frame(data_dir) -> pd.DataFrame:
    return pd.read_csv(data_dir / "ETT-small" / "ETTh1.csv", nrows=400, parse_dates=["date"])


@pytest.fixture(scope="module")
def fitted(frame) -> Forecaster:
    return Forecaster(**TINY).fit(frame)


def test_zoned_history_forecasts_in_its_zone(frame, tmp_path):
    zoned = frame.assign(date=frame["date"].dt.tz_localize("+02:00"))
    f = Forecaster(**TINY).fit(zoned)
    pred = f.predict()
    last = zoned["date"].iloc[-1]
    assert pred["date"].iloc[0] == last + pd.Timedelta(hours=1) and str(pred["date"].dt.tz) == "UTC+02:00"
    g = Forecaster.load(f.save(tmp_path / "run"))  # the zone survives the run directory
    pd.testing.assert_frame_equal(g.predict(), pred)
    path = tmp_path / "h.csv"
    frame.iloc[-60:].assign(date=frame["date"].iloc[-60:].dt.strftime("%Y-%m-%dT%H:%M+02:00")).to_csv(
        path, index=False)
    first = g.predict(path)["date"].iloc[0]
    assert first == pd.Timestamp(last) + pd.Timedelta(hours=1)  # 2016-07-26T00:00+02:00 after 23:00+02:00
    assert str(first.tz) == "UTC+02:00"
    # naive data stays naive
    assert Forecaster.load(Forecaster(**TINY).fit(frame).save(tmp_path / "n"))._fitted.tz is None


def test_fill_through_fit_and_predict(frame, tmp_path, capsys):
    holes = frame.copy()
    holes.loc[[10, 200, 390], "OT"] = np.nan
    data = tmp_path / "holes.csv"
    holes.to_csv(data, index=False)
    with pytest.raises(TsmixError, match="missing/NaN"):
        Forecaster(**TINY).fit(data)
    f = Forecaster(**TINY, fill="ffill").fit(data)
    assert np.isfinite(f.predict(data).iloc[:, 1:].to_numpy()).all()
    run = tmp_path / "run"
    argv = ["fit", "--dataset", str(data), "--model", "dlinear", "--lookback", "48", "--horizon", "12",
            "--epochs", "1", "--no-progress", "--fill", "interpolate", "--out", str(run)]
    assert main(argv) == 0
    assert json.loads((run / "config.json").read_text())["config"]["fill"] == "interpolate"
    out = tmp_path / "p.csv"
    assert main(["predict", "--run", str(run), "--input", str(data), "--output", str(out)]) == 0  # as fitted
    strict = ["predict", "--run", str(run), "--input", str(data), "--output", str(tmp_path / "q.csv")]
    assert main([*strict, "--fill", "zero"]) == 0
    assert main(["evaluate", "--run", str(run), "--fill", "zero"]) == 0
    capsys.readouterr()


def test_predict_needs_no_metrics_json(fitted, tmp_path):
    run = fitted.save(tmp_path / "run")
    (run / "metrics.json").write_text("{garbage")
    g = Forecaster.load(run)
    pd.testing.assert_frame_equal(g.predict(), fitted.predict())
    with pytest.raises(TsmixError, match="metrics.json is damaged"):
        _ = g.metrics_
    assert main(["predict", "--run", str(run), "--output", str(tmp_path / "p.csv")]) == 0


def test_orphaned_temporary_folders_are_cleared(fitted, tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    pid = int(dead.stdout)
    orphan = tmp_path / ".run.tmp-killed1"
    orphan.mkdir()
    (orphan / WRITER).write_text(json.dumps({"pid": pid, "host": os.uname().nodename}))
    live = tmp_path / ".other.tmp-live123"
    live.mkdir()
    (live / WRITER).write_text(json.dumps({"pid": os.getpid(), "host": os.uname().nodename}))
    old = tmp_path / ".run.old-abcdef12"
    old.mkdir()
    os.utime(old, (0, 0))  # a replaced run whose removal was killed, long ago
    keep = tmp_path / ".config"  # not ours: never touched
    keep.mkdir()
    with pytest.raises(TsmixError, match="interrupted save"):
        Forecaster.load(orphan)
    fitted.save(tmp_path / "run")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".config", ".other.tmp-live123", "run"]
    assert remove_orphans(tmp_path) == []


def test_model_without_mixer_names_none(frame, tmp_path, monkeypatch, capsys):
    assert "mixer" not in repr(Forecaster("dlinear"))
    assert "mixer='softmax'" in repr(Forecaster("patchtst"))
    monkeypatch.chdir(tmp_path)
    frame.to_csv("s.csv", index=False)
    assert main(["fit", "--dataset", "s.csv", "--model", "dlinear", "--lookback", "48", "--horizon", "12",
                 "--epochs", "1", "--no-progress"]) == 0
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["s-dlinear-L48-H12-s2021"]
    capsys.readouterr()


def test_out_is_checked_before_training(frame, tmp_path):
    (tmp_path / "o.txt").write_text("x")
    calls = []
    with pytest.raises(TsmixError, match="exists and is a file"):
        Forecaster(**TINY).fit(frame, out=tmp_path / "o.txt", callbacks=(lambda e, logs: calls.append(e),))
    assert calls == []


def test_final_refit_on_train_and_val(frame):
    p = prepare(frame, 48, 12)
    f = Forecaster(**{**TINY, "epochs": 3, "patience": 1, "lr": 0.5}, train_on="train+val").fit(frame)
    assert len(f.history) == 3 and all("val_loss" not in h for h in f.history)  # no early stopping
    m = f.metrics_
    assert m["train_windows"] == p.borders["val"][1] - 48 - 12 + 1 > len(p.train) + len(p.val)
    assert math.isnan(m["val_mse"]) and m["best_epoch"] == 3 and m["train_on"] == "train+val"
    g = Forecaster(**TINY).fit(frame, evaluate_test=False)
    assert not {"mse", "mae", "test_windows", "per_channel"} & set(g.metrics_)
    assert g.metrics_["val_mse"] == Forecaster(**TINY).fit(frame).metrics_["val_mse"]  # same fit otherwise
    with pytest.raises(TsmixError, match="train_on must be one of"):
        Forecaster(train_on="everything")
