"""The wheel holds every module under the single import name ``tsmix``."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"tsmix": "tsmix", "datasets": "tsmix/datasets", "forecasting": "tsmix/forecasting",
           "models": "tsmix/models", "tuning": "tsmix/tuning"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)],
        check=True, capture_output=True, text=True,
    )
    (whl,) = out.glob("tsmix-*.whl")
    return whl


def test_wheel_contains_every_module_under_tsmix(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = set()
    for folder, target in FOLDERS.items():
        for py in (ROOT / folder).rglob("*.py"):
            if "__pycache__" in py.parts:
                continue
            expected.add(f"{target}/{py.relative_to(ROOT / folder).as_posix()}")
    missing = sorted(expected - names)
    assert not missing, f"modules missing from the wheel: {missing}"
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"tsmix"}, f"unexpected top-level entries: {tops}"


def test_top_level_txt_names_only_tsmix(wheel):
    zf = zipfile.ZipFile(wheel)
    (top,) = [n for n in zf.namelist() if n.endswith(".dist-info/top_level.txt")]
    assert zf.read(top).decode().split() == ["tsmix"]
    (ep,) = [n for n in zf.namelist() if n.endswith(".dist-info/entry_points.txt")]
    assert "tsmix = tsmix.cli:run" in zf.read(ep).decode()


def test_root_cli_runs_from_checkout():
    r = subprocess.run([sys.executable, str(ROOT / "cli.py"), "--help"], capture_output=True,
                       text=True, cwd=ROOT)
    assert r.returncode == 0 and "tsmix" in r.stdout


def test_a_wheel_built_from_the_checkout_names_its_commit(wheel, tmp_path):
    """build_py writes the checkout's commit into the wheel's tsmix/_archive.py, so an install from
    ``pip install .`` records where its results came from (the checkout's own copy keeps the
    placeholders and asks git)."""
    from tsmix.provenance import UNKNOWN, checkout_commit

    full, short = checkout_commit(ROOT, short=False), checkout_commit(ROOT, short=True)
    if UNKNOWN in (full, short):
        pytest.skip("not a git checkout: there is no commit to write")
    text = zipfile.ZipFile(wheel).read("tsmix/_archive.py").decode()
    assert f'FULL = "{full}"' in text and f'SHORT = "{short}"' in text
    assert "$Format:%H$" in (ROOT / "tsmix" / "_archive.py").read_text()  # the checkout is untouched
    # read back the way an installed copy reads it: no .git beside the package
    zipfile.ZipFile(wheel).extractall(tmp_path)
    out = subprocess.run([sys.executable, "-c", "from tsmix.provenance import git_commit as g; print(g())"],
                         cwd=tmp_path, capture_output=True, text=True, env={"PYTHONPATH": str(tmp_path),
                                                                            "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == short
