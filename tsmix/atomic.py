"""Atomic file writes: a reader, or a run killed half-way, sees the old file or the new one whole.

Every writer of a result, report, table, plot or download goes through :func:`atomic_path`: the
data is written to a temporary sibling (same folder, so the rename stays on one file system),
flushed to disk, and renamed over the target; on any error the sibling is removed and the
target is untouched. Checkpoints (``tsmix.engine.checkpoint``) and run directories
(``tsmix.forecasting.rundir_files``) keep their own forms: a crash-injection hook and a
directory swap.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["atomic_path", "fsync_path", "save_figure_atomic", "write_bytes_atomic", "write_text_atomic"]


def _umask() -> int:
    try:  # Linux reports it without changing it (set-and-restore races with other threads)
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def fsync_path(path: str | os.PathLike[str]) -> None:
    """Flush a file, or a folder's entries (a rename in it), to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], *, suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temporary sibling of ``path`` to write (by name: ``savefig``, ``to_parquet``, ...);
    when the block ends without an error it is synced and renamed over ``path``.

    The parent folder is created; the file gets the permissions of a plain ``open`` (``0666``
    less the umask; ``mkstemp`` alone makes ``0600``). ``suffix`` keeps the extension a writer
    may infer the format from (``.png``)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=target.parent)
    os.fchmod(fd, 0o666 & ~_umask())
    os.close(fd)
    try:
        yield Path(name)
        fsync_path(name)  # the bytes are on disk before the rename makes them the file
        os.replace(name, target)
        with contextlib.suppress(OSError):  # and the rename itself, where a folder can be opened
            fsync_path(target.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)
        raise


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; returns ``path`` as a Path."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; returns ``path`` as a Path."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def save_figure_atomic(fig: Any, path: str | os.PathLike[str], **savefig: Any) -> Path:
    """``fig.savefig`` (a matplotlib figure) to ``path`` as PNG, atomically; ``savefig`` options
    (``dpi``, ...) pass through. Returns ``path`` as a Path."""
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, format="png", **savefig)
    return Path(path)
