"""The panel estimator: fit / evaluate / predict / save / load on long-format panels with covariates.

``PanelForecaster`` takes the hyper-parameters of :class:`ForecasterConfig` (model, mixer, lookback,
horizon, epochs...) and the data roles of :class:`PanelOptions` (id/time/target columns, covariates,
split sizes, production). Data goes through ``tsmix.datasets`` (``Panel.from_long`` ->
``prepare_panel``), the network is the registered model wrapped by :mod:`covariate_models`, training
runs on the engine (:mod:`panel_fit_train`). A failed ``fit`` leaves the estimator as it was.

``loss`` (config) picks the output head (``mse``, ``mae``, ``quantile``, ``normal``, ``studentt``); a
point model is calibrated by per-series split conformal on its validation windows
(:mod:`panel_probabilistic`), so ``predict(level=[80, 95], quantiles=[...])`` works for every loss.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import torch

from tsmix.datasets.dates import localize
from tsmix.datasets.panel import Panel
from tsmix.datasets.panel_predict import build_predict_input
from tsmix.datasets.panel_prepare import PreparedPanel, prepare_panel
from tsmix.datasets.panel_split import PanelSplit
from tsmix.errors import TsmixError
from tsmix.forecasting.config import ForecasterConfig, check_fields
from tsmix.forecasting.covariate_models import CovariateLayout, build_covariate_model
from tsmix.forecasting.fitted import check_device
from tsmix.forecasting.panel_fit_train import model_head, panel_errors, train_panel, window_outputs
from tsmix.forecasting.panel_probabilistic import (
    PanelCalibration,
    PanelScores,
    calibrate_panel,
    check_interval_source,
    probabilistic_columns,
)
from tsmix.forecasting.probabilistic import PointHead
from tsmix.forecasting.registry import count_params
from tsmix.forecasting.rundir_files import check_out_dir

Frame = pd.DataFrame | pl.DataFrame


@dataclass(frozen=True)
class PanelOptions:
    """How a long frame is read and split (the data side; hyper-parameters live in ForecasterConfig)."""

    id_col: str = "unique_id"  # series id column (neuralforecast's name)
    time_col: str = "ds"  # timestamp column
    target_col: str = "y"  # forecast target
    hist_exog: tuple[str, ...] = ()  # past-only covariates: known up to each forecast origin
    futr_exog: tuple[str, ...] = ()  # future-known covariates: predict needs them over the horizon
    static_categorical: tuple[str, ...] | None = None  # static columns taken as categories (text always is)
    val_size: int | None = None  # validation steps at each series' end (before test); None = horizon
    test_size: int | None = None  # test steps at each series' end; None = horizon; 0 = no test, all data fits
    production: bool = False  # pick the epoch count on validation, then refit on every row that many epochs
    scale_exog: bool = True  # standardize hist/futr covariates per series on training rows, like the target
    drop_short: bool = False  # skip (with a warning) series too short for a window in each split

    def __post_init__(self) -> None:
        for name in ("hist_exog", "futr_exog", "static_categorical"):
            v = getattr(self, name)
            if isinstance(v, str):
                raise TsmixError(f"{name} must be a list of column names, got the string {v!r}: use [{v!r}]")
            if v is not None:
                object.__setattr__(self, name, tuple(v))
        for name in ("val_size", "test_size"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise TsmixError(f"{name} must be an int >= 0 or None, got {v!r}")
        if self.production and self.val_size == 0:
            raise TsmixError("production=True picks the epoch count on validation: set val_size >= horizon "
                             "(or None for one horizon)")
        if self.production and self.test_size:
            raise TsmixError(f"production=True refits on every row, so nothing is left to test: set "
                             f"test_size=0 (got {self.test_size}) or drop production")

    def sizes(self, horizon: int) -> tuple[int, int]:
        """(val_size, test_size) with the defaults filled; production has no test part."""
        val = horizon if self.val_size is None else self.val_size
        test = 0 if self.production else horizon if self.test_size is None else self.test_size
        return val, test


def is_long_frame(data: Any, id_col: str = "unique_id") -> bool:
    """True for a pandas/polars frame with an ``id_col`` column: the panel path, not the wide one."""
    return isinstance(data, (pd.DataFrame, pl.DataFrame)) and id_col in data.columns


def _tail_borders(panel: Panel, lookback: int, horizon: int, val: int | None) -> PanelSplit:
    """Per-series borders without a test part. ``val``: the last ``val`` steps validate (train before);
    None: every row trains (the production refit; val/test then name one unused window at the end)."""
    out = {}
    for sid, n in zip(panel.ids, panel.lengths.tolist()):
        end = n - (val or 0)
        tail = (max(end - lookback, 0), n) if val else (max(n - lookback - horizon, 0), n)
        out[sid] = {"train": (0, end), "val": tail, "test": tail}
    return PanelSplit(borders=out)


@dataclass
class PanelFitted:
    """A trained panel model and what forecasting and scoring need (swapped in whole by ``fit``)."""

    model: Any  # CovariateModel
    config: ForecasterConfig  # resolved
    options: PanelOptions
    layout: CovariateLayout
    schema: Any  # PanelSchema
    history_panel: Panel  # the last lookback rows of every series: predict() without data
    device: torch.device
    history: list[dict] = field(default_factory=list)  # engine log, one dict per epoch
    best_epoch: int = 0
    metrics: dict = field(default_factory=dict)
    prepared: PreparedPanel | None = None  # while the data is at hand (not after load)
    has_test: bool = True  # False: test_size=0 / production, nothing was held out
    calibration: PanelCalibration | None = None  # a point model's conformal scores; None: head intervals


class PanelForecaster:
    """Forecast many series at once (long ``unique_id, ds, y`` frames), with hist/futr/static covariates.

    >>> f = PanelForecaster("dlinear", lookback=48, horizon=12, futr_exog=["promo"], epochs=3)
    >>> f.fit(df).predict(futr_df=future)  # doctest: +SKIP
    """

    def __init__(self, model: str = "patchtst", mixer: str = "softmax", lookback: int = 336,
                 horizon: int = 96, **params: Any) -> None:
        opt_names = {f.name for f in dataclasses.fields(PanelOptions)}
        hyper = {k: v for k, v in params.items() if k not in opt_names}
        check_fields(hyper)
        self.config = ForecasterConfig(model=model, mixer=mixer, lookback=lookback, horizon=horizon, **hyper)
        self.options = PanelOptions(**{k: v for k, v in params.items() if k in opt_names})
        self._fitted: PanelFitted | None = None

    @classmethod
    def from_config(cls, config: ForecasterConfig, options: PanelOptions | None = None) -> PanelForecaster:
        """The panel estimator of a wide Forecaster's config (the dispatch of long input)."""
        return cls(**config.to_dict(), **dataclasses.asdict(options or PanelOptions()))

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {**self.config.to_dict(), **dataclasses.asdict(self.options)}

    def set_params(self, **params: Any) -> PanelForecaster:
        """New hyper-parameters / options; the fitted model is dropped."""
        new = type(self)(**{**self.get_params(), **params})
        self.config, self.options, self._fitted = new.config, new.options, None
        return self

    def __repr__(self) -> str:
        return f"PanelForecaster(model={self.config.model!r}, lookback={self.config.lookback}, " \
               f"horizon={self.config.horizon}, fitted={self._fitted is not None})"

    # ----------------------------------------------------------------- fitted state
    def _require_fitted(self) -> PanelFitted:
        if self._fitted is None:
            raise TsmixError("this PanelForecaster is not fitted yet: call fit(df) or "
                             "PanelForecaster.load(dir)")
        return self._fitted

    @property
    def is_fitted(self) -> bool:
        return self._fitted is not None

    @property
    def metrics_(self) -> dict:
        return dict(self._require_fitted().metrics)

    @property
    def history(self) -> list[dict]:
        return list(self._require_fitted().history)

    @property
    def model_(self) -> Any:
        return self._require_fitted().model

    @property
    def schema_(self) -> Any:
        return self._require_fitted().schema

    # ----------------------------------------------------------------- fit
    def read(self, df: Any, static_df: Frame | None = None) -> Panel:
        """``df`` (long frame or file) as a Panel with this estimator's column roles."""
        o = self.options
        return Panel.from_long(df, id_col=o.id_col, time_col=o.time_col, target_col=o.target_col,
                               hist_exog=o.hist_exog, futr_exog=o.futr_exog, static_df=static_df,
                               static_categorical=o.static_categorical, fill=self.config.fill)

    def prepare(self, panel: Panel, split: PanelSplit | None = None, *, all_rows: bool = False
                ) -> PreparedPanel:
        """Split and scale ``panel`` as a fit does: ``split``, else the options' sizes (a test part of
        ``test_size`` steps, or none); ``all_rows``: every row trains (the production refit)."""
        L, H, o = self.config.lookback, self.config.horizon, self.options
        val, test = o.sizes(H)
        if all_rows:
            split = _tail_borders(panel, L, H, None)
        elif split is None:
            split = PanelSplit(val_size=val, test_size=test) if test else \
                _tail_borders(panel, L, H, val or None)
        return prepare_panel(panel, L, H, split, drop_short=o.drop_short, calendar=self.config.calendar,
                             scale_exog=o.scale_exog)

    def fit(self, df: Any, static_df: Frame | None = None, *, split: PanelSplit | None = None,
            callbacks: Sequence[Any] = (), out: str | Path | None = None,
            checkpoint_dir: str | Path | None = None, resume: bool = False) -> PanelForecaster:
        """Train on a long frame/file; ``static_df``: one row per series (id + attributes).

        ``split`` (a :class:`PanelSplit`) overrides the options' val/test sizes (e.g. the LTSF borders).
        With ``production`` the epoch count is the best validation epoch of a first fit, and the model
        kept is a refit on every row (scaling fit on every row too) for that many epochs.
        ``callbacks``: ``cb(epoch, logs)`` after every epoch. ``out``: checked before training.
        ``checkpoint_dir``: write an engine checkpoint (``last.safetensors``) there after every epoch;
        with ``resume`` continue from it (same config, options and data, else a TsmixError) and end
        exactly as an uninterrupted fit. A production fit keeps its two fits in ``selection/`` and
        ``refit/`` below it.
        """
        from tsmix.forecasting.forecaster import check_mixer, seed_everything  # (forecaster imports us)
        from tsmix.forecasting.production import checkpoint_dirs

        if resume and checkpoint_dir is None:  # before any data is read or trained
            raise TsmixError("resume=True needs a checkpoint folder: pass checkpoint_dir")

        cfg = self.config.resolved()
        check_mixer(cfg)
        device = check_device(cfg.device)
        if out is not None:
            check_out_dir(out)
        if cfg.threads is not None:
            torch.set_num_threads(cfg.threads)
        o = self.options
        # the selection and refit fits differ in data and epochs: one folder each (as the wide path)
        ck_select, ck_refit = checkpoint_dirs(checkpoint_dir) if o.production else (checkpoint_dir, None)
        ident = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(o).items()}
        val, test = o.sizes(cfg.horizon)
        prep = self.prepare(self.read(df, static_df), split)
        has_test = not o.production and (split is not None or test > 0)
        validate = split is not None or val > 0  # val_size=0: no early stopping, every epoch runs
        seed_everything(cfg.seed)
        layout = CovariateLayout.of(prep.schema, cfg.model_spec())
        model = build_covariate_model(cfg, layout).to(device)
        result = train_panel(model, _on(prep.train, device), _on(prep.val, device) if validate else None, cfg,
                             device, callbacks, checkpoint_dir=ck_select, resume=resume, options=ident)
        selection = result
        calibration = _calibrate(model, prep, cfg.test_batch_size, device) if validate else None
        val_mse = selection.best_val if validate else float("nan")
        if validate and not isinstance(model_head(model), PointHead):  # early stopping watched the head loss
            val_ws = _on(prep.val, device)
            val_mse = panel_errors(model, val_ws, cfg.test_batch_size, prep.panel.n_series).metrics(
                prep.panel.ids)["mse"]
        if o.production:  # the shipped model has seen the latest rows: refit on all, best_epoch epochs
            sel_schema = prep.schema
            prep = self.prepare(prep.panel, all_rows=True)
            seed_everything(cfg.seed)
            model = build_covariate_model(cfg, layout).to(device)
            refit = dataclasses.replace(cfg, epochs=max(selection.best_epoch, 1))
            result = train_panel(model, _on(prep.train, device), None, refit, device, callbacks,
                                 checkpoint_dir=ck_refit, resume=resume, options=ident)
            if calibration is not None:  # the selection model's honest residuals, in the refit's scaled units
                calibration = calibration.rescaled(prep.schema.ids, sel_schema.y_scale, prep.schema.y_scale)
        fitted = PanelFitted(model=model, config=cfg, options=o, layout=layout, schema=prep.schema,
                             history_panel=_tail(prep.panel, cfg.lookback), device=device,
                             history=result.history, best_epoch=result.best_epoch, prepared=prep,
                             has_test=has_test, calibration=calibration)
        n_epochs = len(result.history)
        test = _score(fitted, prep, "test") if has_test else {}
        fitted.metrics = {
            "mse": test.get("mse"), "mae": test.get("mae"), "test_windows": test.get("windows"),
            "per_series": test.get("per_series"), "val_mse": val_mse,
            "epochs": n_epochs, "best_epoch": selection.best_epoch, "production": o.production,
            "train_seconds": result.train_seconds,
            "seconds_per_epoch": result.train_seconds / max(n_epochs, 1),
            "params": count_params(model), "series": prep.panel.n_series, "rows": prep.panel.n_rows,
            "train_windows": len(prep.train), "device": str(device),
        }
        if not isinstance(model_head(model), PointHead):
            fitted.metrics.update(loss=cfg.loss, val_loss=selection.best_val if validate else float("nan"))
        if "probabilistic" in test:
            fitted.metrics["probabilistic"] = test["probabilistic"]
        if calibration is not None:
            fitted.metrics["calibration"] = calibration.summary()
        self._fitted = fitted
        return self

    # ----------------------------------------------------------------- evaluate
    def evaluate(self, split: str = "test", df: Any = None, static_df: Frame | None = None, *,
                 panel_split: PanelSplit | None = None, level: Sequence[float] | None = None
                 ) -> dict[str, Any]:
        """MSE/MAE on the per-series scaled data over every window of ``split``, overall and per series.

        ``df``: other data (re-split and re-scaled as in fit, or by ``panel_split``); default the fitted
        data (not kept after load). A model with intervals (its head's, or a point model's conformal
        calibration) also gets ``probabilistic``: CRPS, mean pinball, coverage and mean width per level
        (``level``, default the config's or 80, 95; a quantile model: its trained pairs), scaled units.
        """
        f = self._require_fitted()
        prep = self._prepared(df, static_df, panel_split)
        if split == "test" and df is None and not f.has_test:
            raise TsmixError("this model was fitted with test_size=0 / production: no test windows were held "
                             "out; pass data to evaluate (df=...) or use split='val'")
        return _score(f, prep, split, level)

    def forecast_windows(self, split: str = "test", df: Any = None, static_df: Frame | None = None, *,
                         panel_split: PanelSplit | None = None, level: Sequence[float] | None = None,
                         quantiles: Sequence[float] | None = None) -> pd.DataFrame:
        """Every window of ``split`` as long ``id, ds, cutoff, y, y_hat`` rows, in original units;
        ``level`` / ``quantiles`` add ``y_hat-lo-80``, ... / ``y_hat-q0.1``, ... as :meth:`predict`."""
        f = self._require_fitted()
        head = model_head(f.model)
        check_interval_source(head, f.calibration, level, quantiles)
        prep = self._prepared(df, static_df, panel_split)
        ws = _on(prep.split(split), f.device)
        series, start, out, _ = window_outputs(f.model, ws, f.config.test_batch_size)
        H, L, p = ws.horizon, ws.lookback, prep.panel
        mean, scale = prep.schema.y_mean[series], prep.schema.y_scale[series]
        rows = start[:, None] + L + np.arange(H)  # (n, H) global rows of the forecast steps
        ids = np.asarray(p.ids, dtype=object)[series]
        o = self.options
        if level is None and quantiles is None:
            values = {"y_hat": (head.point(out)[..., 0].numpy().astype(np.float64) * scale[:, None]
                                + mean[:, None]).ravel()}
        else:  # every window as one "series" of the probabilistic frame (window-major rows, as below)
            frame, _ = probabilistic_columns(head, out, ids, f.calibration, mean, scale, level, quantiles)
            values = {c: frame[c].to_numpy() for c in frame.columns if c not in ("unique_id", "ds")}
        return pd.DataFrame({
            o.id_col: np.repeat(ids, H),
            o.time_col: localize(p.timestamps[rows.ravel()], p.tz),
            "cutoff": localize(np.repeat(p.timestamps[start + L - 1], H), p.tz),
            "y": p.target[rows.ravel()].astype(np.float64),  # the raw values (not unscaled: exact)
            **values})

    def _prepared(self, df: Any, static_df: Frame | None, panel_split: PanelSplit | None) -> PreparedPanel:
        f = self._require_fitted()
        if df is None:
            if f.prepared is None:
                raise TsmixError("a loaded panel model does not keep its training data: pass the data "
                                 "(df=...)")
            return f.prepared
        return self.prepare(self.read(df, static_df), panel_split)

    # ----------------------------------------------------------------- predict
    @torch.no_grad()
    def predict(self, df: Any = None, *, futr_df: Frame | None = None, static_df: Frame | None = None,
                h: int | None = None, level: Sequence[float] | None = None,
                quantiles: Sequence[float] | None = None) -> Frame:
        """The next ``h`` (default: horizon) steps after each series' last row, in original units.

        ``df``: long history (default: the fitted data's last lookback rows); ``futr_df``: the future
        covariates over the model's whole horizon (the network reads all of it, even for ``h`` < horizon);
        ``static_df``: static attributes when ``df`` is given. Returns long ``id, ds, y_hat`` rows;
        ``level=[80, 95]`` adds ``y_hat-lo-80``, ``y_hat-hi-80``, ... (the head's intervals, or a point
        model's per-series split-conformal ones, ``frame.attrs["interval_method"]``), ``quantiles=[0.1]``
        adds ``y_hat-q0.1``, ... (neuralforecast's names).
        """
        f = self._require_fitted()
        H = f.config.horizon
        if h is None:
            h = H
        if isinstance(h, bool) or not isinstance(h, int) or not 1 <= h <= H:
            raise TsmixError(f"h must be an int in 1..{H} (the horizon the model was trained for), got "
                             f"{h!r}; fit a model with horizon >= {h} for longer forecasts")
        head = model_head(f.model)
        check_interval_source(head, f.calibration, level, quantiles)  # before any data is read
        history = f.history_panel if df is None else df  # the kept history carries its static attributes
        inp = build_predict_input(f.schema, history, futr_df, static_df)
        f.model.eval()
        bs, dev = f.config.test_batch_size, f.device
        parts = [f.model(*(t[i : i + bs].to(dev) for t in (inp.x, inp.hist, inp.futr, inp.static,
                                                               inp.static_cat))).float().cpu()
                 for i in range(0, len(inp.ids), bs)]
        out = torch.cat(parts)  # (S, H[, K], 1) head output, scaled
        if level is None and quantiles is None:
            frame = inp.to_frame(head.point(out))
        else:
            frame, _ = probabilistic_columns(head, out, inp.ids, f.calibration, inp.y_mean, inp.y_scale,
                                             level, quantiles)
            frame = frame.rename(columns={"unique_id": inp.id_col, "ds": inp.time_col})
            frame[inp.time_col] = localize(inp.future.ravel(), inp.tz)  # (S, H) series-major like the rows
        if h < H:
            frame = frame[frame.groupby(inp.id_col, sort=False).cumcount() < h].reset_index(drop=True)
        return pl.from_pandas(frame) if isinstance(df, pl.DataFrame) else frame

    # ----------------------------------------------------------------- save / load
    def save(self, path: str | Path) -> Path:
        """Write the run directory atomically (config.json with the schema, weights, history tail)."""
        from tsmix.forecasting.panel_fit_io import save_panel_run

        return save_panel_run(self._require_fitted(), path)

    @classmethod
    def load(cls, path: str | Path) -> PanelForecaster:
        from tsmix.forecasting.panel_fit_io import load_panel_run

        fitted = load_panel_run(path)
        est = cls(**fitted.config.to_dict(), **dataclasses.asdict(fitted.options))
        est._fitted = fitted
        return est


def _on(windows: Any, device: torch.device) -> Any:
    return windows if device.type == "cpu" else windows.to(device)


def _score(f: PanelFitted, prep: PreparedPanel, split: str, level: Sequence[float] | None = None
           ) -> dict[str, Any]:
    """MSE/MAE of ``split``, overall and per series; ``probabilistic`` scores when the model has intervals
    (at ``level``, default the config's)."""
    ws = _on(prep.split(split), f.device)
    scores = PanelScores(model_head(f.model), f.calibration, prep.panel.ids,
                         f.config.level if level is None else level)
    errs = panel_errors(f.model, ws, f.config.test_batch_size, prep.panel.n_series, on_batch=scores.update)
    out = errs.metrics(prep.panel.ids)
    out["split"] = split
    prob = scores.metrics()
    if prob:
        out["probabilistic"] = prob
    return out


def _calibrate(model: Any, prep: PreparedPanel, batch_size: int, device: torch.device
               ) -> PanelCalibration | None:
    """Per-series conformal scores of a point model on the validation windows (None: head intervals)."""
    series, _, out, truth = window_outputs(model, _on(prep.val, device), batch_size)
    return calibrate_panel(model_head(model), prep.schema.ids, series, out, truth)


def _tail(panel: Panel, lookback: int) -> Panel:
    """The last ``lookback`` rows of every series (what a forecast from the fitted data needs)."""
    n = np.minimum(panel.lengths, lookback)
    rows = np.concatenate([np.arange(b - k, b) for b, k in zip(panel.offsets[1:], n)])
    return dataclasses.replace(panel, offsets=np.concatenate([[0], np.cumsum(n)]).astype(np.int64),
                               timestamps=panel.timestamps[rows], target=panel.target[rows],
                               hist=panel.hist[rows], futr=panel.futr[rows])
