"""The files of a run directory: where they go, reading them defensively, temporary folders.

``check_out_dir`` answers "can a run be written there?" before any training; ``read_json``,
``read_tensors`` and ``load_state`` turn a truncated, empty or foreign file into one line naming it;
``remove_orphans`` clears the temporary folders of saves that were killed (their writer's pid is dead,
or they are older than a day when the writer cannot be checked), and ``refuse_temporary`` keeps them
from being used as runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from torch import nn

from tsmix.errors import TsmixError

WEIGHTS = "model.safetensors"
CONTEXT = "context.safetensors"
PLOT = "forecast.png"
CALIBRATION = "calibration.json"  # a point model's split-conformal radii (scaled units)
TMP_TAG = ".tmp-"  # .<run>.tmp-XXXX: a save in progress (or killed)
OLD_TAG = ".old-"  # .<run>.old-XXXX: the replaced run, removed once the new one is in place
WRITER = ".tsmix-writer"  # {"pid", "host"} of the process writing a temporary folder
STALE_SECONDS = 24 * 3600  # a temporary folder whose writer cannot be checked is an orphan after this
_TEMPORARY = re.compile(r"^\.(?P<run>.+)\.(tmp|old)-[A-Za-z0-9_]+$|^\.atomic\.tmp-[A-Za-z0-9_]+$")
_RERUN = "re-run tsmix fit to write the run again"


def check_out_dir(path: str | Path, marker: str = "config.json") -> Path:
    """``path`` resolved, once a run directory can be written there; one-line TsmixError otherwise.

    Accepted: a new path under a writable folder, an empty folder, or an earlier run directory
    (replaced on save; recognised by its ``marker`` file). Refused: a file, a path under a file, a
    foreign non-empty folder, a place this process cannot write to. Nothing is left behind (a probe
    folder is made and removed).
    """
    try:
        p = Path(path).expanduser().resolve()
    except (OSError, RuntimeError) as exc:
        raise TsmixError(f"--out {path} cannot be resolved ({exc}); choose another folder") from None
    if p.exists():
        if not p.is_dir():
            raise TsmixError(f"--out {p} exists and is a file; choose a folder path")
        if any(p.iterdir()) and not (p / marker).exists():
            raise TsmixError(f"{p} exists and is not a tsmix run directory; choose another --out")
    anchor = p.parent
    while not anchor.exists() and anchor != anchor.parent:
        anchor = anchor.parent
    if not anchor.is_dir():
        raise TsmixError(f"--out {p} lies under {anchor}, which is a file; choose a folder path")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".tsmix-probe-", dir=anchor))
    except OSError as exc:
        raise TsmixError(f"--out {p}: cannot write in {anchor} ({exc.strerror}); "
                         "choose a writable folder") from None
    return p


@contextlib.contextmanager
def atomic_dir(path: str | Path, marker: str = "config.json") -> Iterator[Path]:
    """Yield a temporary folder beside ``path`` (checked with :func:`check_out_dir`, orphans of killed
    saves cleared first); on success it replaces ``path`` in one rename, on any error it is removed
    and ``path`` is untouched."""
    path = check_out_dir(path, marker)
    remove_orphans(path.parent)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}{TMP_TAG}", dir=path.parent))
    except OSError as exc:
        raise TsmixError(f"cannot write the run directory {path} ({exc.strerror}); "
                         "choose another --out") from None
    try:
        mark_writer(tmp)  # whose temporary folder this is, so an orphan can be told from a live save
        yield tmp
        mark_writer(tmp, remove=True)
        if path.exists():  # swap: the old run is renamed away only once the new one is complete
            old = path.with_name(f".{path.name}{OLD_TAG}{uuid.uuid4().hex[:8]}")
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def mark_writer(folder: Path, remove: bool = False) -> None:
    """Stamp (or unstamp, just before the rename) a temporary folder with this process."""
    marker = folder / WRITER
    if remove:
        marker.unlink(missing_ok=True)
    else:
        marker.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _orphan(folder: Path) -> bool:
    try:
        writer = json.loads((folder / WRITER).read_text())
    except (OSError, ValueError):
        writer = None
    if isinstance(writer, dict) and writer.get("host") == socket.gethostname():
        return not _alive(int(writer.get("pid", -1)))
    try:  # another host's, or no marker (a replaced run, an older tsmix): go by age
        return time.time() - folder.stat().st_mtime > STALE_SECONDS
    except OSError:
        return False


def remove_orphans(parent: Path) -> list[Path]:
    """Delete the temporary folders of killed saves in ``parent``; returns what was removed."""
    removed = []
    for d in _temporaries(parent):
        if _orphan(d):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


def _temporaries(parent: Path) -> Iterable[Path]:
    try:
        entries = list(parent.iterdir())
    except OSError:
        return []
    return [d for d in entries if _TEMPORARY.match(d.name) and d.is_dir() and not d.is_symlink()]


def refuse_temporary(path: Path) -> None:
    """A save's temporary folder is never a run (it may be half written)."""
    m = _TEMPORARY.match(path.name)
    if m is None and not (path / WRITER).exists():
        return
    final = path.with_name(m.group("run")) if m and m.group("run") else path.parent
    raise TsmixError(f"{path} is the temporary folder of an interrupted save, not a run; use {final} "
                     "(re-run tsmix fit if it is missing)")


def read_run_meta(path: Path, fmt: str, *, kind: str, missing_fix: str, wrong_fix: str) -> tuple[Path, dict]:
    """``(config.json path, its dict)`` of a run directory whose config names format ``fmt``.

    The checks every run reader shares: not a temporary folder of a killed save, a config.json there,
    and the right format; ``kind`` names what was expected, the ``*_fix`` texts what to pass instead.
    """
    refuse_temporary(path)
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        hint = "it is a file" if path.is_file() else "no config.json"
        raise TsmixError(f"{path} is not a tsmix run directory ({hint}); {missing_fix}")
    meta = read_json(cfg_file)
    if not isinstance(meta, dict) or meta.get("format") != fmt:
        got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise TsmixError(f"{cfg_file} is not a {kind} (format {got!r}); {wrong_fix}")
    return cfg_file, meta


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        why = getattr(exc, "strerror", None) or (str(exc).splitlines() or ["empty"])[0]
        raise TsmixError(f"{path} is damaged (not readable JSON: {why}); {_RERUN}") from None


def read_tensors(path: Path, keys: tuple[str, ...] = ()) -> dict[str, Any]:
    """A safetensors file's tensors, with ``keys`` present; never unpickles anything."""
    from safetensors.torch import load_file

    if not path.is_file():
        raise TsmixError(f"{path.parent} has no {path.name}: the run is incomplete; {_RERUN}")
    try:
        tensors = load_file(str(path))
    except Exception as exc:  # noqa: BLE001 - SafetensorError, OSError...: any unreadable file is named
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise TsmixError(f"{path} is damaged ({why}); {_RERUN}") from None
    missing = [k for k in keys if k not in tensors]
    if missing:
        raise TsmixError(f"{path} lacks {missing}; {_RERUN}")
    return tensors


def load_state(model: nn.Module, run: Path,
               convert: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
    """Load ``run``'s weights into ``model``; the names and shapes must be the config's.

    ``convert`` maps the stored state dict first (an older format's key layout)."""
    if not (run / WEIGHTS).is_file():
        pt = (run / "model.pt").exists()
        stray = " (its model.pt is never read: torch pickles can run code)" if pt else ""
        raise TsmixError(f"no weights in {run}: expected {WEIGHTS}{stray}; {_RERUN}")
    state = read_tensors(run / WEIGHTS)
    if convert is not None:
        state = convert(state)
    want = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    got = {k: tuple(v.shape) for k, v in state.items()}
    problem = None
    if set(want) - set(got):
        problem = f"missing {sorted(set(want) - set(got))[:3]}"
    elif set(got) - set(want):
        problem = f"unexpected {sorted(set(got) - set(want))[:3]}"
    else:
        bad = [k for k in want if want[k] != got[k]]
        if bad:
            problem = f"{bad[0]} is {got[bad[0]]} but config.json builds {want[bad[0]]}"
    if problem:
        raise TsmixError(f"{run / WEIGHTS} does not match {run / 'config.json'} ({problem}): the files come "
                         f"from different runs; {_RERUN}")
    model.load_state_dict(state)
