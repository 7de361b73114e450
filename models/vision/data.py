"""Image data sets for the vision pipeline: digits (bundled), MNIST IDX, CIFAR-10 python batches.

Every loader returns :class:`Images` (float images (N, C, H, W) in [0, 1] and int64 labels) for a
train and a test split. Files are read from a local folder (``--data-dir``); nothing is
downloaded. CIFAR-10's batches are pickles by format: they are read with an unpickler that only
builds numpy arrays, dicts, lists, strings and numbers, so a file carrying any other object is
refused instead of executed -- still, load only files from a source you trust.
"""

from __future__ import annotations

import gzip
import io
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tsmix.errors import TsmixError

DATASETS = ("digits", "mnist", "cifar10")
MNIST_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
               "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
CIFAR_DIR = "cifar-10-batches-py"
CIFAR_FILES = {"train": tuple(f"data_batch_{i}" for i in range(1, 6)), "test": ("test_batch",)}


@dataclass(frozen=True)
class Images:
    x: torch.Tensor  # (N, C, H, W) float32 in [0, 1]
    y: torch.Tensor  # (N,) int64 class ids
    classes: int  # number of classes


def load_images(name: str, split: str, data_dir: str | Path | None = None) -> Images:
    """The ``split`` ("train" | "test") of data set ``name`` (digits needs no folder)."""
    if split not in ("train", "test"):
        raise TsmixError(f"split must be train or test, got {split!r}")
    if name == "digits":
        return _digits(split)
    if name not in DATASETS:
        raise TsmixError(f"unknown image data set {name!r}; choose one of {', '.join(DATASETS)}")
    if data_dir is None:
        raise TsmixError(f"{name} is read from a local folder: pass --data-dir (the folder holding "
                         f"{_expected(name, split)})")
    folder = Path(data_dir).expanduser()
    return _mnist(folder, split) if name == "mnist" else _cifar(folder, split)


def _expected(name: str, split: str) -> str:
    if name == "mnist":
        return ", ".join(f"{f}[.gz]" for f in MNIST_FILES[split])
    return ", ".join(f"{CIFAR_DIR}/{f}" for f in CIFAR_FILES[split])


def _digits(split: str) -> Images:
    """scikit-learn's 1,797 8x8 digits; a fixed 80/20 split (the last 20% of one seeded shuffle)."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    order = np.random.default_rng(0).permutation(len(bunch.target))
    cut = int(0.8 * len(order))
    idx = order[:cut] if split == "train" else order[cut:]
    x = torch.tensor(bunch.images[idx] / 16.0, dtype=torch.float32)[:, None]  # (N, 1, 8, 8)
    return Images(x, torch.tensor(bunch.target[idx], dtype=torch.long), 10)


def _open(path: Path) -> bytes:
    for candidate in (path, path.with_name(path.name + ".gz")):
        if candidate.is_file():
            raw = candidate.read_bytes()
            try:
                return gzip.decompress(raw) if candidate.suffix == ".gz" else raw
            except (OSError, EOFError) as exc:
                raise TsmixError(f"{candidate} is not a readable gzip file ({exc}); replace it") from exc
    raise TsmixError(f"missing {path.name}[.gz] in {path.parent}: the MNIST folder must hold "
                     f"{_expected('mnist', 'train')}, {_expected('mnist', 'test')}")


def _idx(path: Path, ndim: int) -> np.ndarray:
    """An IDX file of unsigned bytes with ``ndim`` dimensions (magic 0x0000 08 ndim)."""
    raw = _open(path)
    if len(raw) < 4 + 4 * ndim or raw[:3] != b"\x00\x00\x08" or raw[3] != ndim:
        raise TsmixError(f"{path.name} is not an IDX file of {ndim}-d unsigned bytes (bad header); "
                         f"replace it with the original MNIST file")
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    body = raw[4 + 4 * ndim :]
    if len(body) != int(np.prod(dims)):
        raise TsmixError(f"{path.name} holds {len(body)} bytes of data, its header promises "
                         f"{int(np.prod(dims))} (truncated or corrupt); replace it")
    return np.frombuffer(body, dtype=np.uint8).reshape(dims)


def _mnist(folder: Path, split: str) -> Images:
    images_file, labels_file = MNIST_FILES[split]
    images, labels = _idx(folder / images_file, 3), _idx(folder / labels_file, 1)
    if len(images) != len(labels) or labels.max(initial=0) > 9:
        raise TsmixError(f"MNIST {split}: {len(images)} images but {len(labels)} labels (or a label > 9); "
                         f"the files do not belong together")
    x = torch.tensor(images, dtype=torch.float32)[:, None] / 255.0
    return Images(x, torch.tensor(labels, dtype=torch.long), 10)


class _ArraysOnly(pickle.Unpickler):
    """Builds numpy arrays and plain containers; any other global in the stream is refused."""

    ALLOWED = {("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "_reconstruct"),
               ("numpy._core.multiarray", "_reconstruct"), ("_codecs", "encode")}

    def find_class(self, module: str, name: str):  # noqa: ANN201 - pickle's signature
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        return super().find_class(module, name)


def _cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    if not path.is_file():
        raise TsmixError(f"missing {path}: the CIFAR-10 folder must hold {_expected('cifar10', 'train')}, "
                         f"{_expected('cifar10', 'test')}")
    try:
        batch = _ArraysOnly(io.BytesIO(path.read_bytes()), encoding="bytes").load()
    except Exception as exc:  # noqa: BLE001 - any unreadable or refused stream is one user error
        raise TsmixError(f"{path} is not a CIFAR-10 python batch ({type(exc).__name__}: {exc}); "
                         f"replace it with the original file") from exc
    if not isinstance(batch, dict):
        raise TsmixError(f"{path} holds a {type(batch).__name__}, not a CIFAR-10 batch dict; replace it")
    data = batch.get(b"data", batch.get("data"))
    labels = batch.get(b"labels", batch.get("labels"))
    if not isinstance(data, np.ndarray) or data.ndim != 2 or data.shape[1] != 3072 or labels is None \
            or len(labels) != len(data):
        raise TsmixError(f"{path} lacks a (N, 3072) 'data' array with N 'labels'; replace it with the "
                         f"original")
    return data.reshape(-1, 3, 32, 32), np.asarray(labels, dtype=np.int64)


def _cifar(folder: Path, split: str) -> Images:
    parts = [_cifar_batch(folder / CIFAR_DIR / f) for f in CIFAR_FILES[split]]
    x = torch.tensor(np.concatenate([p[0] for p in parts]), dtype=torch.float32) / 255.0
    y = torch.tensor(np.concatenate([p[1] for p in parts]), dtype=torch.long)
    if int(y.min()) < 0 or int(y.max()) > 9:
        raise TsmixError(f"CIFAR-10 {split} labels outside 0..9; the files are not CIFAR-10")
    return Images(x, y, 10)
