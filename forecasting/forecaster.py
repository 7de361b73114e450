"""The Forecaster: the estimator users hold (fit / predict / evaluate / save / load).

Everything it does goes through the layers below it: ``tsmix.datasets.prepare`` for data,
``build_model`` for the network, ``trainer.train`` for optimisation. A failed ``fit`` (bad
data, NaN loss, a callback raising) leaves the estimator as it was before the call.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import tempfile
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import torch
from torch import nn

from tsmix.errors import TsmixError
from tsmix.forecasting import trainer as tr
from tsmix.forecasting.config import ForecasterConfig, check_fields
from tsmix.forecasting.models import USES_MIXER, build_model, count_params
from tsmix.forecasting.plotting import plot_window
from tsmix.registry import mixer_options

FORMAT = "tsmix.forecaster"
FORMAT_VERSION = 1
WEIGHTS = "model.safetensors"
CONTEXT = "context.safetensors"


@dataclass
class _Fitted:
    """Everything a fitted forecaster knows besides its config (kept together so fit is atomic)."""

    model: nn.Module
    config: ForecasterConfig  # resolved
    device: torch.device
    columns: tuple[str, ...]  # value columns of the fitted data, in order
    target: str
    target_idx: int
    freq: str
    date_col: str
    scaler: Any  # tsmix.datasets.Scaler
    context_values: np.ndarray  # (L, C) float32 last lookback rows, original units
    context_ts: np.ndarray  # (L,) datetime64[ns]
    source: str | None  # benchmark name or file path to re-read the data; None for frames
    data_dir: str | None
    history: list[dict]
    best_epoch: int
    metrics: dict
    prepared: Any = None  # tsmix.datasets.Prepared while the data is at hand
    plot_from: Path | None = None  # an existing forecast.png (after load) to carry on save

    @property
    def in_idx(self) -> list[int]:
        """Input channels the model sees (S: the target only)."""
        return [self.target_idx] if self.config.features == "S" else list(range(len(self.columns)))

    @property
    def out_idx(self) -> list[int]:
        """Columns the forecast holds: all for M, the target for S and MS."""
        return list(range(len(self.columns))) if self.config.features == "M" else [self.target_idx]

    @property
    def out_index(self) -> int | None:
        """Model output channel to keep (MS) or None (the model's outputs are the forecast)."""
        return self.target_idx if self.config.features == "MS" else None

    @property
    def out_columns(self) -> list[str]:
        return [self.columns[i] for i in self.out_idx]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _source_of(data: Any) -> str | None:
    """How to find the data again after load: a benchmark name or an absolute file path."""
    if isinstance(data, (str, Path)):
        p = Path(data).expanduser()
        return str(p.resolve()) if p.is_file() else str(data)
    return None


class Forecaster:
    """Forecast a multivariate series with PatchTST / iTransformer encoders over any mixer, or DLinear.

    >>> f = Forecaster("patchtst", mixer="softmax", lookback=336, horizon=96, epochs=3)
    >>> f.fit("ETTh1").evaluate()["mse"]  # doctest: +SKIP
    """

    def __init__(
        self, model: str = "patchtst", mixer: str = "softmax", lookback: int = 336, horizon: int = 96,
        **hyperparameters: Any,
    ) -> None:
        check_fields(hyperparameters)
        self._config = ForecasterConfig(
            model=model, mixer=mixer, lookback=lookback, horizon=horizon, **hyperparameters
        )
        self._fitted: _Fitted | None = None

    # ----------------------------------------------------------------- sklearn-style params
    @property
    def config(self) -> ForecasterConfig:
        return self._config

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        # the stored objects themselves (no copies): sklearn's clone checks identity
        return {f.name: getattr(self._config, f.name) for f in dataclasses.fields(self._config)}

    def set_params(self, **params: Any) -> Forecaster:
        """Change hyper-parameters; a fitted model no longer matching them is dropped."""
        check_fields(params)
        self._config = dataclasses.replace(self._config, **params)
        self._fitted = None
        return self

    @classmethod
    def from_preset(cls, preset: str, model: str, dataset: str, horizon: int, **overrides: Any) -> Forecaster:
        """``Forecaster.from_preset("paper", "patchtst", "ETTh1", 96, mixer="fem-sm")``."""
        from tsmix.forecasting.presets import preset_params

        params = preset_params(preset, model, dataset, horizon)
        params.update(overrides)
        params.pop("model", None)
        params["horizon"] = params.get("horizon", horizon)
        return cls(model=model, **params)

    def __repr__(self) -> str:
        default = ForecasterConfig()
        diff = [f"{k}={v!r}" for k, v in self.get_params().items()
                if k in ("model", "mixer") or v != getattr(default, k)]
        return f"Forecaster({', '.join(diff)})"

    # ----------------------------------------------------------------- fitted attributes
    def _require_fitted(self) -> _Fitted:
        if self._fitted is None:
            raise TsmixError(
                "this Forecaster is not fitted yet: call fit(data) or Forecaster.load(dir) first"
            )
        return self._fitted

    @property
    def is_fitted(self) -> bool:
        return self._fitted is not None

    @property
    def history(self) -> list[dict]:
        return list(self._require_fitted().history)

    @property
    def metrics_(self) -> dict:
        return dict(self._require_fitted().metrics)

    @property
    def n_params(self) -> int:
        return count_params(self._require_fitted().model)

    @property
    def model_(self) -> nn.Module:
        return self._require_fitted().model

    # ----------------------------------------------------------------- fit
    def fit(
        self, data: Any, *, data_dir: str | Path | None = None, date_col: str | None = None,
        callbacks: Sequence[Callable[[int, dict], None]] = (),
    ) -> Forecaster:
        """Train on ``data`` (benchmark name, csv/parquet path, pandas or polars frame).

        ``callbacks``: each is called after every epoch as ``cb(epoch, logs)`` (epoch 1-based,
        logs with train_loss, val_loss, lr, seconds); an exception raised there propagates.
        """
        from tsmix.datasets import prepare

        cfg = self._config.resolved()
        if cfg.model in USES_MIXER:  # a bad mixer name/option fails before the data is read
            mixer_options(cfg.mixer, **cfg.mixer_options)
        if cfg.threads is not None:
            torch.set_num_threads(cfg.threads)
        prepared = prepare(data, cfg.lookback, cfg.horizon, cfg.features, data_dir=data_dir,
                           date_col=date_col, target=cfg.target)
        if cfg.eval_protocol == "paper" and len(prepared.test) < cfg.test_batch_size:
            raise TsmixError(
                f"eval_protocol='paper' keeps only full test batches of {cfg.test_batch_size}, but the "
                f"test split has {len(prepared.test)} windows; use eval_protocol='fair' or a smaller "
                "test_batch_size"
            )
        device = tr.resolve_device(cfg.device)
        seed_everything(cfg.seed)
        series = prepared.series
        fitted = _Fitted(
            model=build_model(cfg, int(prepared.train.x_channels)).to(device),
            config=cfg, device=device, columns=tuple(series.columns), target=series.target,
            target_idx=int(series.columns.index(series.target)), freq=series.freq,
            date_col=getattr(series, "date_col", None) or date_col or "date", scaler=prepared.scaler,
            context_values=np.ascontiguousarray(series.values[-cfg.lookback:], dtype=np.float32),
            context_ts=np.asarray(series.timestamps[-cfg.lookback:], dtype="datetime64[ns]"),
            source=_source_of(data),
            data_dir=None if data_dir is None else str(Path(data_dir).expanduser().resolve()),
            history=[], best_epoch=0, metrics={}, prepared=prepared,
        )
        train_ws, val_ws = _windows(prepared, "train", device), _windows(prepared, "val", device)
        result = tr.train(fitted.model, train_ws, val_ws, cfg, device, out_index=fitted.out_index,
                          callbacks=callbacks)
        fitted.history, fitted.best_epoch = result.history, result.best_epoch
        test = _evaluate(fitted, prepared, "test", cfg.eval_protocol)
        n_epochs = len(result.history)
        fitted.metrics = {
            "mse": test["mse"], "mae": test["mae"], "val_mse": result.best_val, "epochs": n_epochs,
            "best_epoch": result.best_epoch, "train_seconds": result.train_seconds,
            "seconds_per_epoch": result.train_seconds / max(n_epochs, 1), "fit_seconds": result.seconds,
            "params": count_params(fitted.model), "protocol": cfg.eval_protocol,
            "test_windows": test["windows"], "device": str(device), "per_channel": test["per_channel"],
        }
        self._fitted = fitted
        return self

    # ----------------------------------------------------------------- evaluate
    def evaluate(self, split: str = "test", protocol: str | None = None, *, data: Any = None,
                 data_dir: str | Path | None = None) -> dict[str, Any]:
        """MSE/MAE on the normalized scale, overall and per channel, over the split's windows.

        ``protocol``: ``fair`` every window; ``paper`` only full batches of ``test_batch_size``
        (the official loaders' drop_last). ``data``: evaluate on other data with the same
        columns (default: the fitted data, re-read from its source after ``load``).
        """
        f = self._require_fitted()
        protocol = protocol or f.config.eval_protocol
        if protocol not in ("fair", "paper"):
            raise TsmixError(f"protocol must be 'fair' or 'paper', got {protocol!r}")
        if split not in ("train", "val", "test"):
            raise TsmixError(f"split must be train, val or test, got {split!r}")
        prepared = self._prepared_for(f, data, data_dir)
        return _evaluate(f, prepared, split, protocol)

    def _prepared_for(self, f: _Fitted, data: Any, data_dir: str | Path | None) -> Any:
        from tsmix.datasets import prepare

        if data is None and f.prepared is not None:
            return f.prepared
        refit_source = data is None
        if refit_source:
            if f.source is None:
                raise TsmixError(
                    "this forecaster was fitted on an in-memory frame, which is not saved; "
                    "pass the data: evaluate(data=frame)"
                )
            data = f.source
            data_dir = data_dir if data_dir is not None else f.data_dir
        cfg = f.config
        prepared = prepare(data, cfg.lookback, cfg.horizon, cfg.features, data_dir=data_dir,
                           date_col=None if isinstance(data, (str, Path)) else f.date_col, target=f.target)
        _check_columns(tuple(prepared.series.columns), f.columns)
        if refit_source:
            f.prepared = prepared  # cache the re-read fitted data
        return prepared

    # ----------------------------------------------------------------- predict
    @torch.no_grad()
    def predict(self, df: Any = None) -> pd.DataFrame | pl.DataFrame:
        """The next ``horizon`` steps after the end of ``df`` (default: the fitted data).

        Returns a frame of the input's type (pandas for None or a path) with the date column
        first, future timestamps at the data's frequency, and values in original units.
        """
        from tsmix.datasets import load

        f = self._require_fitted()
        cfg = f.config
        as_polars = isinstance(df, pl.DataFrame)
        if df is None:
            values, ts, date_col = f.context_values, f.context_ts, f.date_col
        else:
            if not isinstance(df, (pd.DataFrame, pl.DataFrame, str, Path)):
                raise TsmixError(
                    f"predict takes a pandas/polars frame or a file path, got {type(df).__name__}"
                )
            series = load(df, target=f.target)
            _check_columns(tuple(series.columns), f.columns)
            if series.n_rows < cfg.lookback:
                raise TsmixError(
                    f"history too short: {series.n_rows} rows but the model needs lookback={cfg.lookback} "
                    "rows; pass a longer frame"
                )
            values, ts = series.values[-cfg.lookback:], series.timestamps[-cfg.lookback:]
            date_col = getattr(series, "date_col", f.date_col)
        forecast = self._forecast_window(f, np.asarray(values, dtype=np.float32))  # (H, C_out)
        future = future_timestamps(ts[-1], f.freq, cfg.horizon)
        out = pd.DataFrame(forecast.astype(np.float64), columns=f.out_columns)
        out.insert(0, date_col, future)
        return pl.from_pandas(out) if as_polars else out

    @torch.no_grad()
    def _forecast_window(self, f: _Fitted, raw: np.ndarray) -> np.ndarray:
        """(L, C) original units -> (H, C_out) original units."""
        mean, scale = _scaler_arrays(f.scaler, len(f.columns))
        x = (raw.astype(np.float64) - mean) / scale
        xt = torch.as_tensor(x[:, f.in_idx], dtype=torch.float32, device=f.device).unsqueeze(0)
        f.model.eval()
        y = tr.select_output(f.model(xt), f.out_index)[0].double().cpu().numpy()  # (H, C_out)
        return y * scale[f.out_idx] + mean[f.out_idx]

    # ----------------------------------------------------------------- plots, diagnostics
    def plot_forecast(self, path: str | Path, split: str = "test", channel: str | None = None) -> Path:
        """PNG of the last window of ``split``: history, truth and forecast of one channel."""
        f = self._require_fitted()
        prepared = self._prepared_for(f, None, None)
        channel = channel or (f.target if f.target in f.out_columns else f.out_columns[0])
        if channel not in f.out_columns:
            raise TsmixError(f"channel {channel!r} is not forecast; choose one of {f.out_columns}")
        a, b = prepared.borders[split]
        L, H = f.config.lookback, f.config.horizon
        raw, ts = prepared.series.values, prepared.series.timestamps
        s = b - L - H  # the last window of the split
        pred = self._forecast_window(f, raw[s : s + L])[:, f.out_columns.index(channel)]
        c = f.columns.index(channel)
        return plot_window(
            path, ts[s : s + L], raw[s : s + L, c], ts[s + L : s + L + H], raw[s + L : s + L + H, c], pred,
            title=f"{prepared.series.name} {split}: {f.config.model}/{f.config.mixer} "
                  f"L={L} H={H}, channel {channel}",
            ylabel=channel,
        )

    def mixer_diagnostics(self) -> dict[str, float]:
        """Merged ``diagnostics()`` of every module exposing one, keys prefixed by module path."""
        out: dict[str, float] = {}
        for name, mod in self._require_fitted().model.named_modules():
            if name and callable(getattr(mod, "diagnostics", None)):
                for k, v in mod.diagnostics().items():
                    out[f"{name}.{k}"] = float(v)
        return out

    # ----------------------------------------------------------------- save / load
    def save(self, path: str | Path) -> Path:
        """Write the run directory atomically (temporary sibling folder, then rename)."""
        from safetensors.torch import save_file

        f = self._require_fitted()
        path = Path(path).expanduser().resolve()
        foreign = path.exists() and (
            not path.is_dir() or (any(path.iterdir()) and not (path / "config.json").exists())
        )
        if foreign:
            raise TsmixError(f"{path} exists and is not a tsmix run directory; choose another --out")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
        try:
            state = {k: v.detach().cpu().contiguous() for k, v in f.model.state_dict().items()}
            save_file(state, str(tmp / WEIGHTS))
            stamps = f.context_ts.astype("datetime64[ns]").astype(np.int64)
            save_file({"values": torch.from_numpy(np.ascontiguousarray(f.context_values)),
                       "timestamps": torch.from_numpy(stamps)}, str(tmp / CONTEXT))
            _write_json(tmp / "config.json", self._config_json(f))
            _write_json(tmp / "metrics.json", f.metrics)
            png = tmp / "forecast.png"
            if f.prepared is None and f.plot_from is not None and f.plot_from.is_file():
                shutil.copyfile(f.plot_from, png)  # loaded run: keep its plot, do not re-read data
            elif f.prepared is not None or f.source is not None:
                try:
                    self.plot_forecast(png)
                except TsmixError:
                    if f.prepared is not None:
                        raise  # data at hand: a plotting error is real
            if path.exists():
                old = path.with_name(f".{path.name}.old-{uuid.uuid4().hex[:8]}")
                os.replace(path, old)
                os.replace(tmp, path)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return path

    def _config_json(self, f: _Fitted) -> dict[str, Any]:
        from tsmix import __version__

        return {
            "format": FORMAT, "format_version": FORMAT_VERSION, "tsmix_version": __version__,
            "torch_version": torch.__version__,
            "config": f.config.to_dict(),
            "data": {"source": f.source, "data_dir": f.data_dir, "columns": list(f.columns),
                     "target": f.target, "target_idx": f.target_idx, "freq": f.freq,
                     "date_col": f.date_col, "channels_in": len(f.in_idx), "out_columns": f.out_columns},
            "scaler": _jsonable(f.scaler.to_dict()),
            "training": {"history": f.history, "best_epoch": f.best_epoch},
        }

    @classmethod
    def load(cls, path: str | Path) -> Forecaster:
        """Read a run directory written by :meth:`save` or ``tsmix fit --out``."""
        from safetensors.torch import load_file

        from tsmix.datasets import Scaler

        path = Path(path).expanduser()
        cfg_file = path / "config.json"
        if not cfg_file.is_file():
            raise TsmixError(f"{path} is not a tsmix run directory (no config.json)")
        meta = json.loads(cfg_file.read_text())
        if meta.get("format") != FORMAT:
            raise TsmixError(f"{cfg_file} is not a tsmix forecaster config (format {meta.get('format')!r})")
        cfg = ForecasterConfig.from_dict(meta["config"])
        data = meta["data"]
        device = tr.resolve_device(cfg.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            device = torch.device("cpu")
        model = build_model(cfg, int(data["channels_in"]))
        if (path / WEIGHTS).is_file():
            state = load_file(str(path / WEIGHTS))
        elif (path / "model.pt").is_file():
            state = torch.load(path / "model.pt", map_location="cpu", weights_only=True)
        else:
            raise TsmixError(f"no weights in {path}: expected {WEIGHTS} or model.pt")
        model.load_state_dict(state)
        model.to(device).eval()
        ctx = load_file(str(path / CONTEXT))
        metrics_file = path / "metrics.json"
        training = meta.get("training", {})
        est = cls(**cfg.to_dict())
        est._fitted = _Fitted(
            model=model, config=cfg, device=device, columns=tuple(data["columns"]), target=data["target"],
            target_idx=int(data["target_idx"]), freq=data["freq"], date_col=data["date_col"],
            scaler=Scaler.from_dict(meta["scaler"]), context_values=ctx["values"].numpy(),
            context_ts=ctx["timestamps"].numpy().astype("datetime64[ns]"), source=data["source"],
            data_dir=data["data_dir"], history=training.get("history", []),
            best_epoch=int(training.get("best_epoch", 0)),
            metrics=json.loads(metrics_file.read_text()) if metrics_file.is_file() else {},
            plot_from=(path / "forecast.png") if (path / "forecast.png").is_file() else None,
        )
        return est


# --------------------------------------------------------------------- helpers
def _windows(prepared: Any, split: str, device: torch.device) -> Any:
    """The split's WindowSet, rebuilt over a device copy of the data off-CPU."""
    ws = getattr(prepared, split)
    return ws if device.type == "cpu" else ws.to(device)


def _evaluate(f: _Fitted, prepared: Any, split: str, protocol: str) -> dict[str, Any]:
    errs = tr.window_errors(f.model, _windows(prepared, split, f.device), f.config.test_batch_size,
                            f.device, f.out_index, drop_last=(protocol == "paper"))
    out = errs.metrics(f.out_columns)
    out.update(split=split, protocol=protocol)
    return out


def _check_columns(got: tuple[str, ...], want: tuple[str, ...]) -> None:
    if got == want:
        return
    missing = [c for c in want if c not in got]
    extra = [c for c in got if c not in want]
    detail = []
    if missing:
        detail.append(f"missing {missing}")
    if extra:
        detail.append(f"unexpected {extra}")
    if not detail:
        detail.append(f"order {list(got)}")
    raise TsmixError(
        f"the frame's columns differ from the fitted ones ({'; '.join(detail)}); "
        f"pass the columns {list(want)} in this order"
    )


def _scaler_arrays(scaler: Any, channels: int) -> tuple[np.ndarray, np.ndarray]:
    mean = np.asarray(scaler.mean_, dtype=np.float64).reshape(-1)
    scale = np.asarray(scaler.scale_, dtype=np.float64).reshape(-1)
    if mean.shape[0] != channels:
        raise TsmixError(f"scaler has {mean.shape[0]} channels, data {channels}: refit the forecaster")
    return mean, scale


def future_timestamps(last: Any, freq: str, horizon: int) -> pd.DatetimeIndex:
    """The ``horizon`` timestamps after ``last`` at ``freq``."""
    return pd.date_range(start=pd.Timestamp(last), periods=horizon + 1, freq=freq)[1:]


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(_jsonable(obj), indent=2, sort_keys=False) + "\n")
