"""Stride-1 (lookback, horizon) windows as views of one tensor: memory does not grow with the windows."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from tsmix.datasets.errors import DataError
from tsmix.datasets.validate import check_window_args


class WindowSet(torch.utils.data.Dataset):
    """Windows over rows ``[start, end)`` of ``data`` (T, C): window i is x = rows
    ``start+i .. start+i+L`` and y = the next H rows.

    features: "M" x, y = all channels; "S" x, y = the target; "MS" x = all, y = the target.
    ``marks`` (T, K): optional covariates (calendar features) appended to x's channels only.
    Every window is kept; only ``batches(drop_last=True)`` (training) may skip a short last batch.
    """

    def __init__(self, data: torch.Tensor, lookback: int, horizon: int, features: str = "M",
                 target_idx: int = -1, start: int = 0, end: int | None = None,
                 marks: torch.Tensor | None = None) -> None:
        check_window_args(lookback, horizon, features)
        if data.ndim != 2:
            raise DataError(f"window data must be (time, channels), got shape {tuple(data.shape)}")
        T, C = data.shape
        if not -C <= target_idx < C:
            raise DataError(f"target_idx {target_idx} out of range for {C} channels")
        end = T if end is None else end
        if not 0 <= start <= end <= T:
            raise DataError(f"rows [{start}, {end}) are outside the series of {T} rows")
        n = end - start - lookback - horizon + 1
        if n < 1:
            raise DataError(f"rows [{start}, {end}) hold {end - start} rows, fewer than lookback + horizon = "
                            f"{lookback + horizon}: use a shorter lookback/horizon or a longer series")
        self.data, self.lookback, self.horizon, self.features = data, lookback, horizon, features
        self.target_idx, self.start, self.end, self.marks = target_idx % C, start, end, marks
        t = self.target_idx
        xb = data if features in ("M", "MS") else data[:, t : t + 1]  # (T, C_in) view
        yb = data if features == "M" else data[:, t : t + 1]  # (T, C_out) view
        if marks is not None:
            if marks.ndim != 2 or len(marks) != T:
                raise DataError(f"marks must be (time={T}, K), got shape {tuple(marks.shape)}")
            # One O(T) copy for the input base; still independent of the number of windows.
            xb = torch.cat([xb, marks.to(device=data.device, dtype=data.dtype)], dim=1)  # (T, C_in + K)
        self._xb, self._yb = xb, yb
        # unfold gives (n, C, L) strided views; transposing makes each window a (L, C) block.
        self._xw = xb[start : end - horizon].unfold(0, lookback, 1).transpose(1, 2)  # (n, L, C_in) view
        self._yw = yb[start + lookback : end].unfold(0, horizon, 1).transpose(1, 2)  # (n, H, C_out) view
        assert len(self._xw) == len(self._yw) == n
        self.x_channels, self.y_channels = xb.shape[1], yb.shape[1]

    def __len__(self) -> int:
        return len(self._xw)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Window i as ((L, C_in), (H, C_out)) views of the data. Plain slicing: the reference path."""
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"window {i} out of range for {n} windows")
        a = self.start + i % n
        b = a + self.lookback
        return self._xb[a:b], self._yb[b : b + self.horizon]

    def window_rows(self, i: int) -> tuple[int, int, int]:
        """Absolute rows (x_start, y_start, y_end) of window i in the full series (for timestamps)."""
        a = self.start + i % len(self)
        return a, a + self.lookback, a + self.lookback + self.horizon

    def gather(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Windows ``idx`` (B,) as contiguous (B, L, C_in), (B, H, C_out): one index op per tensor."""
        idx = idx.to(self._xw.device)
        return self._xw[idx], self._yw[idx]

    def batches(self, batch_size: int, shuffle: bool = False, generator: torch.Generator | None = None,
                drop_last: bool = False) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Mini-batches (x (B, L, C_in), y (B, H, C_out)) over all windows, in order unless ``shuffle``."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise DataError(f"batch_size must be a positive integer, got {batch_size!r}")
        n = len(self)
        order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
        stop = n - n % batch_size if drop_last else n
        for s in range(0, stop, batch_size):
            yield self.gather(order[s : s + batch_size])

    def num_batches(self, batch_size: int, drop_last: bool = False) -> int:
        return len(self) // batch_size if drop_last else -(-len(self) // batch_size)

    def to(self, device: torch.device | str) -> WindowSet:
        """The same windows over ``data`` moved once to ``device`` (batches then gather there)."""
        marks = None if self.marks is None else self.marks.to(device)
        return WindowSet(self.data.to(device), self.lookback, self.horizon, self.features, self.target_idx,
                         self.start, self.end, marks)

    def __repr__(self) -> str:
        return (f"WindowSet({len(self)} windows, rows [{self.start}, {self.end}), L={self.lookback}, "
                f"H={self.horizon}, features={self.features}, x_channels={self.x_channels}, "
                f"y_channels={self.y_channels})")
