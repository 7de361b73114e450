"""Panels: long == wide on ETT, ragged splits, covariates, prediction inputs, and every bad input."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import polars as pl
import pytest
import torch

from tsmix.datasets import load, prepare, split_borders
from tsmix.datasets.panel import Panel
from tsmix.datasets.panel_prepare import PanelSchema, prepare_panel
from tsmix.datasets.panel_split import PanelSplit
from tsmix.datasets.panel_synthetic import synthetic_panel
from tsmix.datasets.timefeatures import time_features
from tsmix.errors import TsmixError

COV = {"hist_exog": ["load"], "futr_exog": ["promo"]}


def one_line_error(match: str):
    """pytest.raises for a TsmixError whose message is one line containing ``match``."""

    class _Check:
        def __enter__(self):
            self.ctx = pytest.raises(TsmixError, match=match)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *exc):
            out = self.ctx.__exit__(*exc)
            assert "\n" not in str(self.info.value)
            return out

    return _Check()


# --- ETT: the long layout gives exactly the wide path's windows -------------------------------------

@pytest.mark.parametrize("L, H", [(336, 96), (24, 48)])
def test_ett_long_equals_wide(data_dir, L, H):
    wide = prepare("ETTh1", L, H, "M", data_dir=data_dir)
    s = load("ETTh1", data_dir=data_dir)
    long = s.to_pandas().melt(id_vars="date", var_name="unique_id", value_name="y")
    long = long.rename(columns={"date": "ds"})
    prep = prepare_panel(Panel.from_long(long.sample(frac=1.0, random_state=0)), L, H,
                         PanelSplit(borders=split_borders(s.n_rows, L, "etth")), calendar=False)
    assert prep.panel.ids == tuple(sorted(s.columns))
    for k in ("train", "val", "test"):
        ws, pw = wide.split(k), prep.split(k)
        assert len(pw) == len(ws) * s.n_channels  # same windows per series as the wide path
        xw, yw = ws.gather(torch.arange(len(ws)))  # (n, L, C), (n, H, C)
        b = pw.gather(torch.arange(len(pw)))
        for i, sid in enumerate(prep.panel.ids):
            c = s.columns.index(sid)
            part = slice(i * len(ws), (i + 1) * len(ws))
            assert torch.equal(b.x[part, :, 0], xw[..., c]) and torch.equal(b.y[part, :, 0], yw[..., c])
            assert (b.series[part] == i).all()
    for i, sid in enumerate(prep.panel.ids):  # the same scaler statistics, bit for bit
        c = s.columns.index(sid)
        assert prep.schema.y_mean[i] == wide.scaler.mean_[c]
        assert prep.schema.y_scale[i] == wide.scaler.scale_[c]
    via_wide = prepare_panel(Panel.from_wide("ETTh1", data_dir=data_dir), L, H,
                             PanelSplit(borders=split_borders(s.n_rows, L, "etth")), calendar=False)
    assert torch.equal(via_wide.tensors.y, prep.tensors.y) and via_wide.panel.ids == prep.panel.ids


# --- ragged panels and splits ----------------------------------------------------------------------

def test_ragged_panel_splits_by_sizes_and_by_cutoffs():
    df, _ = synthetic_panel([120, 80, 200], [0, 30, 10])
    panel = Panel.from_long(df, **COV)
    assert panel.n_series == 3 and list(panel.lengths) == [120, 80, 200] and panel.freq == "h"
    prep = prepare_panel(panel, 12, 6, PanelSplit(val_size=10, test_size=8))
    n = np.array([120, 80, 200])
    assert prep.borders.tolist() == [[0, m - 18, m - 18 - 12, m - 8, m - 8 - 12, m] for m in n]
    assert len(prep.train) == int((n - 18 - 18 + 1).sum())
    assert len(prep.val) == 3 * (10 - 6 + 1) and len(prep.test) == 3 * (8 - 6 + 1)
    # A cutoff is the last stamp of the earlier split; rows after it are the next split's targets.
    ends = df.groupby("unique_id")["ds"].max()
    vc, tc = pd.Timestamp("2020-01-04 00:00"), pd.Timestamp("2020-01-04 18:00")
    by_time = prepare_panel(panel, 12, 6, PanelSplit(val_cutoff=vc, test_cutoff=tc))
    for i, sid in enumerate(by_time.panel.ids):
        g = df[df.unique_id == sid].sort_values("ds")["ds"].to_numpy()
        v0, t0 = int((g <= vc.to_datetime64()).sum()), int((g <= tc.to_datetime64()).sum())
        assert by_time.borders[i].tolist() == [0, v0, v0 - 12, t0, t0 - 12, len(g)]
    assert by_time.panel.n_series == 3 and (ends > tc).all()


def test_too_short_series_error_or_drop_with_warning():
    df, _ = synthetic_panel([100, 27, 90, 25])
    with one_line_error(r"2 series too short .*\['s00001', 's00003'\].*drop_short=True"):
        prepare_panel(Panel.from_long(df), 16, 4, PanelSplit(val_size=4, test_size=4))
    with pytest.warns(UserWarning, match=r"dropped 2 series .*\['s00001', 's00003'\]"):
        prep = prepare_panel(Panel.from_long(df), 16, 4, PanelSplit(val_size=4, test_size=4), drop_short=True)
    assert prep.panel.ids == ("s00000", "s00002") and list(prep.panel.lengths) == [100, 90]
    assert set(prep.train.index()[0].tolist()) == {0, 1}
    with one_line_error("every series is too short"):
        prepare_panel(Panel.from_long(df), 200, 4, PanelSplit(val_size=4, test_size=4), drop_short=True)


def test_gaps_filled_per_series_and_calendar_frequencies():
    df, _ = synthetic_panel([40, 50])
    holed = df.drop(index=[5, 6, 60]).reset_index(drop=True)
    with one_line_error(r"series 's00000'.*missing timestamp"):
        Panel.from_long(holed)
    filled = Panel.from_long(holed, fill="interpolate")
    assert list(filled.lengths) == [40, 50]
    assert np.isclose(filled.target[5], df.y[4] + (df.y[7] - df.y[4]) / 3)
    months = pd.DataFrame({"unique_id": ["a"] * 30 + ["b"] * 20,
                           "ds": list(pd.date_range("2010-01-01", periods=30, freq="MS"))
                           + list(pd.date_range("2012-05-01", periods=20, freq="MS")), "y": np.arange(50.0)})
    p = Panel.from_long(months)
    assert p.freq == "MS" and p.step_ns is None
    fut = p.future_stamps(p.timestamps[p.offsets[1:] - 1], 3)
    assert [str(pd.Timestamp(t).date()) for t in fut[0]] == ["2012-07-01", "2012-08-01", "2012-09-01"]


def test_timezone_dates_keep_their_zone():
    df, _ = synthetic_panel([60, 70])
    df["ds"] = df["ds"].dt.tz_localize("Europe/Berlin", nonexistent="shift_forward", ambiguous="NaT")
    p = Panel.from_long(df)
    assert p.tz == "Europe/Berlin"
    back = p.to_pandas()
    assert str(back["ds"].dt.tz) == "Europe/Berlin" and back["ds"].iloc[0] == df["ds"].iloc[0]


# --- covariates --------------------------------------------------------------------------------------

def test_covariate_slices_and_static_codes():
    df, static = synthetic_panel([60, 45, 80], [0, 5, 11], seed=3)
    L, H = 8, 4
    panel = Panel.from_long(df, **COV, static_df=static)
    prep = prepare_panel(panel, L, H, PanelSplit(val_size=6, test_size=5))
    sch = prep.schema
    assert sch.static.categorical == ("region",) and sch.static.numeric == ("size",)
    b = prep.test.gather(torch.arange(len(prep.test)))
    for j in range(len(b.x)):
        s = int(b.series[j])
        g = df[df.unique_id == prep.panel.ids[s]].reset_index(drop=True)
        origin = np.datetime64(int(b.origin[j]), "ns")
        a = int(np.searchsorted(g.ds.to_numpy(), origin)) - L + 1  # the window's first row in its series
        load_ = ((g.load.to_numpy(np.float32)[a : a + L] - sch.hist_mean[s, 0]) / sch.hist_scale[s, 0])
        np.testing.assert_allclose(b.hist[j, :, 0].numpy(), load_, rtol=1e-6, atol=1e-6)  # lookback only
        promo = (g.promo.to_numpy()[a : a + L + H] - sch.futr_mean[s, 0]) / sch.futr_scale[s, 0]
        np.testing.assert_allclose(b.futr[j, :, 0].numpy(), promo, rtol=1e-6, atol=1e-6)  # lookback + horizon
        cal = time_features(g.ds.to_numpy()[a : a + L + H])[0]
        np.testing.assert_array_equal(b.futr[j, :, 1:].numpy(), cal)
        region = static.set_index("unique_id").loc[prep.panel.ids[s], "region"]
        assert sch.static.vocab[0][int(b.static_cat[j, 0])] == region
    sizes = static.set_index("unique_id").loc[list(prep.panel.ids), "size"].to_numpy()
    np.testing.assert_allclose(prep.tensors.static[:, 0].numpy(), (sizes - sizes.mean()) / sizes.std(),
                               rtol=1e-5)


def test_predict_input_history_future_covariates_and_round_trip():
    df, static = synthetic_panel([60, 45], [0, 5], seed=1)
    L, H = 8, 4
    panel = Panel.from_long(df, **COV, static_df=static)
    prep = prepare_panel(panel, L, H, PanelSplit(val_size=6, test_size=5))
    last = df.groupby("unique_id")["ds"].max()
    futr = pd.DataFrame([{"unique_id": u, "ds": t + pd.Timedelta(hours=k), "promo": float(k % 2)}
                         for u, t in last.items() for k in range(1, H + 1)])
    inp = prep.predict_input(futr_df=futr)
    assert inp.x.shape == (2, L, 1) and inp.hist.shape == (2, L, 1) and inp.futr.shape == (2, L + H, 5)
    expected = [last["s00000"] + pd.Timedelta(hours=k) for k in range(1, H + 1)]
    assert [pd.Timestamp(t) for t in inp.future[0]] == expected
    sch = prep.schema
    np.testing.assert_allclose(inp.futr[0, L:, 0].numpy(), (np.array([1, 0, 1, 0]) - sch.futr_mean[0, 0])
                               / sch.futr_scale[0, 0], rtol=1e-6)
    tail = df[df.unique_id == "s00001"].y.to_numpy()[-L:]
    np.testing.assert_allclose(inp.x[1, :, 0].numpy() * sch.y_scale[1] + sch.y_mean[1], tail, rtol=1e-5)
    out = inp.to_frame(inp.x[:, -H:, 0])  # scaled -> original units
    assert list(out.columns) == ["unique_id", "ds", "y_hat"] and len(out) == 2 * H
    np.testing.assert_allclose(out.y_hat.to_numpy()[H:], tail[-H:], rtol=1e-5)
    # A saved schema gives the same inputs from a history frame.
    loaded = PanelSchema.from_dict(json.loads(json.dumps(sch.to_dict())))
    from tsmix.datasets.panel_predict import build_predict_input

    again = build_predict_input(loaded, df, futr, static_df=static)
    assert torch.equal(again.x, inp.x) and torch.equal(again.futr, inp.futr)
    assert torch.equal(again.static_cat, inp.static_cat)


# --- bad inputs: one line each ------------------------------------------------------------------------

def _small():
    df, static = synthetic_panel([40, 50], seed=2)
    return df, static


@pytest.mark.parametrize("case, match", [
    ("dup", r"2 duplicated \(id, timestamp\) row\(s\), e\.g\. \('s00000', 2020-01-01 03:00:00\)"),
    ("mixed", r"mixed frequencies \(h: \['s00000'\]; 2h: \['s00001'\]\)"),
    ("nan", r"missing/NaN/inf values in series \['s00001'\].*fill="),
    ("columns", r"missing columns \['nope'\]"),
    ("null_id", r"id column 'unique_id' has 1 missing"),
    ("text", r"non-numeric columns 'y'"),
])
def test_bad_long_frames(case, match):
    df, _ = _small()
    kw = {}
    if case == "dup":
        df = pd.concat([df, df.iloc[[3, 45]]])
    elif case == "mixed":
        b = df.unique_id == "s00001"
        df.loc[b, "ds"] = pd.date_range("2020-01-01", periods=int(b.sum()), freq="2h")
    elif case == "nan":
        df.loc[50, "y"] = np.nan
    elif case == "columns":
        kw = {"hist_exog": ["nope"]}
    elif case == "null_id":
        df["unique_id"] = df["unique_id"].astype(object)
        df.loc[7, "unique_id"] = None
    elif case == "text":
        df["y"] = df["y"].astype(str)
        df.loc[3, "y"] = "abc"
    with one_line_error(match):
        Panel.from_long(df, **kw)


def test_bad_static_frames_and_categories():
    df, static = _small()
    with one_line_error(r"static_df has no row for series \['s00001'\]"):
        Panel.from_long(df, static_df=static.iloc[:1])
    with one_line_error(r"one row per series"):
        Panel.from_long(df, static_df=pd.concat([static, static.iloc[:1]]))
    prep = prepare_panel(Panel.from_long(df, static_df=static), 8, 4, PanelSplit(val_size=4, test_size=4))
    other = static.assign(region="atlantis")
    with one_line_error(r"static column 'region' of series 's00000' has category 'atlantis' unseen"):
        prep.predict_input(df, static_df=other)
    with one_line_error(r"trained with static attributes"):
        prep.predict_input(df.copy())


def test_bad_splits():
    df, _ = _small()
    p = Panel.from_long(df)
    for split, match in [(PanelSplit(), "split the panel one way"),
                         (PanelSplit(val_size=4, test_size=4, val_cutoff="2020-01-01"), "one way"),
                         (PanelSplit(val_size=2, test_size=4), r"val_size must be an integer >= horizon"),
                         (PanelSplit(val_cutoff="2020-01-02", test_cutoff="2020-01-01"), "must come before"),
                         (PanelSplit(borders={"train": (0, 30), "val": (20, 35), "test": (25, 45)}),
                          r"of series 's00000' fall outside its 40 rows"),
                         (PanelSplit(borders={"s00000": {"train": (0, 20), "val": (0, 30), "test": (0, 40)}}),
                          r"no entry for series \['s00001'\]")]:
        with one_line_error(match):
            prepare_panel(p, 8, 4, split)
    with one_line_error("lookback must be a positive integer"):
        prepare_panel(p, 0, 4, PanelSplit(val_size=4, test_size=4))
    with one_line_error("prepare_panel takes a Panel"):
        prepare_panel(df, 8, 4, PanelSplit(val_size=4, test_size=4))


def test_bad_prediction_inputs():
    df, _ = synthetic_panel([40, 50], seed=2)
    L, H = 8, 3
    prep = prepare_panel(Panel.from_long(df, **COV), L, H, PanelSplit(val_size=4, test_size=4))
    last = df.groupby("unique_id")["ds"].max()
    futr = pd.DataFrame([{"unique_id": u, "ds": t + pd.Timedelta(hours=k), "promo": 0.0}
                         for u, t in last.items() for k in range(1, H + 1)])
    with one_line_error(r"uses future covariates \['promo'\]: pass futr_df"):
        prep.predict_input()
    short = futr.drop(index=[4])  # s00001's 2nd future step
    with one_line_error(r"futr_df does not cover the horizon of 1 series: e\.g\. series 's00001' needs "
                        r"columns \['promo'\] at \['2020-01-03 03:00:00'\]"):
        prep.predict_input(futr_df=short)
    with one_line_error(r"futr_df is missing columns \['promo'\]"):
        prep.predict_input(futr_df=futr.drop(columns="promo"))
    with one_line_error(r"fewer than lookback = 8 rows of history: \['s00000'\]"):
        prep.predict_input(df.drop(index=range(35)), futr_df=futr)
    hourly2 = df.iloc[::2].copy()
    with one_line_error(r"history has frequency 2h but the model was trained on h"):
        prep.predict_input(hourly2, futr_df=futr)
    new = df.assign(unique_id=df.unique_id + "-new")  # unseen series: scaled on their own history
    inp = prep.predict_input(new, futr_df=futr.assign(unique_id=futr.unique_id + "-new"))
    tail = new[new.unique_id == "s00000-new"].y.to_numpy()
    np.testing.assert_allclose(inp.y_mean[0], tail.astype(np.float32).mean(), rtol=1e-5)


def test_polars_and_parquet_sources(tmp_path):
    df, _ = _small()
    path = tmp_path / "panel.parquet"
    pl.from_pandas(df).write_parquet(path)
    a, b = Panel.from_long(pl.from_pandas(df)), Panel.from_long(path)
    c = Panel.from_long(df.rename(columns={"unique_id": "item", "ds": "when", "y": "sales"}), id_col="item",
                        time_col="when", target_col="sales")
    for p in (b, c):
        assert p.ids == a.ids and np.array_equal(p.target, a.target)
        assert np.array_equal(p.timestamps, a.timestamps)
    assert b.name == "panel"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert "2 series" in repr(a)
