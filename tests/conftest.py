"""Shared fixtures. Tests are small so the suite stays under ten minutes on 2 cores."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

# One thread: tiny test models gain nothing from more, and oversubscription slows them badly.
torch.set_num_threads(1)


@pytest.fixture(scope="session", autouse=True)
def _run_outside_the_checkout(tmp_path_factory):
    """Run every test from a scratch folder: MLflow's sqlite stores put artifacts in ./mlruns (and a
    default store in ./mlflow.db), which must never land in the checkout. A relative data folder
    is resolved first, so it keeps pointing where it did."""
    env = os.environ.get("TSMIX_DATA_DIR")
    if env:
        os.environ["TSMIX_DATA_DIR"] = str(Path(env).resolve())
    old = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("cwd"))
    yield
    os.chdir(old)


@pytest.fixture(autouse=True)
def _one_thread_after_each_test():
    """Code under test may set torch's thread count (``threads=...``); put it back to 1."""
    yield
    torch.set_num_threads(1)


# Read once, at collection: a test that unsets TSMIX_DATA_DIR (monkeypatch) and happens to be the
# first to ask for the session-scoped fixture must not turn every later data test into a skip.
_DATA_ENV = os.environ.get("TSMIX_DATA_DIR")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real benchmark data (CI sets TSMIX_DATA_DIR=../shared/data)."""
    candidates = [Path(_DATA_ENV)] if _DATA_ENV else []
    candidates.append(Path(__file__).resolve().parents[1].parent / "shared" / "data")
    for c in candidates:
        if (c / "ETT-small" / "ETTh1.csv").exists():
            return c
    pytest.skip("benchmark data not found: set TSMIX_DATA_DIR to the shared data folder")
