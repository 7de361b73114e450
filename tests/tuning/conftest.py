"""Fixtures of the tuning tests: real services (an ``mlflow server``, PostgreSQL) and tiny data."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import types
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

PG_URL = os.environ.get("TSMIX_TEST_PG", "postgresql+psycopg2://postgres@127.0.0.1:5432/test")
MINI_ROWS = 800  # rows of ETTh1 in the tiny CSV: 70/10/20 split, a fit takes a fraction of a second


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen, timeout: float, log: Path) -> None:
    """Poll ``url`` until it answers 200; fail with the process log if it dies or times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{proc.args[:4]} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.25)
    pytest.fail(f"{url} did not answer within {timeout} s:\n{log.read_text()[-3000:]}")


def stop(proc: subprocess.Popen) -> None:
    """Terminate the process group we started (the server and its uvicorn children).

    uvicorn's graceful shutdown waits for idle keep-alive connections of our clients, so
    after a short grace the group is killed."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR="false",
               PYTHONUNBUFFERED="1")
    env.pop("MLFLOW_TRACKING_URI", None)  # only what the test passes
    # mlflow starts helpers (uvicorn for `models serve`) by name: find the ones beside this
    # interpreter even when its venv is not activated (`/path/venv/bin/python -m pytest`)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bindir, env.get("PATH", "")]) if env.get("PATH") else bindir
    env.update(extra)
    return env


@contextlib.contextmanager
def serve(model_dir: Path, cwd: Path) -> Iterator[Callable[[str, str], tuple[int, str]]]:
    """``mlflow models serve`` of ``model_dir`` (local env) on a free port; yields ``post(body,
    content_type) -> (status, text)`` for /invocations, and stops the server on exit."""
    port = free_port()
    log = cwd / "serve.log"
    cmd = [sys.executable, "-m", "mlflow", "models", "serve", "--env-manager", "local", "-m", str(model_dir),
           "-h", "127.0.0.1", "-p", str(port)]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=child_env(),
                                start_new_session=True)

    def post(body: str, content_type: str) -> tuple[int, str]:
        req = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", data=body.encode(),
                                     headers={"Content-Type": content_type})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    try:
        wait_http(f"http://127.0.0.1:{port}/ping", proc, 120, log)
        yield post
    finally:
        stop(proc)


@pytest.fixture(scope="session")
def svc() -> types.SimpleNamespace:
    """The helpers above for test modules (importlib mode: test files cannot import conftest)."""
    return types.SimpleNamespace(free_port=free_port, wait_http=wait_http, stop=stop, child_env=child_env,
                                 serve=serve)


@pytest.fixture
def trial_forecasters(monkeypatch) -> list:
    """Every Forecaster a tuning worker builds in this test (trials and refits), in order."""
    from tsmix.tuning.worker import Worker

    built: list = []
    made = Worker.forecaster

    def spy(self, params):
        built.append(made(self, params))
        return built[-1]

    monkeypatch.setattr(Worker, "forecaster", spy)
    return built


@pytest.fixture(scope="session")
def mini_csv(data_dir, tmp_path_factory) -> Path:
    """The first rows of ETTh1 as a plain CSV (custom 70/10/20 borders)."""
    lines = (data_dir / "ETT-small" / "ETTh1.csv").read_text().splitlines()[: MINI_ROWS + 1]
    path = tmp_path_factory.mktemp("data") / "mini.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory) -> str:
    """A real ``mlflow server`` on a free loopback port (sqlite backend, proxied artifacts)."""
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    log = root / "server.log"
    cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
           "--workers", "1", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
           "--artifacts-destination", str(root / "artifacts")]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=root, env=child_env(),
                                start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{uri}/health", proc, 120, log)
        yield uri
    finally:
        stop(proc)


@pytest.fixture(scope="session")
def pg_url() -> str:
    """PostgreSQL at 127.0.0.1:5432 db ``test`` (skip with the reason if it is not there)."""
    import sqlalchemy

    try:
        engine = sqlalchemy.create_engine(PG_URL, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text("SELECT 1"))
        engine.dispose()
    except Exception as exc:
        pytest.skip(f"PostgreSQL not reachable at {PG_URL} ({type(exc).__name__}); start it or set "
                    f"TSMIX_TEST_PG")
    return PG_URL


@pytest.fixture
def study_name() -> str:
    return f"tsmix-test-{uuid.uuid4().hex[:10]}"
