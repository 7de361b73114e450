"""WindowSet: windows are views of one tensor, x/y align, features modes, fast batches == reference."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tsmix.datasets import DataError, Scaler, WindowSet, prepare, time_features


def ramp(T: int, C: int, dtype=torch.float32) -> torch.Tensor:
    # value = 100 * row + channel: any misalignment shows up as a wrong number
    return (100 * torch.arange(T, dtype=dtype)[:, None] + torch.arange(C, dtype=dtype)).contiguous()  # (T, C)


def storages(ws: WindowSet) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in vars(ws).values() if isinstance(t, torch.Tensor)}


def test_windows_are_views_and_memory_does_not_grow():
    data = ramp(5000, 3)
    base = data.untyped_storage()
    lo, hi = base.data_ptr(), base.data_ptr() + base.nbytes()
    small = WindowSet(data, 4, 2, end=100)
    big = WindowSet(data, 4, 2)
    assert len(big) == 5000 - 6 + 1 and len(small) == 95
    for ws in (small, big):
        assert storages(ws) == {lo}  # every tensor it holds lives in data's storage: no per-window copy
        x, y = ws[len(ws) - 1]
        assert x.untyped_storage().data_ptr() == lo and lo <= x.data_ptr() < y.data_ptr() < hi
        xb, yb = next(ws.batches(8))
        assert xb.shape == (8, 4, 3) and yb.shape == (8, 2, 3)


def test_x_y_alignment_and_boundaries():
    data = ramp(50, 2)
    ws = WindowSet(data, lookback=5, horizon=3, start=10, end=30)
    assert len(ws) == 30 - 10 - 5 - 3 + 1
    x, y = ws[0]
    assert x[:, 0].tolist() == [100.0 * r for r in range(10, 15)]
    assert y[:, 0].tolist() == [100.0 * r for r in range(15, 18)]
    x, y = ws[-1]  # the last window ends exactly at `end`
    assert x[0, 0] == 100.0 * 22 and y[-1, 1] == 100.0 * 29 + 1
    assert ws.window_rows(len(ws) - 1) == (22, 27, 30)
    with pytest.raises(IndexError):
        ws[len(ws)]


@pytest.mark.parametrize("features, cin, cout", [("M", 4, 4), ("S", 1, 1), ("MS", 4, 1)])
def test_features_modes(features, cin, cout):
    data = ramp(40, 4)
    ws = WindowSet(data, 6, 2, features=features, target_idx=2)
    assert (ws.x_channels, ws.y_channels) == (cin, cout)
    x, y = ws[3]
    assert x.shape == (6, cin) and y.shape == (2, cout)
    if features != "M":
        assert torch.equal(y[:, 0], data[9:11, 2])  # the target channel
    if features == "S":
        assert torch.equal(x[:, 0], data[3:9, 2])
    xb, yb = next(ws.batches(5))
    assert xb.shape == (5, 6, cin) and yb.shape == (5, 2, cout)


def reference_batches(ws: WindowSet, order: torch.Tensor, bs: int):
    # Plain per-window slicing + stack: what the fast gather must equal.
    for s in range(0, len(order), bs):
        items = [ws[int(i)] for i in order[s : s + bs]]
        yield torch.stack([x for x, _ in items]), torch.stack([y for _, y in items])


@settings(max_examples=25, deadline=None, derandomize=True)
@given(T=st.integers(8, 80), C=st.integers(1, 4), L=st.integers(1, 12), H=st.integers(1, 6),
       features=st.sampled_from(["M", "S", "MS"]), bs=st.integers(1, 9), seed=st.integers(0, 9))
def test_fast_batches_equal_reference(T, C, L, H, features, bs, seed):
    data = torch.randn(T + L + H, C, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    ws = WindowSet(data, L, H, features=features, target_idx=-1, start=1)
    g = torch.Generator().manual_seed(seed)
    fast = list(ws.batches(bs, shuffle=True, generator=g))
    order = torch.randperm(len(ws), generator=torch.Generator().manual_seed(seed))
    ref = list(reference_batches(ws, order, bs))
    assert len(fast) == len(ref) == ws.num_batches(bs)
    for (xf, yf), (xr, yr) in zip(fast, ref):
        assert torch.equal(xf, xr) and torch.equal(yf, yr) and xf.is_contiguous()
    n_seen = sum(len(x) for x, _ in ws.batches(bs))
    assert n_seen == len(ws)  # evaluation sees every window
    n_drop = sum(len(x) for x, _ in ws.batches(bs, drop_last=True))
    assert n_drop == len(ws) - len(ws) % bs == ws.num_batches(bs, drop_last=True) * bs


def test_batches_in_order_cover_every_window_once():
    ws = WindowSet(ramp(30, 1), 3, 2)
    firsts = torch.cat([x[:, 0, 0] for x, _ in ws.batches(4)])
    assert firsts.tolist() == [100.0 * i for i in range(len(ws))]


def test_dataloader_compatible():
    ws = WindowSet(ramp(20, 2), 3, 2)
    x, y = next(iter(torch.utils.data.DataLoader(ws, batch_size=4)))
    xb, yb = next(ws.batches(4))
    assert torch.equal(x, xb) and torch.equal(y, yb)


def test_marks_are_input_only_channels():
    data = ramp(30, 3)
    marks = -torch.ones(30, 2)
    for features, cin, cout in (("M", 5, 3), ("S", 3, 1), ("MS", 5, 1)):
        ws = WindowSet(data, 4, 2, features=features, marks=marks)
        x, y = ws[0]
        assert (x.shape[1], y.shape[1]) == (cin, cout) and (x[:, -2:] == -1).all() and (y >= 0).all()


@pytest.mark.parametrize(
    "kwargs, match",
    [(dict(lookback=0, horizon=2), "lookback must be a positive integer"),
     (dict(lookback=3, horizon=-1), "horizon must be a positive integer"),
     (dict(lookback=3, horizon=2, features="X"), "unknown features mode 'X'"),
     (dict(lookback=8, horizon=3), "fewer than lookback \\+ horizon"),
     (dict(lookback=2, horizon=2, start=5, end=4), "outside the series"),
     (dict(lookback=2, horizon=2, target_idx=5), "target_idx 5 out of range")],
)
def test_window_argument_errors(kwargs, match):
    with pytest.raises(DataError, match=match):
        WindowSet(ramp(10, 2), **kwargs)


def test_to_device_keeps_windows():
    ws = WindowSet(ramp(20, 2), 3, 2, features="MS")
    moved = ws.to("cpu")
    assert len(moved) == len(ws) and torch.equal(moved[5][1], ws[5][1])


def test_scaler_numpy_torch_channels_and_roundtrip():
    rng = np.random.default_rng(0)
    v = rng.normal(3.0, 2.0, size=(200, 3))
    v[:, 2] = 7.0  # a constant channel keeps scale 1 (no division by zero)
    sc = Scaler().fit(v[:100])
    from sklearn.preprocessing import StandardScaler

    np.testing.assert_allclose(sc.transform(v), StandardScaler().fit(v[:100]).transform(v), rtol=1e-12)
    t = torch.from_numpy(v[None])  # (1, 200, 3) torch float64
    torch.testing.assert_close(sc.inverse_transform(sc.transform(t)), t)
    assert sc.transform(v.astype(np.float32)).dtype == np.float32
    col = sc.transform(v[:, 1:2], channels=[1])
    np.testing.assert_allclose(col[:, 0], (v[:, 1] - sc.mean_[1]) / sc.scale_[1])
    again = Scaler.from_dict(sc.to_dict())
    np.testing.assert_array_equal(again.mean_, sc.mean_)
    with pytest.raises(DataError, match="2 channels but the scaler holds 3"):
        sc.transform(v[:, :2])
    with pytest.raises(DataError, match="not fitted"):
        Scaler().transform(v)


def test_prepare_calendar_features():
    ts = pd.date_range("2021-01-01", periods=400, freq="h")
    df = pd.DataFrame({"date": ts, "a": np.arange(400.0), "OT": np.sin(np.arange(400.0))})
    p = prepare(df, 24, 12, "MS", calendar=True)
    assert p.mark_names == ("hour_of_day", "day_of_week", "day_of_month", "day_of_year")
    assert (p.x_channels, p.y_channels) == (6, 1)
    x, _ = p.train[5]  # hour 5 of Friday 2021-01-01
    np.testing.assert_allclose(x[0, 2:].numpy(), [5 / 23 - 0.5, 4 / 6 - 0.5, -0.5, -0.5], atol=1e-6)
    m, names = time_features(pd.date_range("2021-01-01", periods=5, freq="15min").to_numpy())
    assert names[0] == "minute_of_hour" and m.shape == (5, 5) and np.abs(m).max() <= 0.5
