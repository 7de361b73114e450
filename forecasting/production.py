"""Production fits of wide data: pick the epoch count on validation, then refit on every row.

``Forecaster(..., production=True)`` (or ``test_size=0``; ``tsmix fit --production``) on a wide frame
first runs the ordinary fit (``train_on="train"``: training windows, early stopping and the best epoch
on the validation windows, the standard borders), then trains a fresh network with the same seed on
every window of the series up to the last row (``train_on="all"``, :mod:`final_fit`) for exactly the
best epoch count. Nothing is held out, so no test is scored (``mse`` is None, ``production`` is True).

The refit's scaler is fit on every row (see :func:`final_fit.scaled_on_all_rows`): a production model
forecasts from the newest rows and nothing is left to leak into. ``val_mse`` and the conformal
intervals come from the selection fit: its validation windows are the only rows any model here did not
train on, so they are the honest estimate of the recipe the shipped model follows.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from tsmix.errors import TsmixError
from tsmix.forecasting.config import ForecasterConfig
from tsmix.forecasting.fitted import Fitted, head_output, unscale
from tsmix.forecasting.probabilistic import Calibration

# The panel options a wide fit takes: production (test_size=0 says the same); the rest need a long frame.
_WIDE_OK = frozenset({"production", "test_size"})


def check_wide_options(options: Any, static_df: Any) -> bool:
    """Refuse panel-only options on wide data; True when a production fit is asked for.

    ``options`` is a ``PanelOptions``; ``test_size=0`` means production on wide data (the standard
    borders leave no other way to hold nothing out), a positive ``test_size`` stays panel-only.
    """
    from tsmix.forecasting.panel_fit import PanelOptions

    given = sorted(k for k, v in dataclasses.asdict(options).items() if v != getattr(PanelOptions, k, None))
    production = bool(options.production or options.test_size == 0)
    refused = [k for k in given if not (production and k in _WIDE_OK)]
    if refused or static_df is not None:
        names = ", ".join(refused + (["static_df"] if static_df is not None else []))
        raise TsmixError(f"{names} apply to long-format panels (an {options.id_col!r} column), not to this "
                         "wide data: drop them or pass a long frame/file")
    return production


def check_production_config(cfg: ForecasterConfig) -> None:
    """A production fit chooses its own training rows; another ``train_on`` would contradict it."""
    if cfg.train_on != "train":
        raise TsmixError(f"production=True picks the epoch count with train_on='train' and then refits with "
                         f"train_on='all'; drop train_on={cfg.train_on!r}")


def small_val_error(exc: TsmixError) -> TsmixError:
    """``prepare``'s error for a split without a window, explained when it is the validation split."""
    msg = str(exc)
    if not msg.startswith("the val split"):
        return exc
    return TsmixError(f"production=True picks the epoch count on the validation split, which is too small "
                      f"to select with: {msg}")


def refit_config(cfg: ForecasterConfig, best_epoch: int) -> ForecasterConfig:
    """The refit's config: every row, exactly the selected epoch count (at least one).

    It is what the run directory stores, so refitting a loaded production run with its config
    reproduces the shipped weights.
    """
    return dataclasses.replace(cfg, train_on="all", epochs=max(int(best_epoch), 1))


def checkpoint_dirs(checkpoint_dir: str | Path | None) -> tuple[Path | None, Path | None]:
    """(selection, refit) checkpoint folders: the two fits differ in data and config, so they each
    get their own (a single folder would refuse the second fit's fingerprint on resume)."""
    if checkpoint_dir is None:
        return None, None
    root = Path(checkpoint_dir)
    return root / "selection", root / "refit"


def transfer_calibration(cal: Calibration | None, old: Any, new: Any,
                         out_idx: list[int]) -> Calibration | None:
    """The selection fit's conformal radii (scaled by ``old``) in the refit's scaled units (``new``).

    Absolute radii are per channel |residual| quantiles, so a positive per-channel rescaling carries
    them over exactly (scaled ones are unit-free and carry over as they are); they measure the
    selection model on rows it never saw (the refit saw more data, so they are, if anything, on the
    wide side).
    """
    if cal is None or cal.scaled:  # a scaled score |r| / s(x) does not change under a rescaling
        return cal
    ratio = (np.asarray(old.scale_, dtype=np.float64) / np.asarray(new.scale_, dtype=np.float64))[out_idx]
    return dataclasses.replace(cal, radii=np.asarray(cal.radii, dtype=np.float64) * ratio)


def production_metrics(selection: Any, val_mse: float, train_windows: int) -> dict[str, Any]:
    """What the selection fit contributes to a production run's metrics (the refit has no held-out data)."""
    return {"production": True, "val_mse": val_mse, "best_epoch": selection.best_epoch,
            "selection_epochs": len(selection.history), "selection_train_windows": train_windows,
            "mse": None, "mae": None, "test_windows": None, "per_channel": None}


def is_production(f: Fitted) -> bool:
    """A model trained on every row (``train_on="all"``): nothing of its data is held out."""
    return f.config.train_on == "all"


def check_held_out(f: Fitted, split: str, data: Any) -> None:
    """``evaluate("test")`` on a production model's own data would score rows it trained on."""
    if is_production(f) and split == "test" and data is None:
        raise TsmixError("this is a production fit (train_on='all'): every row was trained on and nothing "
                         "was held out to test; evaluate newer data (evaluate(data=...), tsmix evaluate "
                         "--data FILE)")


def plot_future(f: Fitted, path: str | Path, channel: str | None = None) -> Path:
    """PNG of a production model's forecast after the last row: the context and the next horizon steps
    (no truth exists yet), with conformal or head intervals when the model has them."""
    from tsmix.datasets import future_index
    from tsmix.forecasting.fitted import window_bands
    from tsmix.forecasting.plotting import PLOT_LEVELS, plot_window, run_label

    channel = channel or (f.target if f.target in f.out_columns else f.out_columns[0])
    if channel not in f.out_columns:
        raise TsmixError(f"channel {channel!r} is not forecast; choose one of {f.out_columns}")
    j, c = f.out_columns.index(channel), f.columns.index(channel)
    out = head_output(f, f.context_values, f.context_ts)
    bands, method = window_bands(f, f.context_values, out, f.config.level or PLOT_LEVELS, j)
    cfg = f.config
    future = future_index(f.context_ts[-1], f.freq, cfg.horizon, f.tz)
    name = Path(f.source).stem if f.source else "data"
    return plot_window(path, f.context_ts, f.context_values[:, c], future, None,
                       unscale(f, f.head.point(out))[:, j],
                       title=f"{name} production forecast: {run_label(cfg)} L={cfg.lookback} "
                             f"H={cfg.horizon}, channel {channel}", ylabel=channel, bands=bands,
                       band_label=method)
