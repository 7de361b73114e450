"""Resume after SIGKILL (mid-training, and mid-checkpoint-write) ends bit-identical to an uninterrupted run.

Bitwise on CPU because the checkpoint restores every input of the remaining computation exactly
(weights, Adam moments and step counts, scheduler counters, the torch/numpy/python RNGs that
dropout uses, the shuffling generator, early-stopping state with the best weights, the epoch), and
CPU kernels are deterministic for the same inputs, build and thread count (tests use 1 thread).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tsmix.engine import checkpoint as ckpt
from tsmix.errors import TsmixError

SCRIPT = Path(__file__).with_name("run_fit.py")
DROP_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", ckpt.CRASH_ENV)  # the child decides these itself
_spec = importlib.util.spec_from_file_location("engine_run_fit", SCRIPT)
run_fit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run_fit)
fit_summary = run_fit.fit_summary


def _env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DROP_ENV}
    env.update(TSMIX_DATA_DIR=str(data_dir), OMP_NUM_THREADS="1", **extra)
    return env


def _run(out: Path, model: str, data_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(out), model, *args], env=_env(data_dir, **env),
                          capture_output=True, text=True, timeout=120)


def _epoch_of(folder: Path) -> tuple[int, bool]:
    _, meta = ckpt.read(next(folder.glob(f"*/{ckpt.FILENAME}")))
    return meta["loop"]["epoch"], meta["loop"]["finished"]


@pytest.fixture(scope="module")
def reference(data_dir, tmp_path_factory) -> dict[str, dict]:
    """Uninterrupted runs of both models, in this process (one thread, as the subprocesses)."""
    tmp = tmp_path_factory.mktemp("ref")
    return {m: json.loads(json.dumps(fit_summary(m, str(tmp / m)))) for m in ("patchtst", "dlinear")}


def test_sigkill_mid_training_then_resume_is_bitwise(reference, data_dir, tmp_path):
    folder, out = tmp_path / "ck", tmp_path / "out.json"
    cmd = [sys.executable, str(SCRIPT), str(out), "patchtst", "--ckpt", str(folder), "--resume"]
    proc = subprocess.Popen(cmd, env=_env(data_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        for line in proc.stdout:  # epoch 2's callback runs after epoch 1's checkpoint was written
            if line.strip() == "epoch 2":
                proc.send_signal(signal.SIGKILL)
                break
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        proc.kill()
    epoch, finished = _epoch_of(folder)
    assert 1 <= epoch < 4 and not finished and not out.exists()  # killed mid-run, after >= 1 checkpoint
    r = _run(out, "patchtst", data_dir, "--ckpt", str(folder), "--resume")
    assert r.returncode == 0, r.stderr
    assert f"epoch {epoch + 1}" in r.stdout and "epoch 1\n" not in r.stdout  # it continued, not restarted
    # metrics, history and every weight bit
    assert json.loads(out.read_text())["patchtst"] == reference["patchtst"]


def test_kill_during_checkpoint_write_then_resume(reference, data_dir, tmp_path):
    folder, out = tmp_path / "ck", tmp_path / "out.json"
    r = _run(out, "dlinear", data_dir, "--ckpt", str(folder), "--resume", **{ckpt.CRASH_ENV: "3"})
    assert r.returncode == 137 and not out.exists()
    leftovers = list(folder.glob(f"*/{ckpt.TMP_PREFIX}*"))
    assert len(leftovers) == 1 and leftovers[0].stat().st_size > 0  # half-written temp file
    assert _epoch_of(folder) == (2, False)  # the last complete checkpoint is intact
    r = _run(out, "dlinear", data_dir, "--ckpt", str(folder), "--resume")
    assert r.returncode == 0, r.stderr
    assert not list(folder.glob(f"*/{ckpt.TMP_PREFIX}*"))  # cleaned up on the next run
    assert json.loads(out.read_text())["dlinear"] == reference["dlinear"]
    assert _epoch_of(folder) == (4, True)
    again = fit_summary("dlinear", str(folder / "dlinear"), resume=True)  # finished: restores, trains nothing
    assert json.loads(json.dumps(again)) == reference["dlinear"]


def test_resume_with_another_config_is_refused(data_dir, tmp_path):
    folder = str(tmp_path / "ck")
    fit_summary("dlinear", folder, epochs=1)
    with pytest.raises(TsmixError, match=r"belongs to another run \(.*epochs: 1 -> 2"):
        fit_summary("dlinear", folder, resume=True, epochs=2)
    with pytest.raises(TsmixError, match=r"data\.sha256"):  # same config, other data
        fit_summary("dlinear", folder, resume=True, epochs=1, rows=1100)
    fit_summary("dlinear", folder, resume=False, epochs=2)  # without resume: a fresh run overwrites it
