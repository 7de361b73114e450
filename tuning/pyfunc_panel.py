"""Panel (long-format) models through the pyfunc: the request convention, input example and config.

A model fitted on a long panel (``Forecaster.fit(long_df)``) is served like a wide one
(:mod:`tsmix.tuning.pyfunc`), but takes and returns long frames.

Request: one long frame with the columns the model was fitted with, named as at fit time and
recorded in the model config (``panel``): ``<id>, <time>, <target>`` plus its ``hist_exog`` and
``futr_exog`` columns; other columns are ignored. Every series needs at least ``lookback`` rows
with an observed target; dates may be datetimes or text (REST), values floats or integers.

Future covariates (models with ``futr_exog``) travel in the same frame: after each series' last
observed target come rows whose target is empty (null / NaN / an empty CSV cell) holding the
``futr_exog`` values of the next steps (``hist_exog`` may be empty there). They must cover the
model's whole trained horizon, even when ``params.horizon`` asks for fewer steps (the network
reads all of it). Empty-target rows after the last observed one are never history; for a model
without ``futr_exog`` they are ignored. An empty target before the last observed one stays in the
history, where the model's ``fill`` setting fills it or rejects it.

Static attributes: the model carries those of its training series (the run directory's static
table). A request may send them as columns instead (constant within a series), all of them or
none; series unseen in training must send them.

Output: long ``<id>, <time>, y_hat`` (``horizon`` rows per series), plus ``y_hat-lo-80`` ... for
``level`` and ``y_hat-q0.1`` ... for ``quantiles`` where the model supports them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tsmix.errors import TsmixError

EXAMPLE_SERIES = 3  # series in the logged input example: enough to show the layout, small to read


@dataclass(frozen=True)
class PanelSpec:
    """What a request to a panel model must hold (recorded as the model config's ``panel`` entry)."""

    id_column: str
    time_column: str
    target_column: str
    hist_exog: tuple[str, ...]
    futr_exog: tuple[str, ...]
    static: tuple[str, ...]  # static attribute columns (carried from training, or sent as columns)
    lookback: int
    horizon: int

    @classmethod
    def of(cls, forecaster: Any) -> PanelSpec:
        """The spec of a panel-fitted ``Forecaster`` (from its fitted schema)."""
        schema = forecaster.panel_.schema_
        c, st = schema.columns, schema.static
        return cls(id_column=c.id_col, time_column=c.time_col, target_column=c.target_col,
                   hist_exog=tuple(c.hist_exog), futr_exog=tuple(c.futr_exog),
                   static=() if st is None else tuple(st.numeric + st.categorical),
                   lookback=int(forecaster.config.lookback), horizon=int(forecaster.config.horizon))

    @property
    def columns(self) -> list[str]:
        """The columns every request needs, in the example's order."""
        return [self.id_column, self.time_column, self.target_column, *self.hist_exog, *self.futr_exog]

    def to_config(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


def training_static(run_dir: str | Path) -> pd.DataFrame | None:
    """The static attributes a panel run directory keeps for its training series (None without)."""
    from tsmix.forecasting.panel_fit_io import STATIC

    path = Path(run_dir) / STATIC
    return pd.read_parquet(path) if path.is_file() else None


def _instants(df: pd.DataFrame, spec: PanelSpec) -> tuple[np.ndarray, np.ndarray]:
    """(ids as text, datetime64 instants) per row, parsed as the library parses a long frame."""
    from tsmix.datasets.panel_io import frame_of, ids_and_times

    frame, zones = frame_of(df[[spec.id_column, spec.time_column]])
    ids, ts, _ = ids_and_times(frame, zones, spec.id_column, spec.time_column)
    return ids.to_numpy().astype(str), ts


def split_request(df: pd.DataFrame, spec: PanelSpec) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """(history, futr_df) of a request: empty-target rows after each series' last observed target
    are the future covariate rows (module doc)."""
    ids, ts = _instants(df, spec)
    target = df[spec.target_column]
    observed = (target.notna() & target.astype(str).str.strip().ne("")).to_numpy()  # JSON may send ""
    t = ts.view(np.int64)
    last = pd.Series(t[observed]).groupby(ids[observed]).max()  # last observed instant per series
    blank = sorted(set(ids.tolist()) - set(last.index.tolist()))
    if blank:
        raise TsmixError(f"series {blank[:5]} have no observed {spec.target_column!r} value: send at least "
                         f"{spec.lookback} rows of history per series")
    future = ~observed & (t > last.reindex(ids).to_numpy())
    history = df.loc[~future]
    if not spec.futr_exog:
        return history, None
    if not future.any():  # partial coverage: the library names the series and stamps missing
        raise TsmixError(f"the model uses future covariates {list(spec.futr_exog)}: after each series' "
                         f"history add its next {spec.horizon} rows with an empty {spec.target_column!r} "
                         "and those values")
    return history, df.loc[future, [spec.id_column, spec.time_column, *spec.futr_exog]]


def static_frame(df: pd.DataFrame, spec: PanelSpec, carried: pd.DataFrame | None) -> pd.DataFrame | None:
    """The static table for the request's series: its own static columns (all or none), else the
    training one; series unseen in training must send theirs."""
    if not spec.static:
        return None
    sent = [c for c in spec.static if c in df.columns]
    if sent:
        missing = [c for c in spec.static if c not in sent]
        if missing:
            raise TsmixError(f"input has static column(s) {sent} but not {missing}: send all of "
                             f"{list(spec.static)} or none (the model then uses its training ones)")
        return df[[spec.id_column, *spec.static]].drop_duplicates(spec.id_column)
    ids = pd.unique(df[spec.id_column].astype(str))
    known = set() if carried is None else set(carried[spec.id_column].astype(str))
    unseen = [s for s in ids if s not in known]
    if unseen:
        raise TsmixError(f"series {unseen[:5]} were not in training, so the model has no static attributes "
                         f"for them: add columns {list(spec.static)} to the input")
    return carried


def panel_forecast(forecaster: Any, model_input: Any, spec: PanelSpec, carried: pd.DataFrame | None, *,
                   horizon: int, level: Sequence[int] = (), quantiles: Sequence[float] = ()) -> pd.DataFrame:
    """The forecast of a request (module doc): long ``id, time, y_hat`` (+ interval/quantile columns)."""
    df = pd.DataFrame(model_input)  # also dict-of-lists from REST clients
    missing = [c for c in spec.columns if c not in df.columns]
    if missing:
        then = f", then future rows with an empty {spec.target_column!r}" if spec.futr_exog else ""
        raise TsmixError(f"input is missing column(s) {missing}; send a long frame with columns "
                         f"{spec.columns} (at least {spec.lookback} rows per series{then})")
    history, futr_df = split_request(df, spec)
    static_df = static_frame(history, spec, carried)
    asked: dict[str, Any] = {}  # level / quantiles reach the panel estimator only when asked for
    if level:
        asked["level"] = list(level)
    if quantiles:
        asked["quantiles"] = list(quantiles)
    out = forecaster.panel_.predict(history, h=horizon, futr_df=futr_df, static_df=static_df, **asked)
    return out.reset_index(drop=True)


def panel_example(forecaster: Any, data: Any, spec: PanelSpec, *, futr_df: Any = None,
                  series: int = EXAMPLE_SERIES) -> pd.DataFrame:
    """A request built from ``data`` (long frame or file): the last ``lookback`` rows of a few
    training series. With ``futr_exog``: followed by ``futr_df``'s rows for them, or (no
    ``futr_df``) the last ``lookback + horizon`` rows with the target blanked on the last ``horizon``
    (a forecast of the data's end whose future covariates are known)."""
    from tsmix.datasets.panel_io import frame_of

    frame, zones = frame_of(data)
    df = frame.to_pandas()
    for col, zone in zones.items():  # zoned pandas columns came back naive UTC
        df[col] = df[col].dt.tz_localize("UTC").dt.tz_convert(zone)
    missing = [c for c in spec.columns if c not in df.columns]
    if missing:
        raise TsmixError(f"data is missing column(s) {missing} the model was fitted with; pass the "
                         "fitted data")
    df = df[spec.columns]
    ids, ts = _instants(df, spec)
    df = df.assign(__ids=ids, __ts=ts).sort_values(["__ids", "__ts"], kind="stable")
    blank_tail = bool(spec.futr_exog) and futr_df is None
    need = spec.lookback + (spec.horizon if blank_tail else 0)
    sizes = df.groupby("__ids", sort=True).size()
    trained = set(forecaster.panel_.schema_.ids)
    chosen = [s for s, n in sizes.items() if n >= need and s in trained][:series]
    if not chosen:
        raise TsmixError(f"no training series in data has {need} rows for an input example; pass the "
                         "fitted data")
    tail = df[df["__ids"].isin(chosen)].groupby("__ids", sort=True).tail(need)
    if blank_tail:  # the last horizon rows of each series become future rows
        blanked = [spec.target_column, *spec.hist_exog]
        tail = tail.astype(dict.fromkeys(blanked, "float64"))  # NaN fits no integer column
        last = tail.groupby("__ids", sort=True).cumcount(ascending=False) < spec.horizon
        tail.loc[last, blanked] = np.nan
    elif spec.futr_exog:
        fut = pd.DataFrame(futr_df)
        fut = fut[fut[spec.id_column].astype(str).isin(chosen)]
        tail = pd.concat([tail, fut.reindex(columns=spec.columns)], ignore_index=True)
    return tail[spec.columns].reset_index(drop=True)
