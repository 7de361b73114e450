"""The vision pipeline: digits in patch and pixel mode, MNIST IDX and CIFAR-10 loaders on small
generated files (corrupt, missing and hostile files refused), and the ``tsmix vision`` command."""

from __future__ import annotations

import gzip
import os
import pickle

import numpy as np
import pytest
import torch

from tsmix.cli import main as tsmix
from tsmix.errors import TsmixError
from tsmix.models.fit import FitConfig
from tsmix.models.nets import NetConfig
from tsmix.models.vision import ImageClassifier, VisionConfig, load_images, run_vision


@pytest.fixture(scope="module")
def digits():
    return load_images("digits", "train"), load_images("digits", "test")


def test_digits_split(digits):
    train, test = digits
    assert train.x.shape == (1437, 1, 8, 8) and test.x.shape == (360, 1, 8, 8)
    assert 0 <= float(train.x.min()) and float(train.x.max()) <= 1 and train.classes == 10


def test_patch_mode_small_budget_reaches_floor(digits):
    torch.set_num_threads(1)
    r = run_vision(*digits, VisionConfig(mode="patch", patch=4, epochs=1),
                   NetConfig(mixer="yb-spectral", causal=False, dim=32, heads=2, layers=1),
                   FitConfig(batch_size=16, lr=5e-3, warmup=10))
    assert r["accuracy"] >= 0.80, r  # chance 0.10; 2 epochs at width 64 reach ~0.97
    assert r["steps"] == 90


def test_pixel_mode_causal_runs_and_is_causal(digits):
    train, test = digits
    small = type(train)(train.x[:64], train.y[:64], 10)
    r = run_vision(small, test, VisionConfig(mode="pixel", epochs=1),
                   NetConfig(mixer="gla", causal=True, dim=16, heads=2, layers=1), FitConfig(batch_size=32))
    assert 0 <= r["accuracy"] <= 1 and r["steps"] == 2
    model = ImageClassifier((1, 8, 8), 10, VisionConfig(mode="pixel"),
                            NetConfig(mixer="softmax", causal=True, dim=16, heads=2, layers=1)).eval()
    assert model.tokens(train.x[:2]).shape == (2, 64, 1)
    with pytest.raises(TsmixError, match="bidirectional only"):
        ImageClassifier((1, 8, 8), 10, VisionConfig(mode="pixel"),
                        NetConfig(mixer="yb-spectral", causal=True))
    with pytest.raises(TsmixError, match="does not tile"):
        ImageClassifier((1, 8, 8), 10, VisionConfig(patch=3), NetConfig(causal=False))


def _idx(path, arr: np.ndarray, compress: bool = False) -> None:
    raw = bytes([0, 0, 8, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape) + arr.tobytes()
    if compress:
        path, raw = path.with_name(path.name + ".gz"), gzip.compress(raw)
    path.write_bytes(raw)


def test_mnist_idx_loader(tmp_path):
    rng = np.random.default_rng(0)
    for split, prefix, n in (("train", "train", 6), ("test", "t10k", 4)):
        _idx(tmp_path / f"{prefix}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8),
             compress=split == "test")
        _idx(tmp_path / f"{prefix}-labels-idx1-ubyte", rng.integers(0, 10, n, dtype=np.uint8))
    train, test = load_images("mnist", "train", tmp_path), load_images("mnist", "test", tmp_path)
    assert train.x.shape == (6, 1, 28, 28) and test.x.shape == (4, 1, 28, 28) and float(train.x.max()) <= 1
    raw = (tmp_path / "train-images-idx3-ubyte").read_bytes()
    (tmp_path / "train-images-idx3-ubyte").write_bytes(raw[:-10])
    with pytest.raises(TsmixError, match="truncated or corrupt"):
        load_images("mnist", "train", tmp_path)
    (tmp_path / "train-images-idx3-ubyte").write_bytes(b"PK\x03\x04" + raw[4:])
    with pytest.raises(TsmixError, match="bad header"):
        load_images("mnist", "train", tmp_path)
    with pytest.raises(TsmixError, match="t10k-images-idx3-ubyte"):
        load_images("mnist", "test", tmp_path / "empty")
    with pytest.raises(TsmixError, match="--data-dir"):
        load_images("mnist", "train")


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo hacked",))


def test_cifar_loader_is_safe(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": rng.integers(0, 256, (3, 3072), dtype=np.uint8), b"labels": [1, 2, 3]}
        (folder / name).write_bytes(pickle.dumps(batch))
    train, test = load_images("cifar10", "train", tmp_path), load_images("cifar10", "test", tmp_path)
    assert train.x.shape == (15, 3, 32, 32) and test.y.tolist() == [1, 2, 3]
    (folder / "test_batch").write_bytes(pickle.dumps({b"data": _Evil(), b"labels": [1]}))
    with pytest.raises(TsmixError, match="refusing to load"):
        load_images("cifar10", "test", tmp_path)
    (folder / "test_batch").write_bytes(b"not a pickle")
    with pytest.raises(TsmixError, match="not a CIFAR-10 python batch"):
        load_images("cifar10", "test", tmp_path)
    (folder / "data_batch_3").unlink()
    with pytest.raises(TsmixError, match="data_batch_3"):
        load_images("cifar10", "train", tmp_path)


def test_vision_cli_bad_input(tmp_path, capsys):
    empty = str(tmp_path)
    for bad, msg in ((["vision", "--dataset", "mnist"], "--data-dir"),
                     (["vision", "--dataset", "svhn"], "unknown image data set"),
                     (["vision", "--mode", "pixel", "--causal", "--mixer", "yb-spectral"], "bidirectional"),
                     (["vision", "--mode", "tiles"], "unknown vision mode"),
                     (["vision", "--dataset", "mnist", "--data-dir", empty], "train-images-idx3-ubyte")):
        assert tsmix(bad) == 2
        err = capsys.readouterr().err.strip()
        assert msg in err and len(err.splitlines()) == 1, err
