"""Panel windows as views of one buffer: a global window index maps to (series, start) and never crosses
a series.

Every buffer (target, hist, futr) is unfolded once over all rows; window i of a split is the unfolded
row at the global start of (series, step) found by ``searchsorted`` on the cumulative window counts.
A batch is one index op per tensor, so memory grows with the rows, never with the windows.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import torch

from tsmix.datasets.errors import DataError
from tsmix.datasets.windows import WindowSet


@dataclass(frozen=True, eq=False)
class PanelTensors:
    """The scaled buffers every split's windows view (shared, never copied per window)."""

    y: torch.Tensor  # (N, 1) scaled target
    hist: torch.Tensor  # (N, Ch) scaled past-only covariates
    futr: torch.Tensor  # (N, Cf) scaled future-known covariates, then calendar features
    static: torch.Tensor  # (S, Cs) standardized numeric static attributes
    static_cat: torch.Tensor  # (S, Ck) int64 category codes
    stamps: torch.Tensor  # (N,) int64 ns since the epoch (forecast-origin stamps of a batch)

    def to(self, device: torch.device | str) -> PanelTensors:
        return PanelTensors(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})


@dataclass(frozen=True, eq=False)
class PanelBatch:
    """One mini-batch of panel windows; what a model receives."""

    x: torch.Tensor  # (B, L, 1) scaled target over the lookback
    y: torch.Tensor  # (B, H, 1) scaled target over the horizon
    hist: torch.Tensor  # (B, L, Ch) past-only covariates, lookback part only
    futr: torch.Tensor  # (B, L+H, Cf) future-known covariates, lookback + horizon
    static: torch.Tensor  # (B, Cs) numeric static attributes
    static_cat: torch.Tensor  # (B, Ck) int64 static category codes
    series: torch.Tensor  # (B,) int64 series index into the panel's ids
    origin: torch.Tensor  # (B,) int64 ns: stamp of the last lookback step (the forecast origin)


class PanelWindows(torch.utils.data.Dataset):
    """Stride-1 (lookback, horizon) windows of the rows ``[lo[s], hi[s])`` of each listed series.

    ``series``, ``lo``, ``hi`` (S',): series indices and their split rows as GLOBAL buffer rows.
    """

    def __init__(self, tensors: PanelTensors, series: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                 lookback: int, horizon: int) -> None:
        counts = np.asarray(hi, dtype=np.int64) - np.asarray(lo, dtype=np.int64) - lookback - horizon + 1
        if len(counts) == 0 or (counts < 1).any():
            raise DataError("every series of a window set needs at least one lookback + horizon window")
        N = len(tensors.y)
        if (np.asarray(lo) < 0).any() or (np.asarray(hi) > N).any():
            raise DataError(f"window rows fall outside the {N}-row buffer")
        self.tensors, self.lookback, self.horizon = tensors, lookback, horizon
        dev = tensors.y.device
        self.series = torch.as_tensor(np.asarray(series, dtype=np.int64), device=dev)  # (S',)
        self.first = torch.as_tensor(np.asarray(lo, dtype=np.int64), device=dev)  # (S',) first window start
        self.counts = torch.as_tensor(counts, device=dev)  # (S',)
        self.cum = torch.cumsum(self.counts, 0)  # (S',) windows up to and including series j
        L, H = lookback, horizon
        t = tensors
        # unfold gives (N-w+1, C, w) strided views; transposed, row r is the (w, C) block starting at r.
        self._xw = t.y.unfold(0, L, 1).transpose(1, 2)  # (N-L+1, L, 1)
        self._yw = t.y.unfold(0, H, 1).transpose(1, 2)  # (N-H+1, H, 1)
        self._hw = t.hist.unfold(0, L, 1).transpose(1, 2)  # (N-L+1, L, Ch)
        self._fw = t.futr.unfold(0, L + H, 1).transpose(1, 2)  # (N-L-H+1, L+H, Cf)

    def __len__(self) -> int:
        return int(self.cum[-1])

    def locate(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Global window indices (B,) -> (position in this set's series list, global start row), each (B,)."""
        j = torch.searchsorted(self.cum, idx, right=True)
        return j, self.first[j] + idx - (self.cum[j] - self.counts[j])

    def gather(self, idx: torch.Tensor) -> PanelBatch:
        """Windows ``idx`` (B,) as a batch: one index op per tensor."""
        idx = torch.as_tensor(idx, device=self.cum.device).long()
        j, a = self.locate(idx)
        s = self.series[j]
        t, L = self.tensors, self.lookback
        return PanelBatch(x=self._xw[a], y=self._yw[a + L], hist=self._hw[a], futr=self._fw[a],
                          static=t.static[s], static_cat=t.static_cat[s], series=s,
                          origin=t.stamps[a + L - 1])

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Window i as ((L, 1), (H, 1)) views of the buffer: plain slicing, the reference path."""
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"window {i} out of range for {n} windows")
        _, a = self.locate(torch.tensor([i % n], device=self.cum.device))
        a = int(a)
        b = a + self.lookback
        return self.tensors.y[a:b], self.tensors.y[b : b + self.horizon]

    def index(self) -> tuple[np.ndarray, np.ndarray]:
        """(series index (n,), global start row (n,)) of every window, in order."""
        j, a = self.locate(torch.arange(len(self), device=self.cum.device))
        return self.series[j].cpu().numpy(), a.cpu().numpy()

    # Batching is WindowSet's (it needs only len() and gather()): here each batch is a PanelBatch.
    batches = WindowSet.batches
    num_batches = WindowSet.num_batches

    def to(self, device: torch.device | str) -> PanelWindows:
        """The same windows over the buffers moved once to ``device``."""
        return PanelWindows(self.tensors.to(device), self.series.cpu().numpy(), self.first.cpu().numpy(),
                            (self.first + self.counts + self.lookback + self.horizon - 1).cpu().numpy(),
                            self.lookback, self.horizon)

    def held_bytes(self) -> int:
        """Bytes of the distinct storages these windows reference (views share their base's)."""
        seen = {}
        for t in [*vars(self).values(), *vars(self.tensors).values()]:
            if isinstance(t, torch.Tensor):
                st = t.untyped_storage()
                seen[st.data_ptr()] = st.nbytes()
        return sum(seen.values())

    def __repr__(self) -> str:
        t = self.tensors
        return (f"PanelWindows({len(self)} windows over {len(self.series)} series, L={self.lookback}, "
                f"H={self.horizon}, hist={t.hist.shape[1]}, futr={t.futr.shape[1]}, "
                f"static={t.static.shape[1]}+{t.static_cat.shape[1]} cat)")
