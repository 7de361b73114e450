"""tsmix.atomic: the target is the old file or the new one whole, never half, never a leftover."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tsmix.atomic import atomic_path, write_bytes_atomic, write_text_atomic


def _siblings(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_write_text_and_bytes_replace_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "report.md"  # the parent folder is created
    assert write_text_atomic(target, "first\n") == target
    assert target.read_text() == "first\n"
    write_text_atomic(str(target), "second, longer\n")
    assert target.read_text() == "second, longer\n"
    write_bytes_atomic(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    assert _siblings(target.parent) == ["report.md"]  # no temporary file left behind


def test_error_in_block_keeps_old_file_and_removes_temporary(tmp_path: Path) -> None:
    target = tmp_path / "rows.csv"
    target.write_text("old\n")
    with pytest.raises(RuntimeError, match="writer failed"), atomic_path(target) as tmp:
        tmp.write_text("half a ne")
        raise RuntimeError("writer failed")
    assert target.read_text() == "old\n"
    assert _siblings(tmp_path) == ["rows.csv"]


def test_temporary_is_a_sibling_with_the_suffix_and_plain_permissions(tmp_path: Path) -> None:
    target = tmp_path / "plot.png"
    old = os.umask(0o027)
    try:
        with atomic_path(target, suffix=".png") as tmp:
            assert tmp.parent == tmp_path and tmp.name.startswith(".plot.png.") and tmp.suffix == ".png"
            tmp.write_bytes(b"png")
            assert not target.exists()  # nothing at the target until the block ends
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # 0666 less the umask, not mkstemp's 0600


def test_killed_writer_leaves_old_file(tmp_path: Path) -> None:
    """A process killed mid-write (os._exit inside the block) never touches the target."""
    target = tmp_path / "results.csv"
    target.write_text("a,b\n1,2\n")
    code = textwrap.dedent(f"""
        import os
        from tsmix.atomic import atomic_path
        with atomic_path({str(target)!r}) as tmp:
            tmp.write_text("a,b\\n1,")
            os._exit(137)
    """)
    proc = subprocess.run([sys.executable, "-c", code], check=False)
    assert proc.returncode == 137
    assert target.read_text() == "a,b\n1,2\n"
    leftovers = [n for n in _siblings(tmp_path) if n != "results.csv"]
    assert len(leftovers) == 1 and leftovers[0].startswith(".results.csv.")  # hidden, never the target
