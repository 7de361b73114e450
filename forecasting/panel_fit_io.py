"""Panel run directories: ``config.json`` (config, options, schema, layout), weights, history tail.

Written like the wide runs, through :func:`rundir_files.atomic_dir` (a temporary sibling folder
stamped with its writer, renamed into place once complete; orphans of killed saves cleared).
``history.parquet`` holds each series' last lookback rows (and ``static.parquet`` its attributes),
so a loaded model forecasts without its training data. A point model's conformal calibration (its
validation residual scores, :class:`PanelCalibration`) is ``conformal.safetensors``, named under
``"conformal"`` in config.json (absent: no calibration, as in runs written before it existed).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import torch

from tsmix.datasets.panel import Panel
from tsmix.datasets.panel_prepare import PanelSchema
from tsmix.errors import TsmixError
from tsmix.forecasting.config import ForecasterConfig
from tsmix.forecasting.covariate_models import CovariateLayout, build_covariate_model
from tsmix.forecasting.fitted import check_device
from tsmix.forecasting.panel_fit import PanelFitted, PanelOptions
from tsmix.forecasting.panel_probabilistic import PanelCalibration
from tsmix.forecasting.rundir_files import WEIGHTS, atomic_dir, load_state, read_json, read_run_meta

FORMAT = "tsmix.panel_forecaster"
FORMAT_VERSION = 1
HISTORY, STATIC, CONFORMAL = "history.parquet", "static.parquet", "conformal.safetensors"


def _static_frame(panel: Panel, id_col: str) -> pd.DataFrame | None:
    st = panel.static
    if st is None:
        return None
    df = pd.DataFrame({id_col: list(panel.ids)})
    for j, c in enumerate(st.numeric):
        df[c] = st.num[:, j]
    for j, c in enumerate(st.categorical):
        df[c] = st.cat[:, j].astype(str)
    return df


def _json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, default=_plain) + "\n")


def _plain(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"not JSON-serializable: {type(obj).__name__}")


def save_panel_run(f: PanelFitted, path: str | Path) -> Path:
    """Write ``f`` as a panel run directory at ``path`` (a new/empty folder or an earlier run)."""
    from safetensors.torch import save_file

    from tsmix import __version__

    with atomic_dir(path) as tmp:
        save_file({k: v.detach().cpu().contiguous() for k, v in f.model.state_dict().items()},
                  str(tmp / WEIGHTS))
        hp = f.history_panel
        pl.from_pandas(hp.to_pandas()).write_parquet(tmp / HISTORY)
        static = _static_frame(hp, f.options.id_col)
        if static is not None:
            pl.from_pandas(static).write_parquet(tmp / STATIC)
        conformal = None
        if f.calibration is not None:
            save_file(f.calibration.to_tensors(), str(tmp / CONFORMAL))
            conformal = {**f.calibration.summary(), "file": CONFORMAL}
        _json(tmp / "config.json", {
            "format": FORMAT, "format_version": FORMAT_VERSION, "tsmix_version": __version__,
            "torch_version": torch.__version__, "config": f.config.to_dict(),
            "panel": dataclasses.asdict(f.options), "schema": f.schema.to_dict(),
            "layout": f.layout.to_dict(), "conformal": conformal,
            "has_test": f.has_test, "training": {"history": f.history, "best_epoch": f.best_epoch}})
        _json(tmp / "metrics.json", f.metrics)
    return Path(path).expanduser().resolve()


def load_panel_run(path: str | Path) -> PanelFitted:
    """Read a run directory written by :func:`save_panel_run`."""
    path = Path(path).expanduser()
    cfg_file, meta = read_run_meta(path, FORMAT, kind="panel model",
                                   missing_fix="pass the folder save() wrote",
                                   wrong_fix="load it with the estimator that wrote it")
    try:
        config, panel = dict(meta["config"]), dict(meta["panel"])
        if "calendar" in panel:  # runs saved before calendar became a config field kept it here
            config.setdefault("calendar", panel.pop("calendar"))
        cfg = ForecasterConfig.from_dict(config)
        options = PanelOptions(**panel)
        schema = PanelSchema.from_dict(meta["schema"])
        layout = CovariateLayout.from_dict(meta["layout"])
        training = meta.get("training", {})
    except (KeyError, TypeError, ValueError) as exc:
        what = f"missing entry {exc}" if isinstance(exc, KeyError) else str(exc).splitlines()[0]
        raise TsmixError(f"{cfg_file} is damaged ({what}); fit and save the model again") from None
    model = build_covariate_model(cfg, layout)
    load_state(model, path)
    try:
        device = check_device(cfg.device)
    except TsmixError:  # a GPU run loads on a machine without one
        device = torch.device("cpu")
    model.to(device).eval()
    c = schema.columns
    static = pl.read_parquet(path / STATIC) if (path / STATIC).is_file() else None
    cat = None if schema.static is None else schema.static.categorical
    try:
        history = Panel.from_long(pl.read_parquet(path / HISTORY), id_col=c.id_col, time_col=c.time_col,
                                  target_col=c.target_col, hist_exog=c.hist_exog, futr_exog=c.futr_exog,
                                  static_df=static, static_categorical=cat)
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise TsmixError(f"{path / HISTORY} is damaged ({str(exc).splitlines()[0]}); save the model again") \
            from None
    return PanelFitted(model=model, config=cfg, options=options, layout=layout, schema=schema,
                       history_panel=history, device=device, history=list(training.get("history", [])),
                       best_epoch=int(training.get("best_epoch", 0)), metrics=_metrics(path),
                       has_test=bool(meta.get("has_test", True)),
                       calibration=_calibration(path, meta.get("conformal"), schema.ids))


def _calibration(path: Path, entry: Any, ids: tuple[str, ...]) -> PanelCalibration | None:
    """The run's conformal calibration, or None when it has none."""
    if not entry:
        return None
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    file = path / CONFORMAL
    try:
        return PanelCalibration.from_tensors(ids, load_file(str(file)))
    except (OSError, SafetensorError) as exc:
        raise TsmixError(f"{file} is missing or damaged ({str(exc).splitlines()[0]}); fit and save the "
                         "model again") from None


def _metrics(path: Path) -> dict:
    try:
        m = read_json(path / "metrics.json")
    except TsmixError:
        return {}
    return m if isinstance(m, dict) else {}


def is_panel_run(path: str | Path) -> bool:
    """True when ``path`` holds a panel run (so ``tsmix predict/evaluate --run`` can dispatch on it)."""
    cfg = Path(path).expanduser() / "config.json"
    try:
        meta = read_json(cfg) if cfg.is_file() else None
    except TsmixError:
        return False
    return isinstance(meta, dict) and meta.get("format") == FORMAT
