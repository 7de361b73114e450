"""Where a result came from: the git commit of the tsmix checkout that produced it.

One lookup for every writer of provenance (benchmark rows and reports, the speed suite,
MLflow tags), so all of them name the same commit the same way.
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

    root = Path(tsmix.__file__).resolve().parent.parent  # the repository root of a checkout
    if not (root / ".git").exists():  # site-packages inside some other repository is not ours
        return UNKNOWN
    return checkout_commit(root, short)


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
