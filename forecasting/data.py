"""The Forecaster's data side: where fitted data came from, re-reading it, new histories.

Everything goes through ``tsmix.datasets`` (``prepare`` for splits and windows, ``load`` for a
history to forecast from); this module only checks that the data matches what was fitted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl

from tsmix.errors import TsmixError
from tsmix.forecasting.fitted import Fitted


def source_of(data: Any) -> str | None:
    """How to find the data again after load: a benchmark name or an absolute file path."""
    if isinstance(data, (str, Path)):
        p = Path(data).expanduser()
        return str(p.resolve()) if p.is_file() else str(data)
    return None


def prepared_for(f: Fitted, data: Any, data_dir: str | Path | None) -> Any:
    """``tsmix.datasets.Prepared`` of ``data``, or of the fitted data (cached; re-read after load)."""
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
    check_columns(tuple(prepared.series.columns), f.columns)
    if refit_source:
        f.prepared = prepared  # cache the re-read fitted data
    return prepared


def history_of(f: Fitted, df: Any) -> tuple[np.ndarray, np.ndarray, str]:
    """The last ``lookback`` rows to forecast from: ``(values (L, C), timestamps (L,), date column)``."""
    from tsmix.datasets import load

    lookback = f.config.lookback
    if df is None:
        return f.context_values, f.context_ts, f.date_col
    if not isinstance(df, (pd.DataFrame, pl.DataFrame, str, Path)):
        raise TsmixError(f"predict takes a pandas/polars frame or a file path, got {type(df).__name__}")
    series = load(df, target=f.target)
    check_columns(tuple(series.columns), f.columns)
    if series.n_rows < lookback:
        raise TsmixError(
            f"history too short: {series.n_rows} rows but the model needs lookback={lookback} "
            "rows; pass a longer frame"
        )
    return series.values[-lookback:], series.timestamps[-lookback:], getattr(series, "date_col", f.date_col)


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


def future_timestamps(last: Any, freq: str, horizon: int) -> pd.DatetimeIndex:
    """The ``horizon`` timestamps after ``last`` at ``freq``."""
    return pd.date_range(start=pd.Timestamp(last), periods=horizon + 1, freq=freq)[1:]
