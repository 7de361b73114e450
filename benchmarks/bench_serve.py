"""Latency of one forecast request, in-process and served over REST (issue #21, inference).

    OMP_NUM_THREADS=1 python benchmarks/bench_serve.py --out benchmarks/bench_serve.txt

For each encoder at its ETTh1 paper preset (patchtst and dlinear L=336, itransformer L=96; H=96)
the script fits ``--epochs`` epoch(s) on ETTh1 (weights do not matter for latency), saves the
run, logs it with ``tsmix.tuning.pyfunc.log_forecaster`` into a temporary sqlite MLflow store and
downloads the model. Then, for one request = the last ``lookback`` rows of ETTh1 (date column +
7 values), default params (point forecast of all 96 steps), it times:

  model fwd    context: the bare network under no_grad on a (1, lookback, 7) tensor,
  forecaster   ``Forecaster.predict(history)`` in this process (the loaded run),
  pyfunc       ``mlflow.pyfunc.load_model(model_dir).predict(history)`` in this process,
  rest json    POST /invocations to ``mlflow models serve --env-manager local`` (1 worker,
               OMP_NUM_THREADS=1), body ``{"dataframe_split": ...}``, over one kept-alive
               HTTP/1.1 connection (``http.client``),
  rest csv     the same request as ``text/csv``, kept-alive connection,
  rest json+c  the JSON request on a new TCP connection per request (``urllib``, what a naive
               client pays).

Wall-clock per call, ``--warmup`` untimed calls first, then ``--calls`` timed ones; the paths of
one group (in-process, REST) alternate call by call so drifting load from other processes
hits them alike. p50/p90/mean in ms. The client runs in this process on the same machine as
the server, so REST times include the client's share of CPU. Every server started is stopped
(its process group is killed) on the way out, errors included. No asserts on timings.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd

from tsmix.atomic import write_text_atomic

ENCODERS = ("patchtst", "itransformer", "dlinear")
DATASET, HORIZON = "ETTh1", 96
SEED = 2021
PATHS = ("model fwd", "forecaster", "pyfunc", "rest json", "rest csv", "rest json+c")  # table order


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def _pct(xs: list[float], q: float) -> float:
    """The q-quantile (0..1) of xs, linear interpolation (statistics.quantiles needs n >= 2)."""
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _stats(xs: list[float]) -> str:
    ms = [x * 1e3 for x in xs]
    return f"{_pct(ms, 0.5):8.2f} {_pct(ms, 0.9):8.2f} {statistics.fmean(ms):8.2f}"


def time_alternating(fns: dict[str, Callable[[], object]], warmup: int, calls: int) -> dict[str, list[float]]:
    """Wall times per call of each fn; round-robin so load drift hits every path alike."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    out: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(calls):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            out[k].append(time.perf_counter() - t0)
    return out


# ----------------------------------------------------------------------------- serving
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child_env() -> dict[str, str]:
    # as tests/tuning/conftest.py: one thread, no progress bars, uvicorn found beside this python
    env = dict(os.environ, OMP_NUM_THREADS="1", MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR="false",
               PYTHONUNBUFFERED="1")
    env.pop("MLFLOW_TRACKING_URI", None)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bindir, env["PATH"]]) if env.get("PATH") else bindir
    return env


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group, SIGKILL after a grace (uvicorn waits for idle
    keep-alive connections)."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=3)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@contextlib.contextmanager
def serve(model_dir: Path, cwd: Path, timeout: float = 180.0) -> Iterator[tuple[int, float]]:
    """``mlflow models serve --env-manager local`` of ``model_dir`` on a free port; yields
    ``(port, seconds until /ping answered)`` and stops the process group on exit."""
    port = _free_port()
    log = cwd / f"serve-{port}.log"
    cmd = [sys.executable, "-m", "mlflow", "models", "serve", "--env-manager", "local", "-m", str(model_dir),
           "-h", "127.0.0.1", "-p", str(port), "-w", "1"]
    t0 = time.perf_counter()
    with open(log, "w") as out:
        # own session: the group holds the mlflow CLI and its uvicorn children, all killed by _stop
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=_child_env(),
                                start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                tail = log.read_text()[-3000:]
                raise RuntimeError(f"mlflow models serve exited with {proc.returncode}:\n{tail}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"server did not answer /ping in {timeout} s:\n{log.read_text()[-3000:]}")
            time.sleep(0.25)
        yield port, time.perf_counter() - t0
    finally:
        _stop(proc)


class KeepAlive:
    """POSTs to /invocations over one persistent HTTP/1.1 connection (reconnects if dropped)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.connects = 0  # TCP connections opened: 1 when keep-alive held for the whole run

    def post(self, body: bytes, content_type: str) -> tuple[int, bytes]:
        for attempt in (0, 1):
            try:
                self.connects += self.conn.sock is None  # http.client connects lazily
                self.conn.request("POST", "/invocations", body=body, headers={"Content-Type": content_type})
                resp = self.conn.getresponse()
                return resp.status, resp.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.conn.close()  # the server closed an idle connection: one retry on a fresh one
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.conn.close()


def post_new_connection(port: int, body: bytes, content_type: str) -> tuple[int, bytes]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", data=body,
                                 headers={"Content-Type": content_type})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return resp.status, resp.read()


def _checked(status_body: tuple[int, bytes]) -> bytes:
    status, body = status_body
    if status != 200:
        raise RuntimeError(f"/invocations answered {status}: {body[:500]!r}")
    return body


# ----------------------------------------------------------------------------- one encoder
def prepare(model: str, args: argparse.Namespace, root: Path,
            log: Callable[[str], None]) -> tuple[Path, pd.DataFrame, Path]:
    """Fit, save, log (sqlite store in ``root``), download; (run dir, history, model dir)."""
    import mlflow

    from tsmix.forecasting import Forecaster
    from tsmix.tuning.pyfunc import input_example, log_forecaster
    from tsmix.tuning.tracking import using_tracking

    t0 = time.perf_counter()
    # the paper preset's widths; one epoch, no test scoring: only the shape matters for latency
    f = Forecaster.from_preset("paper", model, DATASET, HORIZON, epochs=args.epochs, progress=False,
                               threads=args.threads, seed=SEED)
    f.fit(DATASET, data_dir=args.data_dir, evaluate_test=False)
    fit_s = time.perf_counter() - t0
    run_dir = f.save(root / model / "run")
    t1 = time.perf_counter()
    with using_tracking(f"sqlite:///{root / 'mlflow.db'}"):
        # artifacts in the temp folder too (a sqlite store's default root is ./mlruns)
        name = f"bench-serve-{model}"
        exp = mlflow.get_experiment_by_name(name)
        exp_id = exp.experiment_id if exp else mlflow.create_experiment(
            name, artifact_location=(root / "artifacts" / model).as_uri())
        with mlflow.start_run(experiment_id=exp_id):
            info = log_forecaster(f, run_dir, DATASET, data_dir=args.data_dir)
        dst = str(root / model / "model")
        model_dir = Path(mlflow.artifacts.download_artifacts(info.model_uri, dst_path=dst))
    log_s = time.perf_counter() - t1
    history = input_example(f, DATASET, data_dir=args.data_dir)
    cfg = f.config
    log(f"  {model}: lookback {cfg.lookback}, horizon {cfg.horizon}, fit {args.epochs} epoch(s) "
        f"{fit_s:.0f} s, log+download {log_s:.0f} s")
    return run_dir, history, model_dir


def bench_encoder(model: str, args: argparse.Namespace, root: Path,
                  log: Callable[[str], None]) -> dict[str, list[float]]:
    import mlflow.pyfunc
    import torch

    from tsmix.forecasting import Forecaster

    run_dir, history, model_dir = prepare(model, args, root, log)
    runs: dict[str, list[float]] = {}
    # in-process: the loaded run (what the pyfunc wraps) vs the pyfunc itself
    fc = Forecaster.load(run_dir)
    pyf = mlflow.pyfunc.load_model(str(model_dir))
    a, b = fc.predict(history), pyf.predict(history)
    if a.shape != b.shape or not (a.iloc[:, 1:].to_numpy() == b.iloc[:, 1:].to_numpy()).all():
        log(f"  NOTE {model}: pyfunc forecast differs from Forecaster.predict ({a.shape} vs {b.shape})")
    fns: dict[str, Callable[[], object]] = {"forecaster": lambda: fc.predict(history),
                                            "pyfunc": lambda: pyf.predict(history)}
    # context: the bare network on one (1, lookback, channels) window, what the paths above wrap
    # (a private attribute; skipped if the layout changes)
    net = getattr(getattr(fc, "_fitted", None), "model", None)
    if isinstance(net, torch.nn.Module):
        net.eval()
        window = torch.randn(1, fc.config.lookback, history.shape[1] - 1)

        def forward() -> None:
            with torch.no_grad():
                net(window)
        fns["model fwd"] = forward
    runs.update(time_alternating(fns, args.warmup, args.calls))
    # REST bodies built once: the client's serialization is not what is measured
    split = json.loads(history.to_json(orient="split", date_format="iso", index=False))
    js = json.dumps({"dataframe_split": split}).encode()
    csv = history.to_csv(index=False).encode()
    with serve(model_dir, root) as (port, up_s):
        log(f"  {model}: server answered /ping after {up_s:.1f} s; request bodies json "
            f"{len(js) / 1024:.1f} KiB, csv {len(csv) / 1024:.1f} KiB")
        ka = KeepAlive(port)
        try:
            reply = json.loads(_checked(ka.post(js, "application/json")))
            rows = len(reply["predictions"]) if isinstance(reply, dict) else len(reply)
            if rows != HORIZON:
                log(f"  NOTE {model}: REST answered {rows} rows, expected {HORIZON}")
            runs.update(time_alternating({
                "rest json": lambda: _checked(ka.post(js, "application/json")),
                "rest csv": lambda: _checked(ka.post(csv, "text/csv")),
                "rest json+c": lambda: _checked(post_new_connection(port, js, "application/json")),
            }, args.warmup, args.calls))
            log(f"  {model}: {ka.connects} TCP connection(s) for {1 + 2 * (args.warmup + args.calls)} "
                "kept-alive requests")
        finally:
            ka.close()
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=list(ENCODERS), choices=ENCODERS)
    ap.add_argument("--epochs", type=int, default=1, help="epochs of the (throw-away) fit")
    ap.add_argument("--calls", type=int, default=50, help="timed calls per path")
    ap.add_argument("--warmup", type=int, default=5, help="untimed calls per path first")
    ap.add_argument("--threads", type=int, default=1, help="torch threads in this process (server: 1)")
    ap.add_argument("--data-dir", default=os.environ.get("TSMIX_DATA_DIR"))
    ap.add_argument("--out", default=None, help="also write the output to this file (atomically)")
    args = ap.parse_args()
    out = Path(args.out).resolve() if args.out else None  # before any chdir
    if args.data_dir:
        args.data_dir = str(Path(args.data_dir).resolve())

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # keeps the log readable
    import mlflow
    import torch

    torch.set_num_threads(args.threads)
    lines: list[str] = []

    def log(s: str) -> None:
        print(s, flush=True)
        lines.append(s)

    log("# bench_serve: latency of one forecast request, in-process and over REST (issue #21)")
    log(f"command: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '?')} python "
        + shlex.join(["benchmarks/bench_serve.py", *sys.argv[1:]]))
    log(f"torch {torch.__version__}, mlflow {mlflow.__version__}, pandas {pd.__version__}, python "
        f"{sys.version.split()[0]}; {torch.get_num_threads()} torch thread(s) here, server "
        f"OMP_NUM_THREADS=1 and 1 uvicorn worker; {os.cpu_count()} CPUs; load average at start {_loadavg()}")
    log(f"wall ms per request, {args.warmup} warm-up + {args.calls} timed calls per path, paths of a group "
        "alternating; one request = last lookback rows of ETTh1, point forecast of 96 steps")
    t0 = time.perf_counter()
    results: dict[str, dict[str, list[float]]] = {}
    cwd = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="tsmix-bench-serve-") as tmp:
        root = Path(tmp)
        os.chdir(root)  # anything MLflow writes relative to the cwd lands in the temp folder
        try:
            for model in args.models:
                try:
                    results[model] = bench_encoder(model, args, root, log)
                except Exception as exc:  # one encoder failing still reports the others
                    first = str(exc).splitlines()[0] if str(exc) else ""
                    log(f"  {model}: FAILED {type(exc).__name__}: {first}")
        finally:
            os.chdir(cwd)
    log("")
    log(f"{'encoder':13s} {'path':12s} {'p50':>8s} {'p90':>8s} {'mean':>8s}  (ms)  p50 x forecaster")
    for model, runs in results.items():
        base = _pct(runs["forecaster"], 0.5)
        for path, xs in sorted(runs.items(), key=lambda kv: PATHS.index(kv[0])):
            log(f"{model:13s} {path:12s} {_stats(xs)}        {_pct(xs, 0.5) / base:5.2f}")
    log("paths: model fwd = the bare network under no_grad on a (1, L, 7) tensor (no pandas, no scaling); "
        "forecaster = Forecaster.predict(frame); pyfunc = mlflow.pyfunc.load_model(...)"
        ".predict(frame); rest json / rest csv = POST over one kept-alive HTTP/1.1 connection (http.client); "
        "rest json+c = urllib, a new TCP connection per request")
    log(f"{time.perf_counter() - t0:.0f} s in all; load average at the end {_loadavg()}")
    if out is not None:
        write_text_atomic(out, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
