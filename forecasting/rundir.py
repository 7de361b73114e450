"""Run directories: ``config.json``, weights, context, metrics, calibration and the forecast plot.

Format 2 (the output-head wrapper): weights are ``ProbabilisticModel`` keys (``base.*``,
``revin.*``) and a point model's conformal calibration sits in ``calibration.json``. Format 1 runs
(the encoder's own keys, no calibration) load with their keys lifted onto the wrapper.

Written to a temporary sibling folder and renamed, so a crash never leaves half a run; an
existing run directory is swapped out only once the new one is complete. A temporary folder
left by a killed save is removed by the next save into the same parent (see :mod:`rundir_files`)
and refused by :func:`load_run`. Every damaged file is named in one line, without a traceback.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tsmix.errors import TsmixError
from tsmix.forecasting.config import ForecasterConfig
from tsmix.forecasting.fitted import Fitted, check_device
from tsmix.forecasting.probabilistic import Calibration, lift_state_dict
from tsmix.forecasting.registry import build_model
from tsmix.forecasting.rundir_files import (
    CALIBRATION,
    CONTEXT,
    PLOT,
    WEIGHTS,
    atomic_dir,
    check_out_dir,
    load_state,
    read_json,
    read_run_meta,
    read_tensors,
)

FORMAT = "tsmix.forecaster"
FORMAT_VERSION = 2  # 2: output-head wrapper keys and calibration.json; 1: the encoder's own keys

__all__ = ["FORMAT", "FORMAT_VERSION", "check_out_dir", "config_json", "load_run", "save_run"]


def save_run(f: Fitted, path: str | Path, plot: Callable[[Path], Any]) -> Path:
    """Write ``f`` as a run directory at ``path``; ``plot(png_path)`` draws the forecast plot.

    A loaded run keeps its plot without re-reading data; a plot that needs data no longer
    reachable is skipped, but with the data at hand a plotting error is real.
    """
    from safetensors.torch import save_file

    with atomic_dir(path) as tmp:
        state = {k: v.detach().cpu().contiguous() for k, v in f.model.state_dict().items()}
        save_file(state, str(tmp / WEIGHTS))
        stamps = f.context_ts.astype("datetime64[ns]").astype(np.int64)
        save_file({"values": torch.from_numpy(np.ascontiguousarray(f.context_values)),
                   "timestamps": torch.from_numpy(stamps)}, str(tmp / CONTEXT))
        _write_json(tmp / "config.json", config_json(f))
        _write_json(tmp / "metrics.json", f.metrics)
        if f.calibration is not None:
            _write_json(tmp / CALIBRATION, f.calibration.to_dict())
        png = tmp / PLOT
        if f.prepared is None and f.plot_from is not None and f.plot_from.is_file():
            shutil.copyfile(f.plot_from, png)  # loaded run: keep its plot, do not re-read data
        elif f.prepared is not None or f.source is not None:
            try:
                plot(png)
            except TsmixError:
                if f.prepared is not None:
                    raise
    return Path(path).expanduser().resolve()


def config_json(f: Fitted) -> dict[str, Any]:
    """The ``config.json`` document: format, versions, config, data facts, scaler, history."""
    from tsmix import __version__

    return {
        "format": FORMAT, "format_version": FORMAT_VERSION, "tsmix_version": __version__,
        "torch_version": torch.__version__,
        "config": f.config.to_dict(),
        "data": {"source": f.source, "data_dir": f.data_dir, "columns": list(f.columns),
                 "target": f.target, "target_idx": f.target_idx, "freq": f.freq, "tz": f.tz,
                 "date_col": f.date_col, "channels_in": len(f.in_idx), "out_columns": f.out_columns,
                 "calendar": list(f.marks)},
        "scaler": _jsonable(f.scaler.to_dict()),
        "training": {"history": f.history, "best_epoch": f.best_epoch},
    }


def _load_device(cfg: ForecasterConfig) -> torch.device:
    """The run's device when it exists here, else the CPU (a GPU run loads on a laptop)."""
    try:
        return check_device(cfg.device)
    except TsmixError:
        return torch.device("cpu")


def load_run(path: str | Path) -> Fitted:
    """Read a run directory written by :func:`save_run` (``Forecaster.save``, ``tsmix fit``)."""
    from tsmix.datasets import Scaler

    path = Path(path).expanduser()
    cfg_file, meta = read_run_meta(path, FORMAT, kind="tsmix forecaster config",
                                   missing_fix="pass the folder tsmix fit --out wrote",
                                   wrong_fix="pass a run directory written by tsmix fit")
    version = meta.get("format_version", 1)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise TsmixError(f"{cfg_file} has format version {version!r}, newer than this tsmix reads "
                         f"({FORMAT_VERSION}); upgrade tsmix to load it")
    try:
        cfg = ForecasterConfig.from_dict(meta["config"])
        data, training = meta["data"], meta.get("training", {})
        facts = dict(columns=tuple(data["columns"]), target=data["target"],
                     target_idx=int(data["target_idx"]), freq=data["freq"], date_col=data["date_col"],
                     source=data["source"], data_dir=data["data_dir"], tz=data.get("tz"),
                     history=list(training.get("history", [])),
                     best_epoch=int(training.get("best_epoch", 0)),
                     marks=tuple(str(m) for m in data.get("calendar", [])))
        channels = int(data["channels_in"])
        scaler = Scaler.from_dict(meta["scaler"])
    except TsmixError as exc:
        raise TsmixError(f"{cfg_file}: {exc}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        what = f"missing entry {exc}" if isinstance(exc, KeyError) else str(exc).splitlines()[0]
        raise TsmixError(f"{cfg_file} is damaged ({what}); re-run tsmix fit to write the run again") from None
    if bool(facts["marks"]) != cfg.calendar:
        raise TsmixError(f"{cfg_file} is damaged (calendar={cfg.calendar} but calendar features "
                         f"{list(facts['marks'])}); re-run tsmix fit to write the run again")
    model = build_model(cfg, channels, len(facts["marks"]))
    load_state(model, path, lift_state_dict if version < 2 else None)
    device = _load_device(cfg)
    model.to(device).eval()
    ctx = read_tensors(path / CONTEXT, ("values", "timestamps"))
    values, stamps = ctx["values"].numpy(), ctx["timestamps"].numpy().astype("datetime64[ns]")
    if values.shape != (cfg.lookback, len(facts["columns"])) or stamps.shape != (cfg.lookback,):
        raise TsmixError(f"{path / CONTEXT} holds shape {values.shape} but config.json asks for "
                         f"({cfg.lookback}, {len(facts['columns'])}); re-run tsmix fit")
    metrics, metrics_error = {}, None
    metrics_file = path / "metrics.json"
    if metrics_file.is_file():
        try:
            metrics = read_json(metrics_file)
            if not isinstance(metrics, dict):
                raise TsmixError(f"{metrics_file} is damaged (a JSON {type(metrics).__name__}, not an "
                                 f"object); tsmix evaluate --run {path} gives the numbers again")
        except TsmixError as exc:
            metrics, metrics_error = {}, str(exc)  # predict does not need metrics: named when asked for
    return Fitted(
        model=model, config=cfg, device=device, scaler=scaler, context_values=values, context_ts=stamps,
        metrics=metrics, metrics_error=metrics_error, calibration=_calibration(path),
        plot_from=(path / PLOT) if (path / PLOT).is_file() else None, **facts,
    )


def _calibration(run: Path) -> Calibration | None:
    """The run's conformal calibration, None when it has none (a probabilistic head, a format 1 run)."""
    file = run / CALIBRATION
    if not file.is_file():
        return None
    try:
        return Calibration.from_dict(read_json(file))
    except TsmixError as exc:
        raise TsmixError(f"{file} is damaged ({exc}); re-run tsmix fit to write the run again") from None


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
