"""What a backtest asks of an estimator, for both layouts: fit on the rows before a cutoff, forecast after it.

``PanelTarget`` serves a ``PanelForecaster`` on a long frame (ragged series: each cutoff is a row
position from each series' own end); ``WideTarget`` the wide ``Forecaster`` on one time grid (every
column a series). Both go through the estimators' public ``fit`` / ``predict`` / ``get_params`` only.
With ``level`` / ``quantiles`` set, each forecast also carries the estimator's interval / quantile
columns in the long convention (``y_hat-lo-80``, ``y_hat-hi-80``, ``y_hat-q0.1``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from tsmix.datasets.dates import localize
from tsmix.errors import TsmixError
from tsmix.forecasting.probabilistic import check_levels, check_quantiles
from tsmix.forecasting.probabilistic.output import interval_columns, quantile_column


class Target:
    """A backtest's view of the data and the estimator (one subclass per layout)."""

    ids: tuple[str, ...]  # (S,) series
    lengths: np.ndarray  # (S,) rows per series
    horizon: int  # H: steps each window forecasts
    freq: str  # the series' frequency (MASE's default season)
    min_rows: int  # rows a fit needs before the first cutoff
    id_col: str = "unique_id"  # output column names
    time_col: str = "ds"
    level: tuple[float, ...] | None = None  # interval levels asked of every forecast
    quantiles: tuple[float, ...] | None = None

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make  # a fresh, unfitted estimator with the backtest's parameters

    def ask(self, level: Sequence[float] | None, quantiles: Sequence[float] | None) -> None:
        """Validate and keep the intervals / quantiles every forecast returns."""
        self.level = None if level is None else check_levels(level)
        self.quantiles = None if quantiles is None else check_quantiles(quantiles)

    def extra(self, name: str = "y_hat") -> list[str]:
        """Interval and quantile columns of ``name`` asked for, in output order."""
        cols = [c for lv in self.level or () for c in interval_columns(name, lv)]
        return cols + [quantile_column(name, q) for q in self.quantiles or ()]

    def asked(self) -> dict[str, Any]:
        """predict() keywords for the asked intervals / quantiles (none when nothing was asked)."""
        return {k: v for k, v in (("level", self.level), ("quantiles", self.quantiles)) if v is not None}

    def values(self, i: int, stop: int) -> np.ndarray:
        """Raw target values of series ``i``, rows ``[0, stop)``."""
        raise NotImplementedError

    def fit(self, cut: np.ndarray) -> Any:
        """A fresh estimator fitted on each series' rows before ``cut`` (S,)."""
        raise NotImplementedError

    def forecast(self, est: Any, cut: np.ndarray) -> pd.DataFrame:
        """Long ``id, ds, cutoff, y, y_hat`` of the H steps from row ``cut`` (S,) of each series."""
        raise NotImplementedError


class PanelTarget(Target):
    def __init__(self, make: Callable[[], Any], df: Any, static_df: Any) -> None:
        super().__init__(make)
        proto = make()
        o, cfg = proto.options, proto.config
        panel = proto.read(df, static_df)  # validated: duplicates, frequencies, static rows
        self.frame = panel.to_pandas()  # sorted by (id, ds), original units
        # (N,) each row's position inside its series
        self.pos = np.arange(panel.n_rows) - np.repeat(panel.offsets[:-1], panel.lengths)
        self.series = np.repeat(np.arange(panel.n_series), panel.lengths)  # (N,)
        self.offsets, self.target, self.target_col = panel.offsets, panel.target, o.target_col
        self.static_df, self.futr = static_df, list(o.futr_exog)
        self.ids, self.lengths, self.horizon, self.freq = panel.ids, panel.lengths, cfg.horizon, panel.freq
        self.id_col, self.time_col = o.id_col, o.time_col
        val = o.sizes(cfg.horizon)[0]
        self.min_rows = cfg.lookback + cfg.horizon + val  # a training window, then the validation steps

    def values(self, i: int, stop: int) -> np.ndarray:
        a = int(self.offsets[i])
        return self.target[a : a + stop].astype(np.float64)

    def fit(self, cut: np.ndarray) -> Any:
        return self.make().fit(self.frame[self.pos < cut[self.series]], self.static_df)

    def forecast(self, est: Any, cut: np.ndarray) -> pd.DataFrame:
        c = cut[self.series]
        history = self.frame[self.pos < c]
        window = self.frame[(self.pos >= c) & (self.pos < c + self.horizon)]
        futr = window[[self.id_col, self.time_col, *self.futr]] if self.futr else None
        pred = est.predict(history, futr_df=futr, static_df=self.static_df, **self.asked())
        cutoff = history.groupby(self.id_col, sort=False)[self.time_col].max().rename("cutoff")
        truth = window[[self.id_col, self.time_col]].assign(y=window[self.target_col].astype(np.float64))
        out = pred.merge(cutoff, left_on=self.id_col, right_index=True).merge(truth, on=[self.id_col,
                                                                                     self.time_col])
        return out[[self.id_col, self.time_col, "cutoff", "y", "y_hat", *self.extra()]]


class WideTarget(Target):
    def __init__(self, make: Callable[[], Any], df: Any) -> None:
        from tsmix.datasets import load

        super().__init__(make)
        cfg = make().config
        s = load(df, target=cfg.target, fill=cfg.fill, date_format=cfg.date_format, date_unit=cfg.date_unit)
        self.frame = s.to_pandas()  # date column + one column per series
        self.stamps, self.tz, self.date_col = s.timestamps, s.tz, s.date_col
        self.ids, self.freq, self.horizon = tuple(s.columns), s.freq, cfg.horizon
        self.lengths = np.full(len(self.ids), s.n_rows)
        self.min_rows = cfg.lookback + cfg.horizon  # the wide split's own checks name any further need

    def values(self, i: int, stop: int) -> np.ndarray:
        return self.frame[self.ids[i]].to_numpy(np.float64)[:stop]

    def fit(self, cut: np.ndarray) -> Any:
        return self.make().fit(self.frame.iloc[: int(cut[0])].reset_index(drop=True))

    def forecast(self, est: Any, cut: np.ndarray) -> pd.DataFrame:
        c, H = int(cut[0]), self.horizon
        pred = est.predict(self.frame.iloc[:c].reset_index(drop=True), **self.asked())
        cols = [k for k in pred.columns if k in self.ids]  # the forecast columns, not their bands
        truth = self.frame.iloc[c : c + H]
        if not np.array_equal(pd.DatetimeIndex(pred[self.date_col]), pd.DatetimeIndex(truth[self.date_col])):
            raise TsmixError("the forecast's timestamps differ from the data's rows after the cutoff: the "
                             "data has gaps; fill them (fill=...) before backtesting")
        cutoff = localize(self.stamps[c - 1 : c], self.tz)[0]
        return pd.DataFrame({
            self.id_col: np.repeat(np.asarray(cols, dtype=object), H),
            self.time_col: np.tile(pred[self.date_col].to_numpy(), len(cols)), "cutoff": cutoff,
            "y": truth[cols].to_numpy(np.float64).T.ravel(),
            "y_hat": pred[cols].to_numpy(np.float64).T.ravel(),
            **{name: pred[[col + name[len("y_hat"):] for col in cols]].to_numpy(np.float64).T.ravel()
               for name in self.extra()}})  # <col>-lo-80 -> y_hat-lo-80


def target_for(estimator: Any, df: Any, static_df: Any = None) -> Target:
    """The backtest view of ``estimator`` (an estimator, or a factory of fresh ones) on ``df``."""
    from tsmix.forecasting.panel_fit import PanelForecaster

    proto = estimator() if callable(estimator) and not hasattr(estimator, "fit") else estimator
    if not all(hasattr(proto, a) for a in ("fit", "predict", "get_params", "config")):
        raise TsmixError(f"cross_validation takes a PanelForecaster, a Forecaster or a function returning "
                         f"one, got {type(proto).__name__}")
    if proto is not estimator:
        make = estimator
    else:
        params = estimator.get_params()
        if isinstance(estimator, PanelForecaster):
            params["test_size"] = 0  # the backtest windows are the test: the fit keeps every row before them

        def make() -> Any:
            return type(estimator)(**params)
    if isinstance(proto, PanelForecaster):
        return PanelTarget(make, df, static_df)
    if static_df is not None:
        raise TsmixError("static_df is for long panels: use a PanelForecaster (wide data has no static "
                         "attributes)")
    return WideTarget(make, df)
