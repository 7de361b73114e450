"""Split borders and window counts on the real benchmark files (../shared/data or TSMIX_DATA_DIR)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tsmix.datasets import (
    BENCHMARKS,
    DataError,
    get_benchmark,
    load,
    prepare,
    resolve_path,
    sha256_file,
    split_borders,
)


@pytest.mark.parametrize(
    "name, lookback, horizon, windows",
    [("ETTh1", 336, 96, (8209, 2785, 2785)), ("Weather", 96, 96, (36696, 5175, 10444)),
     ("ETTm1", 336, 96, (34129, 11425, 11425)), ("ETTh2", 96, 720, (7825, 2161, 2161))],
)
def test_window_counts_match_the_papers(data_dir, name, lookback, horizon, windows):
    p = prepare(name, lookback, horizon, data_dir=data_dir)
    assert (len(p.train), len(p.val), len(p.test)) == windows
    # Each count is the border length minus lookback + horizon - 1: every window, no drop_last.
    for split, n in zip(("train", "val", "test"), windows):
        a, b = p.borders[split]
        assert n == b - a - lookback - horizon + 1


def test_ett_borders(data_dir):
    expected = {"train": (0, 8640), "val": (8304, 11520), "test": (11184, 14400)}
    assert split_borders(17420, 336, "etth") == expected
    p = prepare("ETTm1", 96, 96, data_dir=data_dir)
    assert p.series.n_rows == 69680 and p.series.freq == "15min" and p.series.kind == "ettm"
    assert p.borders == {"train": (0, 34560), "val": (34464, 46080), "test": (45984, 57600)}
    assert str(p.series.timestamps[34560]) == "2017-06-26T00:00:00.000000000"  # 12 months in


def test_custom_rule_is_70_10_20():
    assert split_borders(52696, 96, "custom") == {"train": (0, 36887), "val": (36791, 42157),
                                                  "test": (42061, 52696)}
    assert split_borders(1000, 10, "custom") == {"train": (0, 700), "val": (690, 800), "test": (790, 1000)}


@pytest.mark.parametrize("name", list(BENCHMARKS))
def test_every_benchmark_loads_with_its_spec(data_dir, name):
    spec = BENCHMARKS[name]
    path = resolve_path(name.upper(), data_dir)  # lookup is case-insensitive
    assert path == data_dir / spec.relpath
    s = load(name, data_dir=data_dir)
    assert s.values.dtype == np.float32 and s.timestamps.dtype == np.dtype("datetime64[ns]")
    assert s.target == "OT" and s.columns[-1] == "OT" and s.freq == spec.freq and s.kind == spec.kind
    assert np.isfinite(s.values).all()


def test_get_benchmark():
    assert get_benchmark("weather") is BENCHMARKS["Weather"] and get_benchmark("x", required=False) is None
    with pytest.raises(DataError, match="unknown benchmark 'x': use one of ETTh1, ETTh2, ETTm1, ETTm2"):
        get_benchmark("x")


def test_registry_hashes_match_the_shared_files(data_dir):
    for spec in BENCHMARKS.values():
        assert sha256_file(data_dir / spec.relpath) == spec.sha256, spec.name


def test_weather_loads_as_is(data_dir):
    """CRLF endings, U+FFFD in the header, one duplicated timestamp and one 100-minute gap: kept."""
    s = load("weather", data_dir=data_dir)
    assert s.n_rows == 52696 and s.n_channels == 21 and s.freq == "10min"
    assert s.columns[-1] == "OT" and not any("\r" in c for c in s.columns)
    assert "SWDR (W/m\ufffd)" in s.columns
    assert len(np.unique(s.timestamps)) == 52695


def test_a_benchmark_file_given_by_path_keeps_its_borders(data_dir):
    p = prepare(data_dir / "ETT-small" / "ETTh1.csv", 336, 96)
    assert p.series.name == "ETTh1" and (len(p.train), len(p.val), len(p.test)) == (8209, 2785, 2785)
    s = load("ETT-small/ETTm2.csv", data_dir=data_dir)  # a relative path is also looked up in data_dir
    assert s.name == "ETTm2" and s.path == data_dir / "ETT-small" / "ETTm2.csv"


def test_scaler_is_fit_on_train_rows_only(data_dir):
    p = prepare("ETTh1", 336, 96, data_dir=data_dir)
    train = p.series.values[:8640].astype(np.float64)
    np.testing.assert_allclose(p.scaler.mean_, train.mean(0), rtol=1e-10)
    np.testing.assert_allclose(p.scaler.scale_, train.std(0), rtol=1e-10)
    assert not np.allclose(p.scaler.mean_, p.series.values.astype(np.float64).mean(0), rtol=1e-3)
    d = p.data[:8640].double()
    torch.testing.assert_close(d.mean(0), torch.zeros(7, dtype=torch.float64), atol=1e-5, rtol=0)
    back = p.scaler.inverse_transform(p.data)
    torch.testing.assert_close(back, torch.from_numpy(p.series.values), rtol=1e-5, atol=1e-4)
