"""Lookup order and the download path, against a local HTTP server on 127.0.0.1 (no internet needed)."""

from __future__ import annotations

import functools
import http.server
import shutil
import socket
import threading

import pytest

from tsmix.datasets import BENCHMARKS, DataError, cache_dir, load, resolve_path

SPEC = BENCHMARKS["ETTh1"]


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A clean lookup environment: no data dir, the cache in tmp_path."""
    monkeypatch.delenv("TSMIX_DATA_DIR", raising=False)
    monkeypatch.delenv("TSMIX_DATA_URL", raising=False)
    monkeypatch.setenv("TSMIX_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


@pytest.fixture
def server(env, data_dir, monkeypatch):
    """Serves env/www (holding a copy of ETTh1.csv) on 127.0.0.1; counts requests."""
    www = env / "www"
    (www / "ETT-small").mkdir(parents=True)
    shutil.copy(data_dir / SPEC.relpath, www / SPEC.relpath)
    hits: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):  # keep test output clean
            pass

        def do_GET(self):
            hits.append(self.path)
            super().do_GET()

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(www)))
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    monkeypatch.setenv("TSMIX_DATA_URL", f"http://127.0.0.1:{httpd.server_address[1]}/")
    yield www, hits
    httpd.shutdown()
    httpd.server_close()


def files_under(path):
    return sorted(p.relative_to(path).as_posix() for p in path.rglob("*")) if path.exists() else []


def test_cache_dir_defaults(monkeypatch, tmp_path):
    monkeypatch.delenv("TSMIX_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "tsmix"
    monkeypatch.setenv("TSMIX_CACHE_DIR", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"


def test_lookup_order(env, data_dir, monkeypatch):
    flat = env / "flat"
    flat.mkdir()
    shutil.copy(data_dir / SPEC.relpath, flat / "ETTh1.csv")  # a bare file name also counts
    monkeypatch.setenv("TSMIX_DATA_DIR", str(data_dir))
    assert resolve_path("etth1", flat) == flat / "ETTh1.csv"  # data_dir first
    assert resolve_path("ETTh1", env / "empty") == data_dir / SPEC.relpath  # then $TSMIX_DATA_DIR
    with pytest.raises(DataError, match="unknown benchmark 'ETTh9'"):
        resolve_path("ETTh9")


def test_download_once_into_cache(server, env):
    www, hits = server
    path = resolve_path("ETTh1")
    assert path == env / "cache" / SPEC.relpath
    assert files_under(env / "cache") == ["ETT-small", "ETT-small/ETTh1.csv"]  # no temporary left
    assert path.read_bytes() == (www / SPEC.relpath).read_bytes() and hits == ["/ETT-small/ETTh1.csv"]
    s = load("ETTh1")  # found in the cache: no second request
    assert s.n_rows == 17420 and len(hits) == 1


def test_sha256_mismatch_leaves_nothing(server, env):
    www, _ = server
    with open(www / SPEC.relpath, "a") as f:
        f.write("2018-06-26 20:00:00,1,1,1,1,1,1,1\n")
    with pytest.raises(DataError, match=f"sha256 mismatch for ETT-small/ETTh1.csv downloaded from "
                                        f"http://127.0.0.1:\\d+/ETT-small/ETTh1.csv: got [0-9a-f]{{64}}, "
                                        f"expected {SPEC.sha256}") as exc:
        resolve_path("ETTh1")
    assert "TSMIX_DATA_DIR" in str(exc.value)
    assert files_under(env / "cache") == []  # no partial file, no empty folders


def test_http_404_is_a_clear_error(server, env):
    www, _ = server
    (www / SPEC.relpath).unlink()
    with pytest.raises(DataError, match="ETT-small/ETTh1.csv not found .*downloading it from "
                                        "http://127.0.0.1:\\d+/ETT-small/ETTh1.csv failed \\(HTTP 404 "):
        resolve_path("ETTh1")
    assert files_under(env / "cache") == []


def test_unreachable_server_is_one_clear_error(env, monkeypatch):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("TSMIX_DATA_URL", f"http://127.0.0.1:{port}")
    with pytest.raises(DataError) as exc:
        load("ETTm2", data_dir=env / "nowhere")
    msg = str(exc.value)
    assert "ETT-small/ETTm2.csv" in msg and f"http://127.0.0.1:{port}/ETT-small/ETTm2.csv" in msg
    assert "TSMIX_DATA_DIR" in msg and str(env / "nowhere") in msg and "\n" not in msg
    assert not (env / "cache").exists()
