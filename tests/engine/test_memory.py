"""Freed memory kept for reuse (tsmix.engine.memory): no page faults for reallocated large
tensors once applied, nothing changed off glibc, the tsmix command applies it unless told not to."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tsmix import cli
from tsmix.engine import memory
from tsmix.errors import TsmixError

# Minor page faults per allocate-touch-free cycle of a 64 MiB tensor, in a fresh process.
CYCLES = """
import resource, sys, torch
from tsmix.engine.memory import retain_freed_memory
if sys.argv[1] == "retain":
    assert retain_freed_memory()
def cycle():
    t = torch.empty(16 * 2**20)  # 64 MiB of float32: above glibc's largest mmap threshold
    t.fill_(1.0)
    del t
for _ in range(3):  # the heap settles after two cycles (the first free chunk is not reused at once)
    cycle()
r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    cycle()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0) / 20)
"""


def faults_per_cycle(mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", CYCLES, mode], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return float(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc")
def test_retained_memory_is_not_faulted_in_again():
    default = faults_per_cycle("default")
    if default < 1000:  # e.g. transparent huge pages for every mapping: few faults either way
        pytest.skip(f"this kernel faults a 64 MiB allocation in {default:.0f} times; nothing to save")
    retained = faults_per_cycle("retain")
    # 16,384 pages of 4 KiB per cycle vs ~0: a cycle now and then still lands on fresh heap (a free
    # chunk of exactly the size cannot take the aligned request), so the bound is on the mean
    assert retained < default / 4, (default, retained)


def test_nothing_changes_off_glibc(monkeypatch):
    monkeypatch.setattr(memory, "_applied", False)
    monkeypatch.setattr(memory.platform, "libc_ver", lambda: ("", ""))
    assert memory.retain_freed_memory() is False and memory._applied is False


def test_the_environment_switch(monkeypatch):
    calls = []
    monkeypatch.setattr(memory, "retain_freed_memory", lambda: calls.append(1) or True)
    monkeypatch.setenv(memory.ENV, "default")
    assert memory.retain_unless_disabled() is False and calls == []
    monkeypatch.setenv(memory.ENV, "Retain")
    assert memory.retain_unless_disabled() is True and calls == [1]
    monkeypatch.delenv(memory.ENV)
    assert memory.retain_unless_disabled() is True and calls == [1, 1]
    monkeypatch.setenv(memory.ENV, "yes")
    with pytest.raises(TsmixError, match="TSMIX_MALLOC='yes'.*'retain'.*'default'"):
        memory.retain_unless_disabled()


def test_the_command_applies_it_first(monkeypatch, capsys):
    order = []
    monkeypatch.setattr(memory, "retain_unless_disabled", lambda: order.append("malloc") or True)
    monkeypatch.setattr(cli, "main", lambda argv=None: order.append("main") or 0)
    with pytest.raises(SystemExit) as exit_:
        cli.run()
    assert exit_.value.code == 0 and order == ["malloc", "main"]

    def refuse():
        raise TsmixError("TSMIX_MALLOC='x': use 'retain' (keep freed memory, the default) or 'default'")

    monkeypatch.setattr(memory, "retain_unless_disabled", refuse)
    with pytest.raises(SystemExit) as exit_:
        cli.run()
    assert exit_.value.code == 2 and "tsmix: error: TSMIX_MALLOC='x'" in capsys.readouterr().err
