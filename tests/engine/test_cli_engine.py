"""The engine through the command line: ``tsmix fit --resume`` after SIGKILL, and ``torchrun -m tsmix fit``.

Every run is a real ``tsmix`` subprocess on a small ETTh1 slice with one thread. The resumed fit must
end bitwise where an uninterrupted one ends on CPU (weights, calibration, every metric but wall
times); two DDP processes (gloo) must match one process to float32 summation order (the same
tolerance as tests/engine/test_ddp.py: rtol 1e-4) and write one run directory.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tsmix.engine import checkpoint as ckpt

DROP_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", ckpt.CRASH_ENV)  # the child decides these itself
TIMES = ("train_seconds", "seconds_per_epoch", "fit_seconds", "resumed_cpu_seconds")  # clocks: never equal
TORCHRUN = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
# dropout + batch norm + type3 schedule: RNG, running statistics and schedule state must all resume
PATCH = ["--model", "patchtst", "--d-model", "16", "--heads", "2", "--layers", "1", "--d-ff", "32",
         "--patch-len", "16", "--stride", "8", "--dropout", "0.3", "--lr-schedule", "type3"]
DLINEAR = ["--model", "dlinear", "--lr", "0.005", "--lr-schedule", "onecycle", "--grad-clip", "1.0"]


@pytest.fixture(scope="module")
def slice_csv(data_dir, tmp_path_factory) -> Path:
    """The first 1600 rows of ETTh1 (custom 70/10/20 borders)."""
    path = tmp_path_factory.mktemp("data") / "etth1.csv"
    path.write_text("".join((data_dir / "ETT-small" / "ETTh1.csv").read_text().splitlines(True)[:1601]))
    return path


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DROP_ENV}
    env["OMP_NUM_THREADS"] = "1"
    return env


def _fit_argv(data: Path, out: Path, model: list[str], *extra: str) -> list[str]:
    return ["fit", "--dataset", str(data), "--out", str(out), "--lookback", "96", "--horizon", "24",
            "--epochs", "3", "--batch-size", "64", "--seed", "11", "--patience", "10", "--threads", "1",
            "--no-progress", *model, *extra]


def _tsmix(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tsmix", *argv], env=_env(), capture_output=True, text=True,
                          timeout=timeout)


def _metrics(run: Path) -> dict:
    return {k: v for k, v in json.loads((run / "metrics.json").read_text()).items() if k not in TIMES}


def _history(run: Path) -> list[tuple]:
    """(epoch, train loss, val loss, lr) per epoch, from config.json."""
    hist = json.loads((run / "config.json").read_text())["training"]["history"]
    return [(h["epoch"], h["train_loss"], h["val_loss"], h["lr"]) for h in hist]


def _loop_state(folder: Path) -> tuple[int, bool]:
    _, meta = ckpt.read(folder / ckpt.FILENAME)
    return meta["loop"]["epoch"], meta["loop"]["finished"]


@pytest.mark.slow
def test_fit_killed_then_resumed_equals_an_uninterrupted_fit(slice_csv, tmp_path):
    ref, run = tmp_path / "ref", tmp_path / "run"
    r = _tsmix(*_fit_argv(slice_csv, ref, PATCH))
    assert r.returncode == 0, r.stderr[-3000:]

    folder = Path(f"{run}.ckpt")  # the default checkpoint folder of --resume: beside the run directory
    proc = subprocess.Popen([sys.executable, "-m", "tsmix", *_fit_argv(slice_csv, run, PATCH, "--resume")],
                            env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while not (folder / ckpt.FILENAME).exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        proc.kill()
    epoch, finished = _loop_state(folder)
    assert 1 <= epoch < 3 and not finished and not run.exists()  # killed mid-fit, after >= 1 checkpoint

    r = _tsmix(*_fit_argv(slice_csv, run, PATCH, "--resume"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "test mse" in r.stdout and str(run) in r.stdout
    assert _metrics(run) == _metrics(ref)  # every score, epochs and best epoch
    assert _history(run) == _history(ref)  # losses and learning rates of every epoch
    for name in ("model.safetensors", "calibration.json"):
        assert (run / name).read_bytes() == (ref / name).read_bytes(), name
    assert _loop_state(folder) == (3, True)

    # the same folder with another config: the engine refuses it, one line, exit 2, nothing written
    r = _tsmix(*_fit_argv(slice_csv, tmp_path / "other", PATCH, "--checkpoint-dir", str(folder), "--resume",
                          "--lr", "0.01"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "belongs to another run" in r.stderr and "lr: 0.0001 -> 0.01" in r.stderr
    assert not (tmp_path / "other").exists()


@pytest.mark.slow
@pytest.mark.skipif(not Path(TORCHRUN).exists(), reason="torchrun not installed")
def test_torchrun_fit_matches_one_process_and_writes_one_run(slice_csv, tmp_path):
    single, ddp = tmp_path / "single" / "run", tmp_path / "ddp" / "run"
    r = _tsmix(*_fit_argv(slice_csv, single, DLINEAR))
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run([TORCHRUN, "--standalone", "--nproc_per_node=2", "-m", "tsmix",
                        *_fit_argv(slice_csv, ddp, DLINEAR)], env=_env(), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("test mse") == 1  # rank 0 reports
    assert [p.name for p in ddp.parent.iterdir()] == ["run"]  # one run directory, no temporary left
    a, b = _metrics(single), _metrics(ddp)
    assert b["epochs"] == a["epochs"] == 3 and b["best_epoch"] == a["best_epoch"]
    for key in ("mse", "mae", "val_mse"):
        assert b[key] == pytest.approx(a[key], rel=1e-4), key
    for ha, hb in zip(a["per_channel"].values(), b["per_channel"].values()):
        assert hb == pytest.approx(ha, rel=1e-4)
    cov_a, cov_b = a["probabilistic"]["coverage"], b["probabilistic"]["coverage"]
    assert cov_b == pytest.approx(cov_a, abs=0.01)  # conformal radii of nearly equal weights
