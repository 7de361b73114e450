"""Run a suite: every planned run not yet in the store is trained, scored and stored at once.

Resume is by key (suite, dataset, horizon, lookback, model, mixer, seed): a finished run is
never repeated, so an interrupted benchmark continues where it stopped and rows from other
sessions or machines (other shard files) count as finished too. A stored row whose
``config_hash`` differs from the current recipe is *stale*: it is reported and skipped, or
re-run and replaced with ``rerun_stale=True``.

With ``checkpoints`` a killed run also keeps its epochs: each run checkpoints after every epoch
into its own folder (:func:`checkpoint_folder`), the next invocation continues it from there and
ends with the numbers of an uninterrupted run (the engine's bit-exact resume), and the folder is
removed once the row is stored. The row's CPU seconds include what the killed processes spent up
to their last checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import re
import shutil
import socket
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from tsmix.engine import checkpoint as ckpt
from tsmix.errors import TsmixError
from tsmix.provenance import git_commit

from .store import ResultStore
from .suites import NO_MIXER, RunSpec, Suite, expand
from .tracking import benchmark_run


def _device_of(forecaster: Any) -> str:
    """The configured device, "auto" resolved the way the Forecaster resolves it."""
    dev = getattr(getattr(forecaster, "config", None), "device", "auto")
    if dev == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return str(dev)


def build_forecaster(spec: RunSpec, threads: int | None = None, progress: bool = False):
    """The Forecaster of one run: preset (if any) plus the run's overrides. ``progress``: the
    engine's line per epoch (and its bar on a terminal); off, the runner's lines are all there is."""
    from tsmix.forecasting import Forecaster

    kw = spec.kwargs()
    kw["progress"] = progress
    if threads is not None:
        kw["threads"] = threads
    if spec.preset is None:
        return Forecaster(model=spec.model, **kw)
    return Forecaster.from_preset(spec.preset, model=spec.model, dataset=spec.dataset, **kw)


def _data_for(spec: RunSpec, data_dir: str | Path | None) -> tuple[Any, dict[str, Any]]:
    """What ``fit`` gets: the benchmark name, or a frame of its first ``rows`` rows (smoke)."""
    if spec.rows is None:
        return spec.dataset, {"data_dir": data_dir}
    import pandas as pd

    from tsmix.datasets import resolve_path

    frame = pd.read_csv(resolve_path(spec.dataset, data_dir), nrows=spec.rows)
    return frame, {"date_col": "date"}


def _config_json(forecaster: Any) -> str:
    cfg = getattr(forecaster, "config", None)
    try:
        d = dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else forecaster.get_params()
    except Exception:  # the row is still valid without the config blob
        return ""
    return json.dumps(d, sort_keys=True, default=str)


def interval_columns(prob: dict[str, Any] | None) -> dict[str, Any]:
    """The row's interval columns from an evaluation's ``probabilistic`` block (all None without one)."""
    prob = prob or {}
    cover, width = prob.get("coverage") or {}, prob.get("width") or {}
    return {"interval_method": prob.get("interval_method"), "crps": prob.get("crps"),
            "pinball": prob.get("pinball"), "coverage_80": cover.get("80"), "coverage_95": cover.get("95"),
            "width_80": width.get("80"), "width_95": width.get("95")}


def _config_value(forecaster: Any, name: str) -> Any:
    return getattr(getattr(forecaster, "config", None), name, None)


def checkpoint_folder(root: str | Path, spec: RunSpec) -> Path:
    """The checkpoint folder of one run under ``root``: one per run key and recipe (``config_hash``
    in the name), so a changed recipe never continues an old recipe's weights."""
    mixer = "nomixer" if spec.mixer == NO_MIXER else spec.mixer
    name = (f"{spec.dataset}-H{spec.horizon}-L{spec.lookback}-{spec.model}-{mixer}-s{spec.seed}"
            f"-{spec.config_hash}")
    return Path(root).expanduser() / spec.suite / re.sub(r"[^A-Za-z0-9._-]", "_", name)


def checkpoint_epoch(folder: Path) -> tuple[int, int] | None:
    """(epochs done, epochs planned) of the checkpoint in ``folder``; None without a readable one."""
    meta = ckpt.read_meta(folder / ckpt.FILENAME)
    if meta is None:
        return None
    return int(meta["loop"]["epoch"]), int(meta["config"]["engine"]["epochs"])


def run_one(spec: RunSpec, *, data_dir: str | Path | None = None, threads: int | None = None,
            progress: bool = False, checkpoint_dir: str | Path | None = None) -> dict[str, Any]:
    """Train and score one run; return its result row (not yet stored). ``checkpoint_dir``: a
    checkpoint there after every epoch, and continue from the one already there (same run only:
    another run's raises :class:`~tsmix.engine.CheckpointMismatch`)."""
    commit = git_commit()  # now, with the code just loaded: HEAD may move on while the run trains
    forecaster = build_forecaster(spec, threads, progress)
    data, fit_kw = _data_for(spec, data_dir)
    if checkpoint_dir is not None:
        fit_kw.update(checkpoint_dir=checkpoint_dir, resume=True)
    t0, c0 = time.perf_counter(), time.process_time()
    forecaster.fit(data, **fit_kw)
    m = dict(forecaster.metrics_)
    # a resumed fit: the killed processes' CPU time up to their last checkpoint counts too
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0 + float(m.get("resumed_cpu_seconds") or 0.0)
    if m.get("protocol", "fair") == "fair" and m.get("mse") is not None:  # fit already scored the test set
        fair = {"mse": m["mse"], "mae": m["mae"], "windows": m.get("test_windows"),
                "probabilistic": m.get("probabilistic")}
    else:
        fair = forecaster.evaluate("test", protocol="fair")
    try:  # what the official scripts scored: the last partial test batch dropped
        paper = forecaster.evaluate("test", protocol="paper")
    except TsmixError:
        paper = {"mse": None, "mae": None}
    return {
        "suite": spec.suite, "dataset": spec.dataset, "horizon": spec.horizon, "lookback": spec.lookback,
        "model": spec.model, "mixer": spec.mixer, "seed": spec.seed, "protocol": spec.protocol,
        "mse": float(fair["mse"]), "mae": float(fair["mae"]),
        "mse_paper": None if paper["mse"] is None else float(paper["mse"]),
        "mae_paper": None if paper["mae"] is None else float(paper["mae"]),
        "val_mse": float(m["val_mse"]) if m.get("val_mse") is not None else None,
        "epochs": int(m.get("epochs") or len(getattr(forecaster, "history", []) or [])),
        "train_seconds": float(m.get("train_seconds") or wall), "cpu_seconds": cpu,
        "params": int(m.get("params") or getattr(forecaster, "n_params", 0)),
        "test_windows": int(fair.get("windows") or 0),
        "loss": str(_config_value(forecaster, "loss") or "mse"),
        **interval_columns(fair.get("probabilistic")),
        "device": str(m.get("device") or _device_of(forecaster)), "torch": torch.__version__,
        "threads": torch.get_num_threads(), "host": socket.gethostname(), "commit": commit,
        "config_hash": spec.config_hash, "config": _config_json(forecaster),
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


@dataclasses.dataclass
class Plan:
    """What a suite invocation will do, before doing it."""

    todo: list[RunSpec]  # runs to train now
    done: list[RunSpec]  # already stored with the current recipe
    stale: list[RunSpec]  # stored with another recipe (kept unless rerun_stale)


def plan(runs: Sequence[RunSpec], store: ResultStore, rerun_stale: bool = False) -> Plan:
    finished: dict[tuple, dict[str, Any]] = {}
    for suite in {r.suite for r in runs}:
        finished.update(store.finished(suite))
    p = Plan([], [], [])
    for r in runs:
        row = finished.get(r.key)
        if row is None:
            p.todo.append(r)
        elif row.get("config_hash") in (None, r.config_hash):
            p.done.append(r)
        else:
            p.stale.append(r)
            if rerun_stale:
                p.todo.append(r)
    return p


def select_part(runs: Sequence[RunSpec], part: tuple[int, int] | None) -> list[RunSpec]:
    """Part k of n (1-based) of the grid, round robin: n processes or machines share one grid
    without running a cell twice (each stores into the same folder or its own shard)."""
    if part is None:
        return list(runs)
    k, n = part
    if not (1 <= k <= n):
        raise TsmixError(f"--part {k}/{n}: need 1 <= k <= n, e.g. --part 1/2 and --part 2/2")
    return [r for i, r in enumerate(runs) if i % n == k - 1]


def estimate_seconds(todo: Sequence[RunSpec], rows: Sequence[dict[str, Any]],
                     column: str = "train_seconds") -> tuple[float, int]:
    """Seconds (``column``: train_seconds = wall, cpu_seconds = CPU) the ``todo`` runs will take,
    from stored rows of the same (model, mixer, dataset), else (model, mixer), else model.
    Returns (seconds, runs without any estimate)."""
    by: dict[tuple, list[float]] = {}
    for r in rows:
        if r.get(column) is None:
            continue
        for k in ((r["model"], r["mixer"], r["dataset"]), (r["model"], r["mixer"]), (r["model"],)):
            by.setdefault(k, []).append(float(r[column]))
    total, unknown = 0.0, 0
    for s in todo:
        for k in ((s.model, s.mixer, s.dataset), (s.model, s.mixer), (s.model,)):
            if k in by:
                total += sum(by[k]) / len(by[k])
                break
        else:
            unknown += 1
    return total, unknown


def run_suite(
    suite: Suite,
    results: str | Path,
    *,
    datasets: Sequence[str] | None = None,
    horizons: Sequence[int] | None = None,
    models: Sequence[str] | None = None,
    mixers: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    data_dir: str | Path | None = None,
    threads: int | None = None,
    shard: str | None = None,
    max_runs: int | None = None,
    part: tuple[int, int] | None = None,
    rerun_stale: bool = False,
    fail_fast: bool = False,
    tracking_uri: str | None = None,
    progress: bool = False,
    checkpoints: str | Path | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run the missing part of a suite grid. Returns counts and the rows written this call.
    ``log`` gets a line as each run starts and one as it ends; ``progress`` adds the engine's line
    per epoch (on stderr), for runs long enough to want one. ``checkpoints``: a folder where every
    run checkpoints after each epoch and a killed run continues (see the module docstring)."""
    if threads is not None:
        torch.set_num_threads(threads)
    store = ResultStore(results, shard=shard)
    runs = select_part(expand(suite, datasets=datasets, horizons=horizons, models=models, mixers=mixers,
                              seeds=seeds), part)
    p = plan(runs, store, rerun_stale=rerun_stale)
    log(f"benchmark {suite.name}: {len(runs)} runs planned, {len(p.done)} already stored, "
        f"{len(p.stale)} stale{' (re-running)' if rerun_stale else ' (kept; --rerun-stale replaces)'}, "
        f"{len(p.todo)} to run{f' (at most {max_runs} now)' if max_runs else ''}")
    if p.todo:  # a missing data file fails every run alike: say so once, before training anything
        from tsmix.datasets import resolve_path

        for dataset in sorted({r.dataset for r in p.todo}):
            resolve_path(dataset, data_dir)
        log(code_line())
        if checkpoints is not None:  # likewise an unusable checkpoint folder (a file, no permission)
            try:
                Path(checkpoints).expanduser().mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise TsmixError(f"checkpoints: cannot use {checkpoints} as the checkpoint folder ({e}); "
                                 "give a folder that exists or can be created") from e
    written: list[dict[str, Any]] = []
    failed: list[tuple[RunSpec, str]] = []
    todo = p.todo[:max_runs] if max_runs else p.todo
    t_start = time.perf_counter()
    for i, spec in enumerate(todo, 1):
        t0 = time.perf_counter()
        started = datetime.now().astimezone().isoformat(timespec="seconds")
        folder = None if checkpoints is None else checkpoint_folder(checkpoints, spec)
        at = None if folder is None else checkpoint_epoch(folder)
        resuming = f"; resuming after epoch {at[0]} of {at[1]} from {folder}" if at else ""
        log(f"[{i}/{len(todo)}] {spec.label}: started {started}{resuming}")
        try:
            head = f"[{i}/{len(todo)}] {spec.label}"
            row = _run_checkpointed(spec, folder, lambda m, head=head: log(f"{head}: {m}"),
                                    data_dir=data_dir, threads=threads, progress=progress)
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # one broken mixer must not stop the grid; it reruns next time
            msg = f"{type(exc).__name__}: {exc}"
            failed.append((spec, msg))
            log(f"[{i}/{len(todo)}] FAILED {spec.label}: {msg}")
            _log_error(Path(results) / suite.name / "errors.log", spec, traceback.format_exc())
            if fail_fast:
                raise
            continue
        store.put(row, replace=rerun_stale)
        if folder is not None:  # the row holds the result now: the weights are no longer needed
            shutil.rmtree(folder, ignore_errors=True)
        written.append(row)
        if tracking_uri:
            log_row_mlflow(row, tracking_uri)
        elapsed = time.perf_counter() - t_start
        eta = elapsed / i * (len(todo) - i)
        log(f"[{i}/{len(todo)}] {spec.label}: mse {row['mse']:.4f} mae {row['mae']:.4f} "
            f"val {row['val_mse']:.4f} epochs {row['epochs']} "
            f"({time.perf_counter() - t0:.1f}s; eta {eta / 60:.1f} min)")
    return {"planned": len(runs), "done_before": len(p.done), "stale": len(p.stale), "ran": len(written),
            "failed": [(s.label, m) for s, m in failed], "rows": written,
            "seconds": time.perf_counter() - t_start}


def code_line() -> str:
    """Which tsmix the runs use and its commit, for the log: ``python -m tsmix`` started inside a
    checkout imports that checkout ahead of ``PYTHONPATH`` (the current folder comes first), so a
    snapshot install is only in use when this line names it."""
    import tsmix

    return f"code: {Path(tsmix.__file__).resolve().parent} at commit {git_commit()}"


def _run_checkpointed(spec: RunSpec, folder: Path | None, log: Callable[[str], None],
                      **kw: Any) -> dict[str, Any]:
    """``run_one``, continuing the checkpoint in ``folder``; one that cannot continue this run (its
    recipe changed under the same hash, e.g. new code, or a file the runner cannot read) is the
    runner's own leftover: it is deleted and the run starts over."""
    try:
        return run_one(spec, checkpoint_dir=folder, **kw)
    except ckpt.CheckpointMismatch as exc:
        if folder is None:
            raise
        log(f"{exc}; deleting it and starting this run over")
        shutil.rmtree(folder, ignore_errors=True)
        return run_one(spec, checkpoint_dir=folder, **kw)


def _log_error(path: Path, spec: RunSpec, tb: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    with open(path, "a") as fh:
        where = f"{socket.gethostname()}, python {platform.python_version()}"
        fh.write(f"--- {stamp} {spec.label} ({where})\n{tb}\n")


def log_row_mlflow(row: dict[str, Any], tracking_uri: str) -> None:
    """One MLflow run per result row (experiment ``tsmix-benchmark-<suite>``)."""
    import mlflow

    mixer = "" if row["mixer"] == NO_MIXER else f"-{row['mixer']}"
    name = f"{row['dataset']}-H{row['horizon']}-{row['model']}{mixer}-s{row['seed']}"
    with benchmark_run(tracking_uri, f"tsmix-benchmark-{row['suite']}", name):
        mlflow.log_params({k: row[k] for k in ("suite", "dataset", "horizon", "lookback", "model", "mixer",
                                               "seed", "protocol", "device", "torch", "commit",
                                               "config_hash")})
        mlflow.log_metrics({k: float(row[k]) for k in ("mse", "mae", "mse_paper", "mae_paper", "val_mse",
                                                       "train_seconds", "params", "epochs")
                            if row.get(k) is not None})
        if row.get("config"):
            mlflow.log_dict(json.loads(row["config"]), "config.json")


def default_shard() -> str | None:
    """Shard name from $TSMIX_BENCHMARK_SHARD (e.g. a host name); None = one file per dataset."""
    return os.environ.get("TSMIX_BENCHMARK_SHARD") or None


__all__ = ["NO_MIXER", "Plan", "build_forecaster", "checkpoint_folder", "code_line", "git_commit", "plan",
           "run_one", "run_suite", "log_row_mlflow", "default_shard"]
