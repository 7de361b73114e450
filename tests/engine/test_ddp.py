"""torchrun --standalone --nproc_per_node=2 (gloo, CPU) matches one process with the same global batch.

Each rank trains on half of every global batch of 64 (32 windows) and validates half of the
validation windows; DDP averages gradients and the engine sums validation losses over ranks, so the
only difference from one process is float32 summation order: metrics agree to rtol 1e-4 and
weights to atol 1e-4 after 3 epochs (measured here: metrics within 3e-8 relative, weights within
1.5e-5 absolute). Models without dropout or batch norm, whose per-rank masks/statistics would
legitimately differ.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tsmix.engine import checkpoint as ckpt

SCRIPT = Path(__file__).with_name("run_fit.py")
DROP_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", ckpt.CRASH_ENV)  # the child decides these itself
_spec = importlib.util.spec_from_file_location("engine_run_fit_ddp", SCRIPT)
run_fit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run_fit)
MODELS = ("dlinear", "patch-ddp")


TORCHRUN = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))


@pytest.mark.skipif(not Path(TORCHRUN).exists(), reason="torchrun not installed")
def test_torchrun_two_processes_match_one(data_dir, tmp_path):
    single = {m: run_fit.fit_summary(m, epochs=3) for m in MODELS}
    out_dir, ck = tmp_path / "out", tmp_path / "ck"
    out_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in DROP_ENV}
    env.update(TSMIX_DATA_DIR=str(data_dir), OMP_NUM_THREADS="1")
    r = subprocess.run([TORCHRUN, "--standalone", "--nproc_per_node=2", str(SCRIPT),
                        str(out_dir / "ddp.json"), ",".join(MODELS), "--epochs", "3", "--ckpt", str(ck)],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert [p.name for p in out_dir.iterdir()] == ["ddp.json"]  # one output, rank 0's
    assert r.stdout.count("epoch 3") == 2  # callbacks ran once per model: on rank 0 only
    ddp = json.loads((out_dir / "ddp.json").read_text())
    for m in MODELS:
        files = sorted(p.name for p in (ck / m).iterdir())
        assert files == [ckpt.LOCK, ckpt.FILENAME]  # written by rank 0 only, no temp file left
        a, b = single[m], ddp[m]
        assert b["epochs"] == a["epochs"] == 3 and b["best_epoch"] == a["best_epoch"]
        for key in ("mse", "mae", "val_mse"):
            assert b[key] == pytest.approx(a[key], rel=1e-4), (m, key)
        for ha, hb in zip(a["history"], b["history"]):
            assert hb[1:3] == pytest.approx(ha[1:3], rel=1e-4) and hb[3] == ha[3]  # losses; lr exact
        for k, v in a["state"].items():
            assert b["state"][k] == pytest.approx(v, abs=1e-4), (m, k)
