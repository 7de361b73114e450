"""Ensembles: the (weighted) mean of several forecasters' point forecasts.

Members may differ in model, mixer, seed and lookback; they must forecast the same thing (horizon,
features, target) from the same data. Every member is scored on its own windows of a split; the
targets of those windows are the same rows whatever the lookback (the split borders are set by
the target rows, as in the standard LTSF splits), which :meth:`Ensemble.evaluate` checks before it
averages. All members fit their scaler on the same training rows, so the mean of their scaled
forecasts is the scaled mean forecast and the metrics stay on the usual normalized scale.

    >>> ens = Ensemble([Forecaster(model="patchtst", mixer="softmax"), Forecaster(model="rlinear")])
    >>> ens.fit("ETTh1").evaluate("test")["mse"]
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from tsmix.errors import TsmixError
from tsmix.forecasting import trainer as tr
from tsmix.forecasting.data import prepared_for
from tsmix.forecasting.fitted import Fitted, device_windows, scaler_arrays
from tsmix.forecasting.forecaster import Forecaster
from tsmix.forecasting.rundir_files import atomic_dir

MANIFEST = "ensemble.json"
_SHARED = ("horizon", "features", "target")  # what every member must forecast alike


def _check_weights(weights: Sequence[float] | None, n: int) -> np.ndarray:
    if weights is None:
        return np.full(n, 1.0 / n)
    w = np.asarray(list(weights), dtype=np.float64)
    if w.shape != (n,) or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise TsmixError(f"weights must be {n} finite non-negative numbers with a positive sum, got "
                         f"{list(weights)}")
    return w / w.sum()


class Ensemble:
    """Mean forecast of ``members`` (Forecasters, fitted or not), optionally weighted."""

    def __init__(self, members: Sequence[Forecaster], weights: Sequence[float] | None = None) -> None:
        members = list(members)
        if len(members) < 2:
            raise TsmixError(f"an ensemble needs at least 2 members, got {len(members)}")
        bad = [type(m).__name__ for m in members if not isinstance(m, Forecaster)]
        if bad:
            raise TsmixError(f"ensemble members must be tsmix Forecasters, got {', '.join(bad)}")
        self.members = members
        self.weights = _check_weights(weights, len(members))
        self._check_alike()

    def _check_alike(self) -> None:
        first = self.members[0].config.resolved()
        for k, m in enumerate(self.members[1:], start=1):
            cfg = m.config.resolved()
            for name in _SHARED:
                if getattr(cfg, name) != getattr(first, name):
                    raise TsmixError(f"ensemble member {k} has {name}={getattr(cfg, name)!r} but member 0 "
                                     f"has {getattr(first, name)!r}: every member must forecast alike")

    def __repr__(self) -> str:
        parts = [f"{m.config.model}/{m.config.mixer or '-'}/L={m.config.lookback}/seed={m.config.seed}"
                 for m in self.members]
        return f"Ensemble({', '.join(parts)}; weights={np.round(self.weights, 3).tolist()})"

    # ----------------------------------------------------------------- fit
    def fit(self, data: Any, *, data_dir: str | Path | None = None, **fit_kwargs: Any) -> Ensemble:
        """Fit every member on ``data`` (one after the other, each with its own config and seed)."""
        for m in self.members:
            m.fit(data, data_dir=data_dir, **fit_kwargs)
        return self

    def _fitted(self) -> list[Fitted]:
        out = []
        for k, m in enumerate(self.members):
            if m.panel_ is not None:
                raise TsmixError(f"ensemble member {k} is a panel fit; ensembles take wide (one-series) fits")
            if not m.is_fitted:
                raise TsmixError(f"ensemble member {k} is not fitted: call Ensemble.fit(data) first")
            out.append(m._require_fitted())
        cols = out[0].out_columns
        mean0, scale0 = scaler_arrays(out[0].scaler, len(out[0].columns))
        for k, f in enumerate(out[1:], start=1):
            if f.out_columns != cols or f.columns != out[0].columns:
                raise TsmixError(f"ensemble member {k} was fitted on columns {list(f.columns)}, member 0 on "
                                 f"{list(out[0].columns)}: fit every member on the same data")
            mean, scale = scaler_arrays(f.scaler, len(f.columns))
            if not (np.allclose(mean, mean0) and np.allclose(scale, scale0)):
                raise TsmixError(f"ensemble member {k} scales its data differently from member 0 (other "
                                 "training rows): fit every member on the same data and splits")
        return out

    @property
    def columns(self) -> list[str]:
        """The forecast columns (every member's alike), in the order of the forecasts' last axis."""
        return list(self._fitted()[0].out_columns)

    # ----------------------------------------------------------------- evaluate
    @torch.no_grad()
    def split_forecasts(self, split: str = "test", *, data: Any = None,
                        data_dir: str | Path | None = None) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Every member's point forecast over every window of ``split`` (scaled, ``(W, H, C_out)``,
        window order) and the shared targets; the targets must agree across members. ``data``: other
        data with the same columns (default: the fitted data; a frame must be passed again after
        ``load``)."""
        if split not in ("train", "val", "test"):
            raise TsmixError(f"split must be train, val or test, got {split!r}")
        preds, target = [], None
        for k, f in enumerate(self._fitted()):
            windows = device_windows(prepared_for(f, data, data_dir), split, f.device)
            outs, ys = [], []

            def keep(out: torch.Tensor, y: torch.Tensor, _x: torch.Tensor, head=f.head, outs=outs,
                     ys=ys) -> None:
                outs.append(head.point(out).cpu())  # out: the head's channel-selected output
                ys.append(y.cpu())

            tr.window_errors(f.model, windows, f.config.test_batch_size, f.device, f.out_index, head=f.head,
                             on_batch=keep)  # the evaluation loop, keeping each batch's forecast
            y_all = torch.cat(ys)
            if target is None:
                target = y_all
            elif y_all.shape != target.shape or not torch.allclose(y_all, target, rtol=0, atol=1e-6):
                raise TsmixError(f"ensemble member {k} sees other {split} targets than member 0 "
                                 f"({tuple(y_all.shape)} vs {tuple(target.shape)} windows x horizon x "
                                 "channels): members must share data, horizon and splits")
            preds.append(torch.cat(outs))
        assert target is not None
        return preds, target

    def evaluate(self, split: str = "test", protocol: str = "fair", *, batch_size: int | None = None,
                 data: Any = None, data_dir: str | Path | None = None) -> dict[str, Any]:
        """MSE/MAE (normalized scale) of the mean forecast, overall and per channel, plus each member's
        own score. ``protocol="paper"`` keeps the first full batches of ``batch_size`` (default member
        0's ``test_batch_size``), as the official loaders' ``drop_last`` does. ``data``, ``data_dir``: as
        in :meth:`split_forecasts`."""
        if protocol not in ("fair", "paper"):  # before the members run, not after
            raise TsmixError(f"protocol must be 'fair' or 'paper', got {protocol!r}")
        preds, y = self.split_forecasts(split, data=data, data_dir=data_dir)
        return mean_scores(preds, y, self.columns, self.weights, split=split,
                           protocol=protocol,
                           batch_size=batch_size or self.members[0].config.resolved().test_batch_size)

    # ----------------------------------------------------------------- predict
    def predict(self, df: Any = None, **kwargs: Any) -> pd.DataFrame:
        """The weighted mean of the members' ``predict`` frames (original units, same future dates)."""
        if {"level", "quantiles"} & {k for k, v in kwargs.items() if v is not None}:
            raise TsmixError("ensembles give point forecasts only; ask a member for intervals or quantiles")
        self._fitted()
        frames = [m.predict(df, **kwargs) for m in self.members]
        frames = [f.to_pandas() if not isinstance(f, pd.DataFrame) else f for f in frames]
        first = frames[0]
        date_col = first.columns[0]
        for k, f in enumerate(frames[1:], start=1):
            if list(f.columns) != list(first.columns) or not f[date_col].equals(first[date_col]):
                raise TsmixError(f"ensemble member {k} forecasts other dates or columns than member 0")
        out = first.copy()
        values = [c for c in first.columns if c != date_col]
        out[values] = sum(wk * f[values].to_numpy(dtype=np.float64) for wk, f in zip(self.weights, frames))
        return out

    # ----------------------------------------------------------------- save / load
    def save(self, path: str | Path) -> Path:
        """Write ``path/member_<k>/`` run directories and ``ensemble.json``, atomically (a temporary
        sibling folder renamed into place; an existing ensemble folder there is replaced)."""
        self._fitted()
        path = Path(path).expanduser().resolve()
        if path.exists() and any(path.iterdir()) and not (path / MANIFEST).is_file():
            raise TsmixError(f"{path} exists and is not an ensemble folder; give a new or empty folder")
        with atomic_dir(path, marker=MANIFEST) as tmp:
            names = []
            for k, m in enumerate(self.members):
                m.save(tmp / f"member_{k}")
                names.append(f"member_{k}")
            manifest = {"members": names, "weights": self.weights.tolist()}
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2))
        return path

    @classmethod
    def load(cls, path: str | Path) -> Ensemble:
        """Read a folder written by :meth:`save`."""
        path = Path(path).expanduser()
        manifest = path / MANIFEST
        if not manifest.is_file():
            raise TsmixError(f"{path} holds no {MANIFEST}: not an ensemble folder written by Ensemble.save")
        spec = json.loads(manifest.read_text())
        return cls([Forecaster.load(path / name) for name in spec["members"]], spec["weights"])


def mean_scores(preds: Sequence[torch.Tensor], target: torch.Tensor, columns: Sequence[str],
                weights: Sequence[float] | None = None, *, split: str = "test", protocol: str = "fair",
                batch_size: int = 32) -> dict[str, Any]:
    """:meth:`Ensemble.evaluate` from forecasts already made (``preds``: each member's ``(W, H, C)``
    forecast of one split, as :meth:`Ensemble.split_forecasts` returns them with ``target``): the
    scores of their weighted mean and each member's own. Scoring many subsets of the same members
    (every ensemble of a pool) this way runs each member over the windows once, not once per subset."""
    if protocol not in ("fair", "paper"):
        raise TsmixError(f"protocol must be 'fair' or 'paper', got {protocol!r}")
    weights = _check_weights(weights, len(preds))
    n = target.shape[0]
    if protocol == "paper":
        n = (n // batch_size) * batch_size
        if n == 0:
            raise TsmixError(f"no complete batch of {batch_size} windows in the {split} split; "
                             "use protocol='fair'")
    y, preds = target[:n], [p[:n] for p in preds]
    step = max(1, _CHUNK_VALUES // max(1, y[0].numel()))
    channels = y.shape[-1]
    se, ae = (torch.zeros(channels, dtype=torch.float64, device=y.device) for _ in range(2))
    member_se = torch.zeros(len(preds), channels, dtype=torch.float64, device=y.device)
    for i in range(0, n, step):  # one pass over the windows, a chunk at a time
        yc = y[i:i + step].double()  # (w, H, C)
        mean = torch.zeros_like(yc)
        for k, (wk, p) in enumerate(zip(weights.tolist(), preds)):
            pc = p[i:i + step].to(torch.float64, copy=True)  # a copy: it is overwritten below
            mean.add_(pc, alpha=wk)
            member_se[k] += pc.sub_(yc).square_().sum(dim=(0, 1))
        err = mean.sub_(yc)
        ae += err.abs().sum(dim=(0, 1))
        se += err.square_().sum(dim=(0, 1))
    out = tr.WindowErrors(se, ae, n, y.shape[1]).metrics(columns)
    out.update(split=split, protocol=protocol, weights=weights.tolist(),
               members=[float(m.sum()) / (n * y.shape[1] * channels) for m in member_se])
    return out


# mean_scores reads the windows in chunks of about this many values: a whole split at a long
# horizon (ETTm1 test at H=720: 58M values) in float64 temporaries spends seconds per pass on
# fresh memory alone, which chunks that stay in cache avoid (one call there with 3 members, one
# CPU thread: 0.9 s instead of 27-41 s); the sums are the same up to rounding.
_CHUNK_VALUES = 1 << 18


__all__ = ["Ensemble", "mean_scores"]
