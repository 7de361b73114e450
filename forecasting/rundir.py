"""Run directories: ``config.json``, weights, context, metrics and the forecast plot.

Written to a temporary sibling folder and renamed, so a crash never leaves half a run; an
existing run directory is swapped out only once the new one is complete.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tsmix.errors import TsmixError
from tsmix.forecasting import trainer as tr
from tsmix.forecasting.config import ForecasterConfig
from tsmix.forecasting.fitted import Fitted
from tsmix.forecasting.registry import build_model

FORMAT = "tsmix.forecaster"
FORMAT_VERSION = 1
WEIGHTS = "model.safetensors"
CONTEXT = "context.safetensors"
PLOT = "forecast.png"


def save_run(f: Fitted, path: str | Path, plot: Callable[[Path], Any]) -> Path:
    """Write ``f`` as a run directory at ``path``; ``plot(png_path)`` draws the forecast plot.

    A loaded run keeps its plot without re-reading data; a plot that needs data no longer
    reachable is skipped, but with the data at hand a plotting error is real.
    """
    from safetensors.torch import save_file

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
        _write_json(tmp / "config.json", config_json(f))
        _write_json(tmp / "metrics.json", f.metrics)
        png = tmp / PLOT
        if f.prepared is None and f.plot_from is not None and f.plot_from.is_file():
            shutil.copyfile(f.plot_from, png)  # loaded run: keep its plot, do not re-read data
        elif f.prepared is not None or f.source is not None:
            try:
                plot(png)
            except TsmixError:
                if f.prepared is not None:
                    raise
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


def config_json(f: Fitted) -> dict[str, Any]:
    """The ``config.json`` document: format, versions, config, data facts, scaler, history."""
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


def load_run(path: str | Path) -> Fitted:
    """Read a run directory written by :func:`save_run` (``Forecaster.save``, ``tsmix fit``)."""
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
    if not (path / WEIGHTS).is_file():
        raise TsmixError(f"no weights in {path}: expected {WEIGHTS}")
    model.load_state_dict(load_file(str(path / WEIGHTS)))
    model.to(device).eval()
    ctx = load_file(str(path / CONTEXT))
    metrics_file = path / "metrics.json"
    training = meta.get("training", {})
    return Fitted(
        model=model, config=cfg, device=device, columns=tuple(data["columns"]), target=data["target"],
        target_idx=int(data["target_idx"]), freq=data["freq"], date_col=data["date_col"],
        scaler=Scaler.from_dict(meta["scaler"]), context_values=ctx["values"].numpy(),
        context_ts=ctx["timestamps"].numpy().astype("datetime64[ns]"), source=data["source"],
        data_dir=data["data_dir"], history=training.get("history", []),
        best_epoch=int(training.get("best_epoch", 0)),
        metrics=json.loads(metrics_file.read_text()) if metrics_file.is_file() else {},
        plot_from=(path / PLOT) if (path / PLOT).is_file() else None,
    )


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
