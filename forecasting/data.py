"""The Forecaster's data side: where fitted data came from, re-reading it, new histories.

Everything goes through ``tsmix.datasets`` (``prepare`` for splits and windows, ``load`` for a
history to forecast from); this module only checks that the data matches what was fitted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl

from tsmix.errors import TsmixError
from tsmix.forecasting.fitted import Fitted


@dataclass(frozen=True)
class Reading:
    """How a source is read (``tsmix.datasets.load`` keywords): the fitted config's, or a call's."""

    fill: str | None = None  # None | ffill | interpolate | zero
    date_format: str | None = None  # strftime format of text dates
    date_unit: str | None = None  # epoch unit of integer dates

    @classmethod
    def of(cls, f: Fitted, **given: str | None) -> Reading:
        """The fitted config's reading, with the keywords given (not None) taking over."""
        c = f.config
        base = {"fill": c.fill, "date_format": c.date_format, "date_unit": c.date_unit}
        return cls(**{**base, **{k: v for k, v in given.items() if v is not None}})

    def kwargs(self) -> dict[str, str | None]:
        return {"fill": self.fill, "date_format": self.date_format, "date_unit": self.date_unit}


def source_of(data: Any) -> str | None:
    """How to find the data again after load: a benchmark name or an absolute file path."""
    if isinstance(data, (str, Path)):
        p = Path(data).expanduser()
        return str(p.resolve()) if p.is_file() else str(data)
    return None


def prepared_for(f: Fitted, data: Any, data_dir: str | Path | None, reading: Reading | None = None) -> Any:
    """``tsmix.datasets.Prepared`` of ``data``, or of the fitted data (cached; re-read after load)."""
    from tsmix.datasets import prepare

    if data is None and f.prepared is not None:
        return f.prepared
    refit_source = data is None
    if refit_source:
        if f.source is None:
            raise TsmixError(
                "this forecaster was fitted on an in-memory frame, which is not saved; "
                "pass the data: evaluate(data=frame) in Python, --data FILE on the command line"
            )
        data = f.source
        data_dir = data_dir if data_dir is not None else f.data_dir
    cfg = f.config
    prepared = prepare(data, cfg.lookback, cfg.horizon, cfg.features, data_dir=data_dir,
                       date_col=None if isinstance(data, (str, Path)) else f.date_col, target=f.target,
                       calendar=bool(f.marks), **(reading or Reading.of(f)).kwargs())
    check_columns(tuple(prepared.series.columns), f.columns)
    if prepared.mark_names != f.marks:
        raise TsmixError(f"this model reads the calendar features {list(f.marks)}, but this data's step "
                         f"gives {list(prepared.mark_names)}; pass data sampled at the fitted frequency "
                         f"{f.freq}")
    if f.config.train_on == "all":  # a production model scales any data with its own scaler, as predict does
        from tsmix.forecasting.final_fit import scaled_with

        prepared = scaled_with(prepared, f.scaler)
    if refit_source:
        f.prepared = prepared  # cache the re-read fitted data
    return prepared


@dataclass(frozen=True)
class History:
    """The last ``lookback`` rows to forecast from."""

    values: np.ndarray  # (L, C) original units
    timestamps: np.ndarray  # (L,) datetime64[ns]: UTC instants when tz is set
    date_col: str  # the date column's name, used for the forecast frame
    tz: str | None  # zone of the dates; the forecast is stamped in it


def history_of(f: Fitted, df: Any, reading: Reading | None = None) -> History:
    """The history of ``df`` (default: the fitted data's last rows), checked against the fit."""
    from tsmix.datasets import load

    lookback = f.config.lookback
    if df is None:
        return History(f.context_values, f.context_ts, f.date_col, f.tz)
    if not isinstance(df, (pd.DataFrame, pl.DataFrame, str, Path)):
        raise TsmixError(f"predict takes a pandas/polars frame or a file path, got {type(df).__name__}")
    series = load(df, target=f.target, **(reading or Reading.of(f)).kwargs())
    check_columns(tuple(series.columns), f.columns)
    check_freq(series.freq, f.freq)
    if series.n_rows < lookback:
        raise TsmixError(
            f"history too short: {series.n_rows} rows but the model needs lookback={lookback} "
            "rows; pass a longer frame"
        )
    return History(series.values[-lookback:], series.timestamps[-lookback:],
                   getattr(series, "date_col", f.date_col), series.tz)


def check_freq(got: str, want: str) -> None:
    """A history must be sampled at the fitted frequency: its forecast is labelled with it."""
    try:
        same = pd.tseries.frequencies.to_offset(got) == pd.tseries.frequencies.to_offset(want)
    except ValueError:
        same = got == want
    if not same:
        raise TsmixError(f"the history is sampled every {got} but the model was fitted on data every {want}; "
                         f"resample the history to {want} (or fit a model on {got} data)")


def check_columns(got: tuple[str, ...], want: tuple[str, ...]) -> None:
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
