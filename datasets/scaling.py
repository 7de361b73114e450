"""Standard scaling fit on the training rows only (sklearn's StandardScaler computes the statistics)."""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import torch

from tsmix.datasets.errors import DataError

ArrayT = TypeVar("ArrayT", np.ndarray, torch.Tensor)
Channels = int | slice | list[int] | tuple[int, ...] | None


class Scaler:
    """Per-channel ``(x - mean_) / scale_``; constant channels keep scale 1 (sklearn's rule)."""

    def __init__(self) -> None:
        self.mean_: np.ndarray | None = None  # (C,) float64
        self.scale_: np.ndarray | None = None  # (C,) float64

    def fit(self, values: np.ndarray) -> Scaler:
        """Fit on ``values`` (rows, C): pass the TRAINING rows only, never val/test."""
        values = np.asarray(values, dtype=np.float64)
        if values.ndim != 2 or len(values) == 0:
            raise DataError(f"the scaler fits a non-empty (rows, channels) array, got shape {values.shape}")
        from sklearn.preprocessing import StandardScaler  # lazy: sklearn is slow to import

        sk = StandardScaler().fit(values)
        self.mean_, self.scale_ = sk.mean_.astype(np.float64), sk.scale_.astype(np.float64)
        return self

    @property
    def n_channels(self) -> int:
        return 0 if self.mean_ is None else len(self.mean_)

    def _stats(self, x, channels: Channels):
        if self.mean_ is None:
            raise DataError("the scaler is not fitted: call fit(train_values) first")
        mean, scale = self.mean_, self.scale_
        if channels is not None:
            mean, scale = np.atleast_1d(mean[channels]), np.atleast_1d(scale[channels])
        if x.shape[-1] != len(mean):
            raise DataError(f"data has {x.shape[-1]} channels but the scaler holds {len(mean)}: pass the "
                            f"matching channels= (e.g. the target index for features S/MS)")
        if isinstance(x, torch.Tensor):
            kw = {"dtype": x.dtype if x.is_floating_point() else torch.float32, "device": x.device}
            return torch.as_tensor(mean, **kw), torch.as_tensor(scale, **kw)
        return mean, scale

    def transform(self, x: ArrayT, channels: Channels = None) -> ArrayT:
        """Scale ``x`` (..., C); ``channels`` picks which fitted channels the last axis holds."""
        mean, scale = self._stats(x, channels)
        out = (x - mean) / scale
        return out.astype(x.dtype, copy=False) if isinstance(x, np.ndarray) and x.dtype.kind == "f" else out

    def inverse_transform(self, x: ArrayT, channels: Channels = None) -> ArrayT:
        """Back to original units: ``x * scale_ + mean_`` over the last axis."""
        mean, scale = self._stats(x, channels)
        out = x * scale + mean
        return out.astype(x.dtype, copy=False) if isinstance(x, np.ndarray) and x.dtype.kind == "f" else out

    def to_dict(self) -> dict[str, list[float]]:
        """JSON-ready statistics (e.g. for a run's config.json)."""
        if self.mean_ is None:
            raise DataError("the scaler is not fitted: nothing to save")
        return {"mean": [float(v) for v in self.mean_], "scale": [float(v) for v in self.scale_]}

    @classmethod
    def from_dict(cls, d: dict) -> Scaler:
        s = cls()
        s.mean_ = np.asarray(d["mean"], dtype=np.float64)
        s.scale_ = np.asarray(d["scale"], dtype=np.float64)
        if s.mean_.shape != s.scale_.shape or s.mean_.ndim != 1:
            raise DataError("a saved scaler needs 'mean' and 'scale' lists of equal length")
        return s

    def __repr__(self) -> str:
        return f"Scaler(channels={self.n_channels})"
