"""Where a result came from: the git commit of the tsmix code that produced it.

One lookup for every writer of provenance (benchmark rows and reports, the speed suite, the
model and reproduction scripts, MLflow tags), so all of them name the same commit the same way.
A checkout asks git; a copy installed from a ``git archive`` (a release tarball, or a snapshot
installed to run benchmarks while the checkout moves on) reads the hash ``git archive`` wrote
into :mod:`tsmix._archive`.
"""

from __future__ import annotations

import subprocess
from functools import lru_cache
from pathlib import Path

UNKNOWN = "unknown"  # an installed wheel, no git, or git failed


DIRTY = "+dirty"  # suffix when tracked files differ from HEAD: the result is not exactly that commit


@lru_cache(maxsize=2)
def git_commit(short: bool = True) -> str:
    """The HEAD commit of the checkout tsmix is imported from (short or full hash), with ``+dirty``
    when tracked files were changed since, or "unknown"."""
    import tsmix

    return commit_at(Path(tsmix.__file__).resolve().parent.parent, short)


def commit_at(root: Path, short: bool = True) -> str:
    """The commit of tsmix imported from below ``root``: git's answer in a checkout, else the
    archive's hash, else "unknown"."""
    if (root / ".git").exists():
        return checkout_commit(root, short)
    return archived_commit(short)  # site-packages inside some other repository is not ours


def archived_commit(short: bool = True) -> str:
    """The hash ``git archive`` wrote into :mod:`tsmix._archive`, or "unknown" (not an archive)."""
    from tsmix import _archive

    value = _archive.SHORT if short else _archive.FULL
    return UNKNOWN if value.startswith("$Format") or not value else value


def checkout_commit(root: Path, short: bool = True) -> str:
    """HEAD of the git checkout at ``root`` (``+dirty`` when tracked files changed; untracked files
    do not count), or "unknown"."""
    cmd = ["git", "rev-parse", *(["--short"] if short else []), "HEAD"]
    try:
        out = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=10)
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN
    head = out.stdout.strip()
    if out.returncode != 0 or not head:
        return UNKNOWN
    return head + DIRTY if status.returncode == 0 and status.stdout.strip() else head


@lru_cache(maxsize=4)
def processor(device: str = "cpu") -> str:
    """The hardware a timing ran on, for reports: the CUDA device's name, or the CPU's model name
    (``/proc/cpuinfo``, else ``platform.processor()``) and logical core count. Timings from two
    machines of one kind can differ by 1.4x; this names which one a number came from."""
    import os
    import platform

    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    name = ""
    try:
        with open("/proc/cpuinfo") as fh:
            name = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), "")
    except OSError:
        pass
    name = name or platform.processor() or platform.machine() or UNKNOWN
    return f"{name}, {os.cpu_count()} logical cores"
