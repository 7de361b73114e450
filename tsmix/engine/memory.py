"""Keep freed memory in the process (glibc malloc) so a training step does not page-fault.

glibc serves every allocation above its mmap threshold (at most 32 MiB) with a fresh ``mmap`` and
returns it to the kernel on ``free``; on CPU each step allocates its activations anew, so every
page of every large tensor is faulted in again on every step. At the patch encoder's long
lookbacks that is half the step: ETTm1 preset, L=2880, batch 32, yb-spectral, 1 thread:
2.7 s user + 3.0 s system (1.3 M minor faults) per step, against 2.8 s + 0.1 s with the freed
memory kept (``benchmarks/bench_malloc.txt``); at L=336 the two are the same.
:func:`retain_freed_memory` serves every allocation from the heap (``M_MMAP_MAX = 0``) and trims
the heap only beyond 2 GiB of free top (``M_TRIM_THRESHOLD``), the way PyTorch's CUDA caching
allocator keeps GPU memory: the process's resident memory then stays near its peak until it exits.

The ``tsmix`` command applies it at start (``TSMIX_MALLOC=default`` turns that off); a library
user calls it once at the start of a training script. Process-global and not undone.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys

from tsmix.errors import TsmixError

ENV = "TSMIX_MALLOC"  # "retain" (the tsmix command's default) or "default" (leave malloc as it is)
# mallopt(3) parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
TRIM_THRESHOLD = 2**31 - 1  # mallopt takes an int: return memory only past 2 GiB of free heap top

_applied = False


def retain_freed_memory() -> bool:
    """Make glibc keep freed memory for reuse; True when applied (now or before), False where the
    C library is not glibc (macOS, musl, Windows: nothing is changed)."""
    global _applied
    if _applied:
        return True
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(None)  # the process's own symbols: glibc is loaded already
    if not (libc.mallopt(M_MMAP_MAX, 0) and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        return False
    _applied = True
    return True


def retained() -> bool:
    """Whether this process keeps freed memory (:func:`retain_freed_memory` was applied)."""
    return _applied


def retain_unless_disabled() -> bool:
    """:func:`retain_freed_memory` unless ``TSMIX_MALLOC=default`` (what the ``tsmix`` command runs)."""
    choice = os.environ.get(ENV, "retain").strip().lower()
    if choice not in ("retain", "default"):
        raise TsmixError(f"{ENV}={choice!r}: use 'retain' (keep freed memory, the default) or 'default'")
    return choice == "retain" and retain_freed_memory()


__all__ = ["ENV", "retain_freed_memory", "retain_unless_disabled", "retained"]
