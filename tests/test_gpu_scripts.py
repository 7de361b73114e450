"""benchmarks/gpu/prepare.sh and check.sh refuse a wrong environment or call before they touch anything."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "prepare.sh"
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _run(python: str, data_dir: Path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "PYTHON": python, "TSMIX_DATA_DIR": str(data_dir)}
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)


def test_a_python_without_polars_is_named_with_the_fix(tmp_path):
    r = _run("false", tmp_path)  # an interpreter that cannot answer stands for one without polars
    assert r.returncode == 2
    assert "has no polars" in r.stderr and "PYTHON=.venv/bin/python" in r.stderr


def test_a_data_dir_without_the_csvs_is_named_with_the_fix(tmp_path):
    r = _run(sys.executable, tmp_path)
    assert r.returncode == 2
    assert f"no ETT-small/ under '{tmp_path}'" in r.stderr and "TSMIX_DATA_DIR" in r.stderr


CHECK = SCRIPT.with_name("check.sh")


@pytest.mark.parametrize(("parts", "says"), [
    (["grid"], "grid: set GRID to the slice's selection flags"),
    (["paper", "papr"], "unknown part 'papr': use paper, grid, tests, speed"),
])
def test_check_refuses_a_bad_call_before_installing_anything(tmp_path, parts, says):
    env = {"PATH": "/usr/bin:/bin", "OUT": str(tmp_path)}
    r = subprocess.run(["bash", str(CHECK), *parts], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and says in r.stdout
    assert not (tmp_path / "gpu.tar.gz").exists()  # it stopped before the parts (nothing packed)
