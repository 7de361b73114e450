"""Panel windows: views of one buffer, never across series, equal to a slow per-series reference."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from sklearn.preprocessing import StandardScaler

from tsmix.datasets.panel import Panel
from tsmix.datasets.panel_prepare import prepare_panel
from tsmix.datasets.panel_split import PanelSplit
from tsmix.datasets.panel_synthetic import synthetic_panel
from tsmix.datasets.timefeatures import time_features

COV = {"hist_exog": ["load"], "futr_exog": ["promo"]}


def long_frame(lengths, starts=None, seed=0) -> pd.DataFrame:
    return synthetic_panel(lengths, starts, seed=seed)[0]


def scaled(col: pd.Series, mean: float, scale: float) -> np.ndarray:
    """float32 values, float64 arithmetic, float32 result: what ``Scaler.transform`` does."""
    return ((col.to_numpy(np.float32).astype(np.float64) - mean) / scale).astype(np.float32)


def reference_windows(df: pd.DataFrame, prep, L: int, H: int, val: int, test: int):
    """Per split, the expected windows by plain per-series slicing of each series' own scaled arrays."""
    sch = prep.schema
    out = {k: [] for k in ("train", "val", "test")}
    for sid, g in df.sort_values(["unique_id", "ds"]).groupby("unique_id", sort=True):
        n = len(g)
        n_train = n - val - test
        if n_train < L + H:  # too short for a training window: dropped
            assert sid not in sch.ids
            continue
        i = sch.ids.index(sid)
        y = scaled(g["y"], sch.y_mean[i], sch.y_scale[i])
        h = scaled(g["load"], sch.hist_mean[i, 0], sch.hist_scale[i, 0])
        f = scaled(g["promo"], sch.futr_mean[i, 0], sch.futr_scale[i, 0])
        cal = time_features(g["ds"].to_numpy())[0]
        ts = g["ds"].to_numpy().astype("datetime64[ns]").view(np.int64)
        bounds = {"train": (0, n_train), "val": (n_train - L, n_train + val), "test": (n_train + val - L, n)}
        for k, (a, b) in bounds.items():
            for s in range(a, b - L - H + 1):
                out[k].append((i, y[s : s + L], y[s + L : s + L + H], h[s : s + L],
                               np.column_stack([f[s : s + L + H], cal[s : s + L + H]]), ts[s + L - 1]))
    return out


@settings(max_examples=20, deadline=None, derandomize=True)
@given(lengths=st.lists(st.integers(10, 70), min_size=1, max_size=6), starts=st.data(),
       L=st.integers(1, 8), H=st.integers(1, 5), extra=st.integers(0, 6), seed=st.integers(0, 5))
def test_windows_equal_slow_reference_and_never_cross_series(lengths, starts, L, H, extra, seed):
    s0 = starts.draw(st.lists(st.integers(0, 30), min_size=len(lengths), max_size=len(lengths)))
    df = long_frame(lengths, s0, seed=seed).sample(frac=1.0, random_state=seed)  # unsorted rows
    val, test = H + extra, H
    assume(any(n - val - test >= L + H for n in lengths))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prep = prepare_panel(Panel.from_long(df, **COV), L, H,
                             PanelSplit(val_size=val, test_size=test), drop_short=True)
    ref = reference_windows(df, prep, L, H, val, test)
    row_series = np.repeat(np.arange(prep.panel.n_series), prep.panel.lengths)  # (N,) owner of each row
    for k, expected in ref.items():
        ws = prep.split(k)
        assert len(ws) == len(expected)
        series, start = ws.index()
        for a, s in zip(start, series):  # every row of every window belongs to the window's series
            assert (row_series[a : a + L + H] == s).all()
        order = torch.randperm(len(ws), generator=torch.Generator().manual_seed(seed))
        b = ws.gather(order)
        for j, i in enumerate(order.tolist()):
            s, x, y, h, f, origin = expected[i]
            assert int(b.series[j]) == s and int(b.origin[j]) == origin
            assert np.array_equal(b.x[j, :, 0].numpy(), x) and np.array_equal(b.y[j, :, 0].numpy(), y)
            assert np.array_equal(b.hist[j, :, 0].numpy(), h)
            np.testing.assert_array_equal(b.futr[j].numpy(), f.astype(np.float32))
        x0, y0 = ws[len(ws) - 1]  # the reference path (plain slicing) agrees with the gather
        assert torch.equal(x0, b.x[order.tolist().index(len(ws) - 1)])


def test_scaler_is_each_series_own_training_part():
    df = long_frame([40, 90, 65], [0, 12, 30])
    prep = prepare_panel(Panel.from_long(df, **COV), 6, 3, PanelSplit(val_size=8, test_size=5))
    sch = prep.schema
    for i, (_, g) in enumerate(df.groupby("unique_id", sort=True)):
        train = g[["y", "load", "promo"]].to_numpy(np.float32).astype(np.float64)[: len(g) - 13]
        sk = StandardScaler().fit(train)
        np.testing.assert_allclose([sch.y_mean[i], sch.hist_mean[i, 0], sch.futr_mean[i, 0]], sk.mean_,
                                   rtol=1e-12)
        np.testing.assert_allclose([sch.y_scale[i], sch.hist_scale[i, 0], sch.futr_scale[i, 0]], sk.scale_,
                                   rtol=1e-12)


def test_windows_are_views_and_memory_follows_rows():
    df = long_frame([300, 500, 800], [0, 40, 7])
    prep = prepare_panel(Panel.from_long(df, **COV), 24, 12, PanelSplit(val_size=24, test_size=24))
    t = prep.tensors
    bases = {x.untyped_storage().data_ptr() for x in (t.y, t.hist, t.futr)}
    ws = prep.train
    for view in (ws._xw, ws._yw, ws._hw, ws._fw):
        assert view.untyped_storage().data_ptr() in bases  # one unfold per buffer, no per-window copy
    x, y = ws[5]
    assert x.untyped_storage().data_ptr() == t.y.untyped_storage().data_ptr()
    held = ws.held_bytes()
    buffers = sum(v.untyped_storage().nbytes() for v in (t.y, t.hist, t.futr, t.stamps))
    assert held <= buffers + 4096  # + the small per-series index tensors
    assert len(ws) * (24 + 12) * 4 > 10 * t.y.untyped_storage().nbytes()  # copies would be far bigger


def test_batches_cover_every_window_once_and_drop_last():
    df = long_frame([50, 70])
    prep = prepare_panel(Panel.from_long(df, **COV), 5, 2, PanelSplit(val_size=4, test_size=4))
    ws = prep.train
    seen = [(int(s), int(o)) for b in ws.batches(7, shuffle=True, generator=torch.Generator())
            for s, o in zip(b.series, b.origin)]
    assert len(seen) == len(ws) and len(set(seen)) == len(ws)
    n_full = sum(1 for _ in ws.batches(7, drop_last=True))
    assert n_full == ws.num_batches(7, drop_last=True) == len(ws) // 7
    b = next(ws.batches(4))
    L, H = 5, 2
    shapes = (b.x.shape, b.y.shape, b.hist.shape, b.futr.shape)
    assert shapes == ((4, L, 1), (4, H, 1), (4, L, 1), (4, L + H, 5))  # futr: promo + 4 calendar features
    assert b.static.shape == (4, 0) and b.static_cat.shape == (4, 0) and b.static_cat.dtype == torch.int64
    with pytest.raises(Exception, match="batch_size"):
        next(ws.batches(0))
    moved = ws.to("cpu")
    assert len(moved) == len(ws)
    assert torch.equal(moved.gather(torch.arange(3)).x, ws.gather(torch.arange(3)).x)
