"""Panel fits resume from the engine's checkpoint: an interrupted fit (a callback raising after epoch k)
resumed ends with exactly the weights, history and metrics of an uninterrupted one (bitwise on CPU,
one thread); production fits keep selection/ and refit/ folders; another config or panel is refused;
``tsmix fit --checkpoint-dir/--resume`` on a long CSV."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

from tsmix.datasets.panel_synthetic import synthetic_panel
from tsmix.engine import checkpoint as ckpt
from tsmix.errors import TsmixError
from tsmix.forecasting import Forecaster
from tsmix.forecasting.panel_fit import PanelForecaster

L, H = 24, 6
# type1 halves the lr every epoch: a resume that lost the scheduler state would diverge
HP = dict(lookback=L, horizon=H, epochs=4, batch_size=32, lr=5e-3, lr_schedule="type1", patience=10,
          progress=False, seed=3, threads=1, hist_exog=["load"], futr_exog=["promo"])
TIMING = ("train_seconds", "seconds_per_epoch")  # wall time: the only numbers a resume may change


class Stop(Exception):
    """The interruption: raised by a callback (after the previous epoch's checkpoint was written)."""


def stop_at(epoch: int, seen: list[int]) -> Any:
    def cb(e: int, logs: dict) -> None:
        seen.append(e)
        if e == epoch:
            raise Stop

    return cb


def record(seen: list[int]) -> Any:
    return lambda e, logs: seen.append(e)


def summary(f: PanelForecaster) -> dict[str, Any]:
    """Everything a resume must reproduce: metrics (less timings), history and every weight bit."""
    m = {k: v for k, v in f.metrics_.items() if k not in TIMING}
    hist = [(r["epoch"], r["train_loss"], r.get("val_loss"), r["lr"]) for r in f.history]
    return {"metrics": json.loads(json.dumps(m)), "history": hist}


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def epoch_of(folder: Path) -> tuple[int, bool]:
    _, meta = ckpt.read(folder / ckpt.FILENAME)
    return meta["loop"]["epoch"], meta["loop"]["finished"]


@pytest.fixture(scope="module")
def panel() -> tuple[pd.DataFrame, pd.DataFrame]:
    return synthetic_panel([160, 120, 200], [0, 30, 10], seed=1)


@pytest.fixture(autouse=True)
def one_thread():
    """Bitwise CPU results need the same thread count in every fit (restored afterwards)."""
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_interrupted_panel_fit_resumes_bitwise(panel, tmp_path):
    df, static = panel
    ref = PanelForecaster("dlinear", **HP).fit(df, static)  # no checkpoints: they must not change a number
    folder = tmp_path / "ck"
    f = PanelForecaster("dlinear", **HP)
    seen: list[int] = []
    with pytest.raises(Stop):
        f.fit(df, static, callbacks=[stop_at(3, seen)], checkpoint_dir=folder)
    assert seen == [1, 2, 3] and not f.is_fitted  # a failed fit leaves the estimator as it was
    assert epoch_of(folder) == (2, False)  # epochs 1-2 checkpointed, epoch 3 lost with the interruption

    seen.clear()
    f.fit(df, static, callbacks=[record(seen)], checkpoint_dir=folder, resume=True)
    assert seen == [3, 4]  # it continued, not restarted
    assert summary(f) == summary(ref) and same_weights(f.model_, ref.model_)
    pd.testing.assert_frame_equal(f.predict(futr_df=_future(df)), ref.predict(futr_df=_future(df)))
    assert epoch_of(folder) == (4, True)

    seen.clear()  # resuming a finished fit trains nothing and gives the same model again
    g = PanelForecaster("dlinear", **HP).fit(df, static, callbacks=[record(seen)], checkpoint_dir=folder,
                                             resume=True)
    assert seen == [] and summary(g) == summary(ref) and same_weights(g.model_, ref.model_)


def test_production_panel_fit_resumes_in_its_refit_folder(panel, tmp_path):
    df, static = panel
    hp = {**HP, "production": True}
    ref = PanelForecaster("dlinear", **hp).fit(df, static)
    n_sel, n_refit = 4, ref.metrics_["epochs"]
    assert n_refit >= 2, "the refit must last 2+ epochs to be interrupted inside it"
    folder = tmp_path / "ck"
    seen: list[int] = []
    with pytest.raises(Stop):  # call n_sel + 2: the refit's second epoch
        f = PanelForecaster("dlinear", **hp)
        f.fit(df, static, callbacks=[_stop_at_call(n_sel + 2, seen)], checkpoint_dir=folder)
    assert epoch_of(folder / "selection") == (n_sel, True) and epoch_of(folder / "refit") == (1, False)
    assert not (folder / ckpt.FILENAME).exists()  # the two fits never share a checkpoint

    seen.clear()
    f.fit(df, static, callbacks=[record(seen)], checkpoint_dir=folder, resume=True)
    assert seen == list(range(2, n_refit + 1))  # the selection fit was restored, the refit continued
    assert summary(f) == summary(ref) and same_weights(f.model_, ref.model_)
    assert f.metrics_["production"] and f.metrics_["mse"] is None


def _stop_at_call(n: int, seen: list[int]) -> Any:
    def cb(e: int, logs: dict) -> None:
        seen.append(e)
        if len(seen) == n:
            raise Stop

    return cb


def _future(df: pd.DataFrame) -> pd.DataFrame:
    last = df.groupby("unique_id")["ds"].max()
    return pd.concat([pd.DataFrame({"unique_id": s, "ds": pd.date_range(t, periods=H + 1, freq="h")[1:],
                                    "promo": 1.0}) for s, t in last.items()], ignore_index=True)


def test_checkpoint_of_another_config_or_panel_is_refused(panel, tmp_path):
    df, static = panel
    folder = tmp_path / "ck"
    hp = {**HP, "epochs": 1}
    PanelForecaster("dlinear", **hp).fit(df, static, checkpoint_dir=folder)
    f = PanelForecaster("dlinear", **{**hp, "epochs": 2})
    with pytest.raises(TsmixError, match=r"belongs to another run \(.*epochs: 1 -> 2") as exc:
        f.fit(df, static, checkpoint_dir=folder, resume=True)
    assert "\n" not in str(exc.value) and not f.is_fitted
    other, other_static = synthetic_panel([160, 120, 200], [0, 30, 10], seed=2)  # same shape, other values
    with pytest.raises(TsmixError, match=r"data\.sha256"):
        PanelForecaster("dlinear", **hp).fit(other, other_static, checkpoint_dir=folder, resume=True)
    with pytest.raises(TsmixError, match=r"another run \(.*train\.windows"):  # another split of the rows
        PanelForecaster("dlinear", **hp, val_size=12).fit(df, static, checkpoint_dir=folder, resume=True)
    with pytest.raises(TsmixError, match="resume=True needs a checkpoint folder"):
        PanelForecaster("dlinear", **hp).fit(df, static, resume=True)
    # without resume a fresh fit overwrites the folder; the Forecaster's panel branch passes both through
    Forecaster("dlinear", **{**hp, "epochs": 2}).fit(df, static_df=static, checkpoint_dir=folder)
    assert epoch_of(folder) == (2, True)
    g = Forecaster("dlinear", **{**hp, "epochs": 2}).fit(df, static_df=static, checkpoint_dir=folder,
                                                         resume=True)
    assert g.panel_ is not None and g.metrics_["epochs"] == 2


def test_cli_fit_resumes_a_panel_fit(panel, tmp_path, capsys):
    from tsmix.cli import main

    df, _ = panel
    path = tmp_path / "long.csv"
    df.to_csv(path, index=False)
    flags = ["fit", "--dataset", str(path), "--model", "dlinear", "--lookback", str(L), "--horizon", str(H),
             "--epochs", "3", "--seed", "3", "--no-progress"]
    assert main([*flags, "--out", str(tmp_path / "ref")]) == 0
    folder = tmp_path / "ck"
    # interrupt the same fit (the flags' config) in process, then let the CLI finish it
    f = Forecaster("dlinear", lookback=L, horizon=H, epochs=3, seed=3, progress=False)
    with pytest.raises(Stop):
        f.fit(str(path), callbacks=[stop_at(2, [])], checkpoint_dir=folder)
    assert epoch_of(folder) == (1, False)
    capsys.readouterr()
    assert main([*flags, "--out", str(tmp_path / "run"), "--checkpoint-dir", str(folder), "--resume"]) == 0
    assert "3 series" in capsys.readouterr().out and epoch_of(folder) == (3, True)
    ref, run = PanelForecaster.load(tmp_path / "ref"), PanelForecaster.load(tmp_path / "run")
    assert same_weights(run.model_, ref.model_)
    assert [r["train_loss"] for r in run.history] == [r["train_loss"] for r in ref.history]
    # another config on that checkpoint: one line, exit 2, no run directory
    assert main([*flags[:-3], "--seed", "4", "--no-progress", "--out", str(tmp_path / "bad"),
                 "--checkpoint-dir", str(folder), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "belongs to another run" in err and "seed: 3 -> 4" in err and not (tmp_path / "bad").exists()
