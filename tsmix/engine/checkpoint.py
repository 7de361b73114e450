"""Checkpoint files: one safetensors file per run, tensors in the body, everything else as JSON.

A checkpoint is written to a temporary name in the same folder, fsynced, then renamed over the
previous one (``os.replace``), so a crash at any moment leaves either the old or the new file,
never half of one. Reading uses safetensors only: nothing is unpickled. Non-tensor state
(optimizer hyper-parameters, scheduler counters, RNG tuples, history) is encoded to JSON with
every tensor or array inside it replaced by a reference to a named tensor of the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import torch
from filelock import FileLock, Timeout
from safetensors import safe_open
from safetensors.torch import save

from tsmix.atomic import fsync_path
from tsmix.errors import TsmixError

FILENAME = "last.safetensors"
TMP_PREFIX = f".{FILENAME}.tmp-"  # leftovers of killed writes; removed when the folder is next opened
LOCK = ".lock"
FORMAT, VERSION = "tsmix.checkpoint", 1
# Test hook: the N-th checkpoint write of this process writes half its temp file, then the process
# exits at once (as if killed mid-write), so resume-after-crash can be tested without timing races.
CRASH_ENV = "TSMIX_CHECKPOINT_CRASH_AT"
_writes = 0


class CheckpointMismatch(TsmixError):
    """A checkpoint that cannot continue this run: another config or data, another format, or
    unreadable. Its own class so that a caller owning the folder (the benchmark runner) can start
    the run over instead of failing it."""


# --------------------------------------------------------------------------- JSON <-> tensors codec
def encode(obj: Any, tensors: dict[str, torch.Tensor], prefix: str) -> Any:
    """A JSON-able copy of ``obj``; tensors/arrays go into ``tensors`` under keys starting ``prefix``."""
    if torch.is_tensor(obj):
        key = f"{prefix}#{len(tensors)}"
        tensors[key] = obj.detach().cpu().contiguous().clone()  # clone: safetensors refuses shared storage
        return {"__tensor__": key}
    if isinstance(obj, np.ndarray):
        wide = obj.astype(np.int64 if obj.dtype.kind in "iu" else obj.dtype)  # e.g. uint32 RNG keys
        return {"__ndarray__": encode(torch.from_numpy(wide), tensors, prefix), "dtype": str(obj.dtype)}
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj):
            return {"__dict__": {k: encode(v, tensors, prefix) for k, v in obj.items()}}
        items = [[encode(k, tensors, prefix), encode(v, tensors, prefix)] for k, v in obj.items()]
        return {"__items__": items}  # non-str keys (optimizer state is keyed by int)
    if isinstance(obj, tuple):
        return {"__tuple__": [encode(v, tensors, prefix) for v in obj]}
    if isinstance(obj, list):
        return [encode(v, tensors, prefix) for v in obj]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TsmixError(
        f"cannot store a {type(obj).__name__} in a checkpoint (only tensors, arrays and JSON values)"
    )


def decode(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """Inverse of :func:`encode`."""
    if isinstance(obj, list):
        return [decode(v, tensors) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if "__tensor__" in obj:
        return tensors[obj["__tensor__"]]
    if "__ndarray__" in obj:
        return decode(obj["__ndarray__"], tensors).numpy().astype(obj["dtype"])
    if "__tuple__" in obj:
        return tuple(decode(v, tensors) for v in obj["__tuple__"])
    if "__items__" in obj:
        return {decode(k, tensors): decode(v, tensors) for k, v in obj["__items__"]}
    return {k: decode(v, tensors) for k, v in obj["__dict__"].items()}


# --------------------------------------------------------------------------- atomic file IO
def write(path: Path, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    """Write ``tensors`` + JSON ``meta`` to ``path`` atomically and durably."""
    global _writes
    blob = save({k: v.detach().cpu().contiguous() for k, v in tensors.items()},
                metadata={"tsmix": json.dumps(meta)})
    tmp = path.with_name(f"{TMP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}")
    _writes += 1
    try:
        with open(tmp, "wb") as f:
            if os.environ.get(CRASH_ENV) == str(_writes):
                f.write(blob[: len(blob) // 2])
                f.flush()
                os.fsync(f.fileno())
                os._exit(137)
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_path(path.parent)  # make the rename itself durable


def read(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Tensors and JSON meta of a checkpoint written by :func:`write` (no pickle involved)."""
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            meta = json.loads((f.metadata() or {})["tsmix"])
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open has no __iter__)
    except Exception as exc:  # safetensors' SafetensorError derives from Exception only
        raise CheckpointMismatch(f"checkpoint {path} is unreadable ({exc}); delete it to start over") from exc
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise CheckpointMismatch(
            f"{path} is not a tsmix checkpoint of version {VERSION}; delete it to start over")
    return tensors, meta


def read_meta(path: Path) -> dict[str, Any] | None:
    """The JSON meta of a checkpoint (epoch, history, config) without loading its tensors; None when
    there is no readable tsmix checkpoint at ``path``."""
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            meta = json.loads((f.metadata() or {})["tsmix"])
    except Exception:  # missing, half-written or foreign: the caller only wanted to peek
        return None
    return meta if meta.get("format") == FORMAT else None


# --------------------------------------------------------------------------- run identity
def fingerprint(config: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of a run's config: equal configs, equal fingerprints."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


def config_diff(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """``key: old -> new`` for every leaf that differs (nested dicts walked)."""
    out = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k, "<absent>"), new.get(k, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            out += config_diff(a, b, f"{prefix}{k}.")
        elif a != b:
            out.append(f"{prefix}{k}: {a!r} -> {b!r}")
    return out


# --------------------------------------------------------------------------- the run's folder
class CheckpointDir:
    """The folder of one run's checkpoint; locked while a run trains in it (one writer at a time).

    Entering it creates the folder, takes the lock (a second run on the same folder is refused)
    and deletes temporary files left by writes that were killed.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        self.file = self.path / FILENAME
        self._lock = FileLock(str(self.path / LOCK))

    def __enter__(self) -> CheckpointDir:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TsmixError(f"cannot create checkpoint folder {self.path}: {exc}") from exc
        try:
            self._lock.acquire(timeout=0)
        except Timeout as exc:
            raise TsmixError(
                f"checkpoint folder {self.path} is in use by another training run; "
                "wait for it or use another folder"
            ) from exc
        for stale in self.path.glob(f"{TMP_PREFIX}*"):
            stale.unlink(missing_ok=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def exists(self) -> bool:
        return self.file.is_file()
