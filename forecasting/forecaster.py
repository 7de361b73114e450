"""The Forecaster: the estimator users hold (fit / predict / evaluate / save / load).

Everything it does goes through the layers below it: ``tsmix.datasets.prepare`` for data,
``build_model`` for the network, ``trainer.train`` for optimisation. A failed ``fit`` (bad
data, NaN loss, a callback raising) leaves the estimator as it was before the call.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import torch
from torch import nn

from tsmix.engine import from_env, rank_device
from tsmix.errors import TsmixError
from tsmix.forecasting import trainer as tr
from tsmix.forecasting.config import ForecasterConfig, check_fields
from tsmix.forecasting.data import Reading, history_of, prepared_for, source_of
from tsmix.forecasting.final_fit import refit_windows, scaled_on_all_rows, train_fixed_epochs
from tsmix.forecasting.fitted import (
    Fitted,
    calibrate,
    check_device,
    device_windows,
    evaluate_split,
    head_output,
    input_scale,
    unscale,
)
from tsmix.forecasting.panel_fit import PanelForecaster, PanelOptions, is_long_frame
from tsmix.forecasting.panel_fit_io import is_panel_run
from tsmix.forecasting.plotting import plot_last_window, plot_panel_forecast
from tsmix.forecasting.probabilistic import (
    PointHead,
    check_levels,
    check_quantiles,
    forecast_bands,
    forecast_quantiles,
    wide_frame,
)
from tsmix.forecasting.production import (
    check_held_out,
    check_production_config,
    check_wide_options,
    checkpoint_dirs,
    is_production,
    plot_future,
    production_metrics,
    refit_config,
    small_val_error,
    transfer_calibration,
)
from tsmix.forecasting.registry import build_model, count_params
from tsmix.forecasting.rundir import check_out_dir, load_run, save_run
from tsmix.registry import mixer_options, mixer_spec

EpochCallback = Callable[[int, dict], None]  # cb(epoch (1-based), logs)


_PANEL_KEYS = frozenset(f.name for f in dataclasses.fields(PanelOptions))


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


class Forecaster:
    """Forecast a multivariate series with PatchTST / iTransformer encoders over any mixer, or DLinear.

    >>> f = Forecaster("patchtst", mixer="softmax", lookback=336, horizon=96, epochs=3)
    >>> f.fit("ETTh1").evaluate()["mse"]  # doctest: +SKIP
    """

    def __init__(
        self, model: str = "patchtst", mixer: str = "softmax", lookback: int = 336, horizon: int = 96,
        **hyperparameters: Any,
    ) -> None:
        # Panel options (id_col, hist_exog, ...) only matter for long-format data (the panel path).
        panel = {k: hyperparameters.pop(k) for k in list(hyperparameters) if k in _PANEL_KEYS}
        check_fields(hyperparameters)
        self._config = ForecasterConfig(
            model=model, mixer=mixer, lookback=lookback, horizon=horizon, **hyperparameters
        )
        self._panel_options = PanelOptions(**panel)
        self._panel: PanelForecaster | None = None  # set when fitted on a long-format panel
        self._fitted: Fitted | None = None

    # ----------------------------------------------------------------- sklearn-style params
    @property
    def config(self) -> ForecasterConfig:
        return self._config

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The config fields, plus the panel options set away from their defaults (production,
        id_col, hist_exog, ...), so ``Forecaster(**f.get_params())`` and sklearn's clone keep them."""
        # the stored objects themselves (no copies): sklearn's clone checks identity
        params = {f.name: getattr(self._config, f.name) for f in dataclasses.fields(self._config)}
        for f in dataclasses.fields(self._panel_options):
            value = getattr(self._panel_options, f.name)
            if value != getattr(PanelOptions, f.name, None):
                params[f.name] = value
        return params

    def set_params(self, **params: Any) -> Forecaster:
        """Change hyper-parameters or panel options; a fitted model no longer matching them is dropped."""
        panel = {k: params.pop(k) for k in list(params) if k in _PANEL_KEYS}
        check_fields(params)
        self._config = dataclasses.replace(self._config, **params)
        if panel:
            self._panel_options = dataclasses.replace(self._panel_options, **panel)
        self._fitted = self._panel = None
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
        mixer = self._config.model_spec().uses_mixer  # a model without a mixer does not name one
        diff = [f"{k}={v!r}" for k, v in self.get_params().items()
                if (k == "model" or (k == "mixer" and mixer) or v != getattr(default, k))
                and (mixer or k not in ("mixer", "mixer_options"))]
        return f"Forecaster({', '.join(diff)})"

    # ----------------------------------------------------------------- fitted attributes
    def _require_fitted(self) -> Fitted:
        if self._fitted is None:
            raise TsmixError(
                "this Forecaster is not fitted yet: call fit(data) or Forecaster.load(dir) first"
            )
        return self._fitted

    @property
    def is_fitted(self) -> bool:
        return self._fitted is not None or self._panel is not None

    @property
    def panel_(self) -> PanelForecaster | None:
        """The panel estimator behind a long-format fit (None for wide data)."""
        return self._panel

    @property
    def history(self) -> list[dict]:
        if self._panel is not None:
            return self._panel.history
        return list(self._require_fitted().history)

    @property
    def metrics_(self) -> dict:
        if self._panel is not None:
            return self._panel.metrics_
        f = self._require_fitted()
        if f.metrics_error is not None:
            raise TsmixError(f.metrics_error)
        return dict(f.metrics)

    @property
    def n_params(self) -> int:
        return count_params(self._require_fitted().model)

    @property
    def model_(self) -> nn.Module:
        return self._require_fitted().model

    # ----------------------------------------------------------------- fit
    def fit(
        self, data: Any, *, data_dir: str | Path | None = None, date_col: str | None = None,
        callbacks: Sequence[EpochCallback] = (), evaluate_test: bool = True,
        out: str | Path | None = None, checkpoint_dir: str | Path | None = None, resume: bool = False,
        static_df: Any = None,
    ) -> Forecaster:
        """Train on ``data`` (benchmark name, csv/parquet path, pandas or polars frame).

        ``callbacks``: each is called after every epoch as ``cb(epoch, logs)`` (epoch 1-based,
        logs with train_loss, val_loss, lr, seconds); an exception raised there propagates.
        ``evaluate_test=False`` leaves the test split unscored (tuning trials select on validation
        only; ``evaluate("test")`` scores it later). ``out``: the run directory :meth:`save` will
        write, checked before anything is read or trained (an unwritable place fails at once).
        With ``train_on="train+val"`` (config) the model trains on the training and validation
        windows for exactly ``epochs`` epochs; ``val_mse`` is then NaN (nothing is held out).

        ``production=True`` or ``test_size=0`` (constructor): first the ordinary fit picks the epoch
        count on validation, then the model kept is refit on every window up to the last row for that
        many epochs (``train_on="all"``, scaler fit on every row); no test is scored (see
        :mod:`tsmix.forecasting.production`).

        ``checkpoint_dir``: write a checkpoint (``last.safetensors``) there after every epoch; with
        ``resume`` continue from it (same config and data, else a TsmixError) and end exactly as an
        uninterrupted fit. Under ``torchrun`` each process trains its share of every batch (DDP) on
        its own device; only rank 0 writes checkpoints and run directories. A point model (loss
        mse/mae) is then calibrated on the validation residuals (split conformal) for intervals.
        """
        if self._is_panel(data):
            self._panel = PanelForecaster.from_config(self._config, self._panel_options).fit(
                data, static_df, callbacks=callbacks, out=out, checkpoint_dir=checkpoint_dir, resume=resume)
            self._fitted = None
            return self
        self._panel = None
        production = check_wide_options(self._panel_options, static_df)
        from tsmix.datasets import prepare

        cfg = self._config.resolved()
        check_mixer(cfg)  # a bad mixer name/option fails before the data is read
        check_calendar(cfg)
        if production:
            check_production_config(cfg)
        device = rank_device(check_device(cfg.device))  # torchrun on CUDA: this rank's GPU
        if out is not None:
            check_out_dir(out)
        if cfg.threads is not None:
            torch.set_num_threads(cfg.threads)
        try:
            prepared = prepare(data, cfg.lookback, cfg.horizon, cfg.features, data_dir=data_dir,
                               date_col=date_col, target=cfg.target, fill=cfg.fill,
                               date_format=cfg.date_format, date_unit=cfg.date_unit, calendar=cfg.calendar)
        except TsmixError as exc:
            if production:
                raise small_val_error(exc) from None
            raise
        score_test = evaluate_test and not production and cfg.train_on != "all"
        if score_test and cfg.eval_protocol == "paper" and len(prepared.test) < cfg.test_batch_size:
            raise TsmixError(
                f"eval_protocol='paper' keeps only full test batches of {cfg.test_batch_size}, but the "
                f"test split has {len(prepared.test)} windows; use eval_protocol='fair' or a smaller "
                "test_batch_size"
            )
        if cfg.train_on == "all":
            prepared = scaled_on_all_rows(prepared)
        ck_select, ck_refit = checkpoint_dirs(checkpoint_dir) if production else (checkpoint_dir, None)
        fitted, result, n_windows = _fit_once(cfg, prepared, data, data_dir, date_col, device,
                                              callbacks, ck_select, resume)
        chosen, val_mse = result, _val_mse(fitted, prepared, result.best_val)
        if production:  # the shipped model has seen the latest rows: refit on all, best_epoch epochs
            calibration, old_scaler, selection_windows = fitted.calibration, prepared.scaler, n_windows
            prepared = scaled_on_all_rows(prepared)
            fitted, result, n_windows = _fit_once(refit_config(cfg, chosen.best_epoch), prepared, data,
                                                  data_dir, date_col, device, callbacks, ck_refit, resume)
            fitted.calibration = transfer_calibration(calibration, old_scaler, prepared.scaler,
                                                      fitted.out_idx)
        n_epochs = len(result.history)
        test = evaluate_split(fitted, prepared, "test", cfg.eval_protocol) if score_test else {}
        metrics = {
            "mse": test.get("mse"), "mae": test.get("mae"),
            # validation rows trained on (train+val, all): no held-out score
            "val_mse": val_mse, "production": False,
            "epochs": n_epochs, "best_epoch": result.best_epoch, "train_seconds": result.train_seconds,
            "seconds_per_epoch": result.train_seconds / max(n_epochs, 1), "fit_seconds": result.seconds,
            # CPU time earlier processes spent on this fit before a resume (their checkpoints carry it)
            "resumed_cpu_seconds": result.resumed_cpu_seconds + (chosen.resumed_cpu_seconds
                                                                 if result is not chosen else 0.0),
            "params": count_params(fitted.model), "protocol": cfg.eval_protocol,
            "test_windows": test.get("windows"), "device": str(device),
            "per_channel": test.get("per_channel"), "train_on": fitted.config.train_on,
            "train_windows": n_windows, "calendar": list(fitted.marks),
        }
        if production:
            metrics.update(production_metrics(chosen, val_mse, selection_windows))
        if not isinstance(fitted.head, PointHead):  # early stopping watched the head's own loss
            metrics.update(loss=cfg.loss, val_loss=chosen.best_val)
        if "probabilistic" in test:
            metrics["probabilistic"] = test["probabilistic"]
        test_keys = ("mse", "mae", "test_windows", "per_channel", "probabilistic")
        keep_all = score_test or fitted.config.train_on == "all"  # nothing held out: say mse None
        fitted.metrics = {k: v for k, v in metrics.items() if keep_all or k not in test_keys}
        self._fitted = fitted
        return self

    # ----------------------------------------------------------------- evaluate
    def evaluate(self, split: str = "test", protocol: str | None = None, *, data: Any = None,
                 data_dir: str | Path | None = None, fill: str | None = None, date_format: str | None = None,
                 date_unit: str | None = None) -> dict[str, Any]:
        """MSE/MAE on the normalized scale, overall and per channel, over the split's windows.

        ``protocol``: ``fair`` every window; ``paper`` only full batches of ``test_batch_size``
        (the official loaders' drop_last). ``data``: evaluate on other data with the same
        columns (default: the fitted data, re-read from its source after ``load``); ``fill``,
        ``date_format``, ``date_unit`` read it (default: as at fit time).
        """
        if self._panel is not None:
            return self._panel.evaluate(split, df=data)
        f = self._require_fitted()
        protocol = protocol or f.config.eval_protocol
        if protocol not in ("fair", "paper"):
            raise TsmixError(f"protocol must be 'fair' or 'paper', got {protocol!r}")
        if split not in ("train", "val", "test"):
            raise TsmixError(f"split must be train, val or test, got {split!r}")
        check_held_out(f, split, data)
        reading = Reading.of(f, fill=fill, date_format=date_format, date_unit=date_unit)
        return evaluate_split(f, prepared_for(f, data, data_dir, reading), split, protocol)

    # ----------------------------------------------------------------- predict
    @torch.no_grad()
    def predict(self, df: Any = None, *, level: Sequence[float] | None = None,
                quantiles: Sequence[float] | None = None, h: int | None = None, fill: str | None = None,
                date_format: str | None = None, date_unit: str | None = None, futr_df: Any = None,
                static_df: Any = None) -> pd.DataFrame | pl.DataFrame:
        """The next ``horizon`` steps (or the first ``h``) after the end of ``df`` (default: the fitted data).

        Returns a frame of the input's type (pandas for None or a path) with the date column
        first, future timestamps at the fitted frequency (in the history's zone when its dates
        carry one), and values in original units. ``df`` must be sampled at the fitted frequency.
        ``level=[80, 95]`` adds ``<col>-lo-80``, ``<col>-hi-80``, ... per column: the head's own
        intervals, or a point model's split-conformal ones (``frame.attrs["interval_method"]``);
        ``quantiles=[0.1, 0.9]`` adds ``<col>-q0.1``, ... ``fill``, ``date_format``, ``date_unit``
        read ``df`` (default: as at fit time).
        """
        if self._panel is not None:
            return self._panel.predict(df, futr_df=futr_df, static_df=static_df, h=h, level=level,
                                       quantiles=quantiles)
        f = self._require_fitted()
        from tsmix.datasets import future_index

        steps = _steps(h, f.config.horizon)
        levels = None if level is None else check_levels(level)
        qs = None if quantiles is None else check_quantiles(quantiles)
        hist = history_of(f, df, Reading.of(f, fill=fill, date_format=date_format, date_unit=date_unit))
        window = np.asarray(hist.values, dtype=np.float32)
        from tsmix.datasets.dates import localize

        out = head_output(f, window, localize(hist.timestamps, hist.tz))  # scaled head output, one window
        head, method, bands, qvals = f.head, None, {}, {}
        scale = input_scale(f, window) if f.calibration is not None else None  # scaled conformal radii
        if levels is not None:
            method, raw = forecast_bands(head, out, levels, f.calibration, scale)
            bands = {lv: (unscale(f, lo)[:steps], unscale(f, hi)[:steps]) for lv, (lo, hi) in raw.items()}
        if qs is not None:
            raw_q = forecast_quantiles(head, out, qs, f.calibration, scale)
            qvals = {q: unscale(f, v)[:steps] for q, v in raw_q.items()}
        future = future_index(hist.timestamps[-1], f.freq, f.config.horizon, hist.tz)[:steps]
        frame = wide_frame(unscale(f, head.point(out))[:steps], future, f.out_columns, bands, qvals,
                           method=method, date_col=hist.date_col)
        return pl.from_pandas(frame) if isinstance(df, pl.DataFrame) else frame

    # ----------------------------------------------------------------- plots, diagnostics
    def plot_forecast(self, path: str | Path, split: str = "test", channel: str | None = None) -> Path:
        """PNG of the last window of ``split``: history, truth and forecast of one channel; for a
        production model (nothing held out) ``split="test"`` draws the forecast after the last row.
        A panel fit draws series ``channel`` (default: the first) and its forecast after its last row."""
        if self._panel is not None:
            return plot_panel_forecast(self._panel, path, channel)
        f = self._require_fitted()
        if is_production(f) and split == "test":
            return plot_future(f, path, channel)
        return plot_last_window(f, prepared_for(f, None, None), path, split, channel)

    def mixer_diagnostics(self) -> dict[str, float]:
        """Merged ``diagnostics()`` of every module exposing one, keys prefixed by module path."""
        out: dict[str, float] = {}
        model = self._panel.model_ if self._panel is not None else self._require_fitted().model
        for name, mod in getattr(model, "base", model).named_modules():  # paths inside the network
            if name and callable(getattr(mod, "diagnostics", None)):
                for k, v in mod.diagnostics().items():
                    out[f"{name}.{k}"] = float(v)
        return out

    # ----------------------------------------------------------------- save / load
    def save(self, path: str | Path) -> Path:
        """Write the run directory atomically (temporary sibling folder, then rename).

        ``path`` must be a new or empty folder, or an earlier run directory (replaced), in a writable
        place; ``fit(..., out=path)`` checks that before training. Under torchrun only rank 0 writes
        (the others return the same path).
        """
        if self._panel is not None:
            return self._panel.save(path)
        fitted = self._require_fitted()
        if not from_env().is_main:
            return Path(path).expanduser().resolve()
        return save_run(fitted, path, self.plot_forecast)

    @classmethod
    def load(cls, path: str | Path) -> Forecaster:
        """Read a run directory written by :meth:`save` or ``tsmix fit --out``."""
        if is_panel_run(path):
            panel = PanelForecaster.load(path)
            est = cls(**panel.get_params())
            est._panel = panel
            return est
        fitted = load_run(path)
        est = cls(**fitted.config.to_dict())
        est._fitted = fitted
        return est

    # ----------------------------------------------------------------- panels, backtests
    def _is_panel(self, data: Any) -> bool:
        """Long-format input (an ``id_col`` column in a frame or a csv/parquet file's header)."""
        id_col = self._panel_options.id_col
        if isinstance(data, (str, Path)):
            from tsmix.datasets.cli import file_columns

            return id_col in file_columns(str(data))
        return is_long_frame(data, id_col)

    def cross_validation(self, df: Any, **kwargs: Any) -> Any:
        """Rolling-origin backtest on ``df`` (long or wide); see ``backtest.cross_validation``."""
        from tsmix.forecasting.backtest import cross_validation

        est = PanelForecaster.from_config(self._config, self._panel_options) if self._is_panel(df) else self
        return cross_validation(est, df, **kwargs)


def _fit_once(cfg: ForecasterConfig, prepared: Any, data: Any, data_dir: str | Path | None,
              date_col: str | None, device: torch.device, callbacks: Sequence[EpochCallback],
              checkpoint_dir: str | Path | None, resume: bool) -> tuple[Fitted, Any, int]:
    """Seed, build and train one network on ``prepared`` as ``cfg`` says; (fitted, result, windows)."""
    seed_everything(cfg.seed)
    series, marks = prepared.series, len(prepared.mark_names)
    fitted = Fitted(
        model=build_model(cfg, int(prepared.train.x_channels) - marks, marks).to(device),
        config=cfg, device=device, columns=tuple(series.columns), target=series.target,
        target_idx=int(series.columns.index(series.target)), freq=series.freq,
        date_col=getattr(series, "date_col", None) or date_col or "date", scaler=prepared.scaler,
        context_values=np.ascontiguousarray(series.values[-cfg.lookback:], dtype=np.float32),
        context_ts=np.asarray(series.timestamps[-cfg.lookback:], dtype="datetime64[ns]"),
        source=source_of(data),
        data_dir=None if data_dir is None else str(Path(data_dir).expanduser().resolve()),
        history=[], best_epoch=0, metrics={}, prepared=prepared, tz=series.tz,
        marks=tuple(prepared.mark_names),
    )
    result, n_windows = _train(fitted, prepared, callbacks, checkpoint_dir, resume)
    fitted.history, fitted.best_epoch = result.history, result.best_epoch
    fitted.calibration = calibrate(fitted, prepared)
    return fitted, result, n_windows


def _train(fitted: Fitted, prepared: Any, callbacks: Sequence[EpochCallback],
           checkpoint_dir: str | Path | None, resume: bool) -> tuple[Any, int]:
    """Train ``fitted.model`` as its config says; (the trainer's result, training windows)."""
    cfg, device = fitted.config, fitted.device
    ck = dict(out_index=fitted.out_index, callbacks=callbacks, checkpoint_dir=checkpoint_dir, resume=resume)
    if cfg.train_on in ("train+val", "all"):
        windows = refit_windows(prepared, cfg.train_on)
        on_device = windows if device.type == "cpu" else windows.to(device)
        return train_fixed_epochs(fitted.model, on_device, cfg, device, **ck), len(windows)
    train_ws, val_ws = device_windows(prepared, "train", device), device_windows(prepared, "val", device)
    return tr.train(fitted.model, train_ws, val_ws, cfg, device, **ck), len(prepared.train)


def _val_mse(fitted: Fitted, prepared: Any, best_val: float) -> float:
    """Validation MSE of the kept weights: what early stopping saw for point heads; measured again
    for probabilistic heads (they stopped on their own loss); NaN when validation was trained on."""
    if fitted.config.train_on != "train":
        return float("nan")
    if isinstance(fitted.head, PointHead):
        return best_val
    val = device_windows(prepared, "val", fitted.device)
    return tr.window_errors(fitted.model, val, fitted.config.test_batch_size, fitted.device,
                            fitted.out_index).metrics(fitted.out_columns)["mse"]


def _steps(h: int | None, horizon: int) -> int:
    """How many forecast steps ``predict(h=...)`` returns: 1..horizon (None: all)."""
    if h is None:
        return horizon
    if isinstance(h, bool) or not isinstance(h, (int, np.integer)) or h < 1:
        raise TsmixError(f"h must be a positive number of steps, got {h!r}")
    if h > horizon:
        raise TsmixError(f"h={h} is longer than the {horizon} steps this model forecasts; ask for at most "
                         f"{horizon} or fit a model with horizon {h}")
    return int(h)


def check_mixer(cfg: ForecasterConfig) -> None:
    """The mixer exists (for every model); a model with a mixer gets one that takes these options and
    runs in the mode it needs; a model without one takes no mixer options."""
    spec = cfg.model_spec()
    mixer = mixer_spec(cfg.mixer)  # unknown name -> TsmixError listing the registered mixers
    if not spec.uses_mixer:
        if cfg.mixer_options:
            raise TsmixError(f"model {cfg.model!r} has no token mixer, so mixer options "
                             f"{sorted(cfg.mixer_options)} would do nothing; drop them (--mixer-option)")
        return
    mixer_options(cfg.mixer, **cfg.mixer_options)
    if spec.needs.causal_mixer and not mixer.supports_causal:
        raise TsmixError(f"model {cfg.model!r} needs a causal mixer but mixer {cfg.mixer!r} is bidirectional "
                         "only; pick a causal mixer")
    if not spec.needs.causal_mixer and not mixer.supports_bidirectional:
        raise TsmixError(f"model {cfg.model!r} sees the whole window but mixer {cfg.mixer!r} only exists in "
                         "causal form; pick a bidirectional mixer")


def check_calendar(cfg: ForecasterConfig) -> None:
    """``calendar=True`` on wide data feeds calendar features as extra input variates, which reach the
    forecasts only through a model that mixes across variates (its registration lists ``futr_exog``
    among the covariates it takes as variates)."""
    if cfg.calendar and "futr_exog" not in cfg.model_spec().needs.covariates:
        raise TsmixError(f"calendar=True adds the calendar features as extra input variates, but model "
                         f"{cfg.model!r} forecasts each variate from its own history, so they would never "
                         "reach a forecast; use a model that mixes variates (itransformer), or fit a "
                         "long-format panel, where calendar features join the future covariates")
