"""The benchmark harness: smoke suite end to end, resume, atomic rows, report, speed suite."""

from __future__ import annotations

import csv
import dataclasses
import math
import multiprocessing
import os
import signal

import pytest
import torch

from tsmix import available_mixers
from tsmix.cli import main as cli_main
from tsmix.errors import TsmixError
from tsmix.forecasting import available_models, model_spec
from tsmix.forecasting.benchmark import (
    COLUMNS,
    SUITES,
    ResultStore,
    aggregate,
    expand,
    lookup,
    published,
    run_suite,
    write_report,
)
from tsmix.forecasting.benchmark import runner as runner_mod
from tsmix.forecasting.benchmark.report import dataset_table, paired_table
from tsmix.forecasting.benchmark.speed import (
    SpeedConfig,
    fit_exponent,
    load_speed_json,
    ratios,
    run_speed,
    write_speed,
)
from tsmix.forecasting.benchmark.store import append_csv, csv_keys, read_csv, row_key
from tsmix.forecasting.benchmark.suites import NO_MIXER

REQUIRED = ("dataset", "horizon", "lookback", "model", "mixer", "seed", "mse", "mae", "val_mse", "epochs",
            "train_seconds", "params", "device", "torch", "commit", "protocol", "suite")


def _quiet(_msg: str) -> None:
    pass


# ---------------------------------------------------------------- grids

def test_quick_grid_covers_every_registered_mixer_in_both_encoders():
    runs = expand(SUITES["quick"])
    m = len(available_mixers())
    plain = [name for name in available_models() if not model_spec(name).uses_mixer]  # dlinear, rlinear
    assert len(runs) == 2 * 4 * (len(plain) + 2 * m) * 3
    assert {r.key for r in runs} == {r.key for r in set(runs)} and len({r.key for r in runs}) == len(runs)
    patch = [r for r in runs if r.model == "patchtst"]
    var = [r for r in runs if r.model == "itransformer"]
    assert {r.mixer for r in patch} == {r.mixer for r in var} == set(available_mixers())
    assert {r.lookback for r in patch} == {336} and {r.lookback for r in var} == {96}
    assert {r.mixer for r in runs if r.model == "dlinear"} == {NO_MIXER}
    assert {r.seed for r in runs} == {2021, 2022, 2023}


def test_grid_overrides_and_errors():
    runs = expand(SUITES["paper"], datasets=["etth2"], horizons=[192], models=["dlinear"], seeds=[7])
    got = [(r.dataset, r.horizon, r.model, r.seed, r.preset) for r in runs]
    assert got == [("ETTh2", 192, "dlinear", 7, "paper")]
    with pytest.raises(TsmixError, match="unknown mixer"):
        expand(SUITES["quick"], mixers=["no-such-mixer"])
    with pytest.raises(TsmixError, match="unknown dataset"):
        expand(SUITES["quick"], datasets=["ETTh9"])
    a, b = expand(SUITES["quick"], datasets=["ETTh1"], horizons=[96], models=["patchtst"], mixers=["softmax"],
                  seeds=[1, 2])
    assert a.config_hash == b.config_hash  # the seed is part of the key, not of the recipe
    c = expand(SUITES["quick"], datasets=["ETTh1"], horizons=[192], models=["patchtst"], mixers=["softmax"],
               seeds=[1])[0]
    assert c.config_hash != a.config_hash
    runs = expand(SUITES["quick"], datasets=["ETTh1"], horizons=[96, 192], mixers=["softmax"])
    parts = [runner_mod.select_part(runs, (k, 3)) for k in (1, 2, 3)]
    assert sorted(r.key for p in parts for r in p) == sorted(r.key for r in runs)  # a partition
    assert all(len(p) == len(runs) // 3 for p in parts)
    with pytest.raises(TsmixError, match="part"):
        runner_mod.select_part(runs, (0, 2))


# ---------------------------------------------------------------- store

def _row(**kw):
    base = dict(suite="t", dataset="ETTh1", horizon=96, lookback=336, model="patchtst", mixer="softmax",
                seed=1, protocol="fair", mse=0.5, mae=0.4, val_mse=0.6, epochs=1, train_seconds=1.0,
                params=10, device="cpu", torch="x", commit="abc", config_hash="h", finished_at="2026")
    base.update(kw)
    return base


def test_store_put_is_keyed_and_atomic(tmp_path):
    store = ResultStore(tmp_path)
    assert store.put(_row())
    assert not store.put(_row(mse=0.1))  # same key: not written twice
    assert store.put(_row(seed=2))
    rows = store.rows("t")
    assert len(rows) == 2 and {r["mse"] for r in rows} == {0.5}
    assert store.put(_row(mse=0.25, finished_at="2027"), replace=True)
    assert sorted(r["mse"] for r in store.rows("t")) == [0.25, 0.5]
    # a second shard (another machine) with a newer row for the same key: readers keep the newest
    ResultStore(tmp_path, shard="other-host").put(_row(mse=0.125, finished_at="2028"))
    assert sorted(r["mse"] for r in ResultStore(tmp_path).rows("t")) == [0.125, 0.5]
    path = store.path("t", "ETTh1")
    assert list(csv.reader(open(path)))[0][: len(COLUMNS)] == list(COLUMNS)
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    with pytest.raises(TsmixError, match="key column"):
        store.put(_row(mixer=""))


def _writer(root, writer: int, fd: int) -> None:
    """Child process: store rows forever, confirming each stored one on the pipe."""
    store = ResultStore(root)
    pad = "x" * 20000  # large rows: every put rewrites a growing file, so a kill lands mid-write
    for i in range(100000):
        store.put(dict(suite="k", dataset="ETTh1", horizon=96, lookback=96, model="dlinear", mixer="-",
                       seed=writer * 100000 + i, mse=0.5, mae=0.5, config=pad, finished_at=str(i)))
        os.write(fd, b"x")


def test_killed_writers_leave_a_valid_csv_without_lost_rows(tmp_path):
    ctx = multiprocessing.get_context("fork")  # no re-import in the child: it starts writing at once
    pipes = [os.pipe() for _ in (1, 2)]
    procs = [ctx.Process(target=_writer, args=(tmp_path / "res", w, pipes[i][1]))
             for i, w in enumerate((1, 2))]
    for p in procs:
        p.start()
    confirmed = [0, 0]
    while min(confirmed) < 12:  # both writers interleaving under the lock
        for i, (r, _) in enumerate(pipes):
            if confirmed[i] < 12:
                confirmed[i] += len(os.read(r, 1))
    for p in procs:
        os.kill(p.pid, signal.SIGKILL)
        p.join()
    for i, (r, w) in enumerate(pipes):
        os.close(w)
        while chunk := os.read(r, 4096):
            confirmed[i] += len(chunk)
        os.close(r)
    rows = read_csv(ResultStore(tmp_path / "res").path("k", "ETTh1"))
    assert all(len(r["config"]) == 20000 for r in rows)  # no truncated row
    keys = [row_key(r) for r in rows]
    assert len(keys) == len(set(keys))
    for w, c in zip((1, 2), confirmed):  # every confirmed row of both writers survived
        mine = sorted(r["seed"] - w * 100000 for r in rows if r["seed"] // 100000 == w)
        assert mine[:c] == list(range(c)) and len(mine) in (c, c + 1)


def test_estimate_from_stored_rows():
    runs = expand(SUITES["quick"], datasets=["ETTh1", "ETTh2"], horizons=[96], models=["dlinear", "patchtst"],
                  mixers=["softmax"], seeds=[1])
    rows = [_row(suite="quick", model="dlinear", mixer=NO_MIXER, train_seconds=10.0),
            _row(suite="quick", model="patchtst", mixer="softmax", dataset="ETTh2", train_seconds=100.0),
            _row(suite="quick", model="patchtst", mixer="softmax", dataset="ETTh1", train_seconds=40.0)]
    secs, unknown = runner_mod.estimate_seconds(runs, rows)
    assert (secs, unknown) == (10.0 + 10.0 + 40.0 + 100.0, 0)  # per-dataset value first
    assert runner_mod.estimate_seconds(runs, []) == (0.0, 4)


# ---------------------------------------------------------------- smoke suite end to end

def test_smoke_suite_end_to_end_and_resume(tmp_path, data_dir, monkeypatch):
    results = tmp_path / "results"
    calls = []
    real = runner_mod.run_one

    def interrupted(spec, **kw):  # the second run is "killed" (Ctrl-C) before it stores a row
        calls.append(spec.label)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(spec, **kw)

    monkeypatch.setattr(runner_mod, "run_one", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_suite(SUITES["smoke"], results, mixers=["softmax"], data_dir=data_dir, threads=1, log=_quiet)
    assert len(ResultStore(results).rows("smoke")) == 1
    monkeypatch.setattr(runner_mod, "run_one", real)

    out = run_suite(SUITES["smoke"], results, mixers=["softmax"], data_dir=data_dir, threads=1, log=_quiet)
    models = available_models()  # one run per registered model
    assert out["done_before"] == 1 and out["ran"] == len(models) - 1 and not out["failed"]
    rows = ResultStore(results).rows("smoke")
    assert len(rows) == len(models)
    assert {(r["model"], r["mixer"]) for r in rows} == {
        (m, "softmax" if model_spec(m).uses_mixer else NO_MIXER) for m in models}
    for r in rows:
        assert all(r.get(c) not in (None, "") for c in REQUIRED), r
        assert math.isfinite(r["mse"]) and 0 < r["mse"] < 5 and r["mse_paper"] is not None
        assert r["protocol"] == "fair/first-1200-rows" and r["epochs"] == 1 and r["params"] > 0
        assert r["test_windows"] > 100  # every test window of the slice
        # interval columns: point models carry their conformal intervals' scores
        assert r["loss"] == "mse" and r["interval_method"] == "split-conformal (scaled)"
        assert 0 < r["coverage_80"] <= r["coverage_95"] <= 1 and 0 < r["width_80"] < r["width_95"]
        assert r["crps"] > 0 and r["pinball"] > 0

    # Resume through the CLI: nothing left to run, no duplicate row, report rendered.
    argv = ["benchmark", "--suite", "smoke", "--mixers", "softmax", "--results", str(results),
            "--data-dir", str(data_dir), "--threads", "1"]
    assert cli_main(argv) == 0
    raw = list(csv.DictReader(open(results / "smoke" / "rows" / "ETTh1.csv")))
    assert len(raw) == len(models)
    md = (results / "smoke" / "README.md").read_text()
    assert "patchtst · softmax (L=96)" in md and "**" in md and "fair/first-1200-rows" in md
    assert "*published:" not in md  # no published numbers beside a slice
    for name in ("mse_by_mixer", "mse_vs_params", "mse_vs_train_time"):
        assert (results / "smoke" / "plots" / f"{name}.png").stat().st_size > 1000


# ---------------------------------------------------------------- epoch checkpoints

# the smoke slice with four DLinear epochs (no early stop), so a run can be killed between epochs
RESUMABLE = dataclasses.replace(
    SUITES["smoke"], name="smoke-ckpt", description="smoke slice, four DLinear epochs",
    overrides=(("dlinear", (("batch_size", 32), ("epochs", 4), ("lr", 0.005), ("patience", 10))),))
SAME = ("mse", "mae", "mse_paper", "mae_paper", "val_mse", "epochs", "test_windows", "crps", "coverage_80")


def _count_saves(monkeypatch, stop_at: int | None = None) -> list[int]:
    """Counts checkpoint writes; with ``stop_at`` the run is interrupted right after that one is
    written (Ctrl-C between two epochs)."""
    from tsmix.engine import state as ckstate

    real, count = ckstate.save, [0]

    def save(*a, **kw):
        real(*a, **kw)
        count[0] += 1
        if count[0] == stop_at:
            raise KeyboardInterrupt

    monkeypatch.setattr(ckstate, "save", save)
    return count


def test_a_killed_run_continues_from_its_epoch_checkpoint(tmp_path, data_dir, monkeypatch, capsys):
    from tsmix.engine import checkpoint as ckpt
    from tsmix.forecasting.benchmark import suites as suites_mod

    monkeypatch.setitem(suites_mod.SUITES, RESUMABLE.name, RESUMABLE)
    kw = dict(models=["dlinear"], data_dir=data_dir, threads=1)
    (ref,) = run_suite(RESUMABLE, tmp_path / "ref", log=_quiet, **kw)["rows"]  # uninterrupted, no checkpoints
    assert ref["epochs"] == 4

    results, root = tmp_path / "results", tmp_path / "ckpts"
    (spec,) = expand(RESUMABLE, models=["dlinear"])
    folder = runner_mod.checkpoint_folder(root, spec)
    assert folder.parent == root / "smoke-ckpt" and spec.config_hash in folder.name
    with monkeypatch.context() as m:
        _count_saves(m, stop_at=2)
        with pytest.raises(KeyboardInterrupt):
            run_suite(RESUMABLE, results, checkpoints=root, log=_quiet, **kw)
    assert not ResultStore(results).rows("smoke-ckpt") and runner_mod.checkpoint_epoch(folder) == (2, 4)
    spent = ckpt.read_meta(folder / ckpt.FILENAME)["loop"]["cpu_seconds"]
    assert spent > 0

    argv = ["benchmark", "--suite", "smoke-ckpt", "--models", "dlinear", "--results", str(results),
            "--data-dir", str(data_dir), "--threads", "1", "--checkpoints", str(root), "--no-report"]
    assert cli_main([*argv, "--dry-run"]) == 0
    assert "(checkpoint after epoch 2 of 4)" in capsys.readouterr().out
    with monkeypatch.context() as m:
        saves = _count_saves(m)
        assert cli_main(argv) == 0
    assert saves == [2]  # it trained epochs 3 and 4 only
    assert "resuming after epoch 2 of 4" in capsys.readouterr().out
    (row,) = ResultStore(results).rows("smoke-ckpt")
    assert {k: row[k] for k in SAME} == {k: ref[k] for k in SAME}  # bit-exact: the same numbers
    assert row["cpu_seconds"] > spent  # the killed process's epochs are counted
    assert not folder.exists()  # the row is stored: the checkpoint went with it


def test_a_checkpoint_of_another_run_is_discarded_and_the_run_starts_over(tmp_path, data_dir, monkeypatch):
    import shutil

    kw = dict(models=["dlinear"], data_dir=data_dir, threads=1)
    (ref,) = run_suite(RESUMABLE, tmp_path / "ref", seeds=[2022], log=_quiet, **kw)["rows"]
    root = tmp_path / "ckpts"
    with monkeypatch.context() as m:
        _count_saves(m, stop_at=1)
        with pytest.raises(KeyboardInterrupt):
            run_suite(RESUMABLE, tmp_path / "r", seeds=[2021], checkpoints=root, log=_quiet, **kw)
    (s2021,) = expand(RESUMABLE, models=["dlinear"], seeds=[2021])
    (s2022,) = expand(RESUMABLE, models=["dlinear"], seeds=[2022])
    # as if seed 2022's folder held a checkpoint its recipe no longer matches (e.g. code changed)
    shutil.move(runner_mod.checkpoint_folder(root, s2021), runner_mod.checkpoint_folder(root, s2022))
    lines: list[str] = []
    out = run_suite(RESUMABLE, tmp_path / "r", seeds=[2022], checkpoints=root, log=lines.append, **kw)
    assert not out["failed"] and any("belongs to another run" in x and "starting this run over" in x
                                     for x in lines), lines
    (row,) = out["rows"]
    assert {k: row[k] for k in SAME} == {k: ref[k] for k in SAME}
    assert not runner_mod.checkpoint_folder(root, s2022).exists()


def test_an_unusable_checkpoint_folder_is_refused_before_any_run(tmp_path, data_dir):
    """A file given as the checkpoint folder fails once, up front, naming it: no run starts, nothing
    is stored (not one failure per run)."""
    afile = tmp_path / "afile"
    afile.write_text("")
    lines: list[str] = []
    with pytest.raises(TsmixError, match="cannot use .*afile as the checkpoint folder"):
        run_suite(RESUMABLE, tmp_path / "r", models=["dlinear"], data_dir=data_dir, threads=1,
                  checkpoints=afile, log=lines.append)
    assert not any("started" in x for x in lines), lines
    assert ResultStore(tmp_path / "r").rows(RESUMABLE.name) == []
    assert not (tmp_path / "r" / RESUMABLE.name / "errors.log").exists()


def test_the_log_names_the_code_and_a_row_the_commit_its_run_started_at(tmp_path, data_dir, monkeypatch):
    """Before any run the log names the tsmix folder in use and its commit (a ``python -m tsmix``
    inside a checkout imports the checkout, not a snapshot on PYTHONPATH); a row records the commit
    its run started at, not the one HEAD moved to while it trained."""
    import tsmix
    from tsmix.forecasting import Forecaster

    head = {"commit": "aaa1111"}
    monkeypatch.setattr(runner_mod, "git_commit", lambda: head["commit"])
    real_fit = Forecaster.fit

    def fit_then_commit(self, *a, **kw):  # someone commits in the checkout mid-run
        out = real_fit(self, *a, **kw)
        head["commit"] = "bbb2222+dirty"
        return out

    monkeypatch.setattr(Forecaster, "fit", fit_then_commit)
    lines: list[str] = []
    out = run_suite(SUITES["smoke"], tmp_path / "r", models=["dlinear"], data_dir=data_dir, threads=1,
                    log=lines.append)
    folder = os.path.dirname(os.path.realpath(tsmix.__file__))
    assert lines[1] == f"code: {folder} at commit aaa1111", lines
    assert [r["commit"] for r in out["rows"]] == ["aaa1111"]
    assert [r["commit"] for r in ResultStore(tmp_path / "r").rows("smoke")] == ["aaa1111"]
    lines.clear()
    run_suite(SUITES["smoke"], tmp_path / "r", models=["dlinear"], data_dir=data_dir, threads=1,
              log=lines.append)
    assert len(lines) == 1 and "0 to run" in lines[0]  # nothing to run: no code line either


def test_progress_lines_per_run_and_per_epoch(tmp_path, data_dir, capsys):
    """Each run logs a start line and an end line; --progress adds the engine's epoch line on stderr,
    and with stderr not a terminal (a log file, here pytest's capture) no bar is drawn there."""
    lines: list[str] = []
    run_suite(SUITES["smoke"], tmp_path / "r", models=["dlinear"], data_dir=data_dir, threads=1,
              progress=True, log=lines.append)
    assert len(lines) == 4 and lines[1].startswith("code: ") and "started" in lines[2], lines
    assert "mse" in lines[3], lines
    err = capsys.readouterr().err
    assert "epoch 1/1  train" in err and "\r" not in err and "step/s" not in err
    lines.clear()
    run_suite(SUITES["smoke"], tmp_path / "q", models=["dlinear"], data_dir=data_dir, threads=1,
              log=lines.append)
    assert len(lines) == 4 and "epoch 1/1" not in capsys.readouterr().err  # default: the runner's lines only


def test_progress_bar_only_where_it_can_be_seen(monkeypatch):
    from tsmix.engine.callbacks import Progress

    class Terminal:
        def isatty(self) -> bool:
            return True

        def write(self, _s: str) -> int:
            return 0

        def flush(self) -> None:
            pass

    assert Progress(10, 1, enabled=True).bar.disable  # pytest's captured stderr: no terminal
    monkeypatch.setattr("sys.stderr", Terminal())
    bar = Progress(10, 1, enabled=True).bar
    assert not bar.disable and Progress(10, 1, enabled=False).bar.disable
    bar.close()


# ---------------------------------------------------------------- report

def test_report_tables_from_rows(tmp_path):
    store = ResultStore(tmp_path)
    hs = (96, 192, 336, 720)
    for seed, noise in zip((1, 2, 3), (-0.01, 0.0, 0.01)):
        for i, h in enumerate(hs):
            store.put(_row(suite="quick", horizon=h, seed=seed, mse=0.40 + 0.01 * i + noise, mae=0.42,
                           mse_paper=0.39 + 0.01 * i, train_seconds=10.0, cpu_seconds=10.0, params=1000))
            store.put(_row(suite="quick", horizon=h, seed=seed, mixer="other", mse=0.45 + noise, mae=0.41,
                           train_seconds=20.0, cpu_seconds=30.0, params=3000, device="cuda"))
            store.put(_row(suite="quick", horizon=h, seed=seed, model="dlinear", mixer=NO_MIXER, mse=0.417,
                           mae=0.44, train_seconds=2.0, params=500))
    groups = aggregate(store.rows("quick"))
    assert len(groups) == 12
    g = next(g for g in groups if g["mixer"] == "softmax" and g["horizon"] == 96)
    assert g["mse_mean"] == pytest.approx(0.40) and g["mse_std"] == pytest.approx(0.01)
    assert g["published_reference"] == "PatchTST/42" and g["published_mse"] == pytest.approx(0.375)
    table = dataset_table(groups, "ETTh1", "mse")
    lines = {ln.split("|")[1].strip(): ln for ln in table.splitlines()[2:]}
    soft = lines["patchtst · softmax (L=336)"]
    assert "**0.400 ± 0.010**" in soft  # best at H=96, bold
    assert "0.415 ± 0.010" in soft  # horizon average of each seed, then mean ± std over seeds
    assert "**0.417 ± 0.000**" in lines["dlinear (L=336)"].split("|")[4]  # best at H=336
    assert "**" not in lines["patchtst · other (L=336)"].split("|")[2]
    pub = lines["*published: PatchTST/42, L=336*"]
    assert "*0.375*" in pub and "*0.417*" in pub  # (.375+.414+.431+.449)/4
    assert soft.rstrip(" |").endswith("10")  # CPU s/run: mean cpu_seconds of the row's runs
    assert lines["patchtst · other (L=336)"].rstrip(" |").endswith("30 (on cuda)")  # not a CPU fit's cost
    assert lines["dlinear (L=336)"].rstrip(" |").endswith("—")  # no cpu_seconds stored
    # paired over seeds: "other" - softmax = 0.05 - 0.01 i per horizon, the same for every seed (SE 0)
    paired = {ln.split("|")[1].strip(): ln for ln in paired_table(groups, "ETTh1", "mse").splitlines()[2:]}
    assert set(paired) == {"patchtst · other (L=336)"}  # softmax is the reference, dlinear has no mixer
    other = paired["patchtst · other (L=336)"].split("|")
    assert other[2].strip() == "**+0.0500 ± 0.0000**" and other[5].strip() == "**+0.0200 ± 0.0000**"
    assert other[6].strip() == "**+0.0350 ± 0.0000**"  # per-seed horizon average
    files = write_report(tmp_path, "quick")
    md = files["markdown"].read_text()
    assert "paper protocol" in md and "published: DLinear" in md and "paired over seeds" in md
    summary = list(csv.DictReader(open(files["summary"])))
    assert len(summary) == 12 and {s["seeds"] for s in summary} == {"3"}
    assert files["mse_vs_params"].stat().st_size > 1000


def test_published_numbers_have_sources_and_caveats():
    rows = published()
    refs = {r["reference"] for r in rows}
    assert refs >= {"PatchTST/42", "PatchTST/64", "DLinear", "iTransformer", "FEM-SM"}
    assert all(r["source"] and r["caveat"] for r in rows)
    assert lookup("PatchTST/42", "ETTh1", 96)["mse"] == pytest.approx(0.375)
    assert lookup("DLinear", "ETTh2", 720)["mse"] == pytest.approx(0.605)
    assert "drop_last" in lookup("DLinear", "ETTh1", 96)["caveat"]
    assert lookup("FEM-SM", "ETTh1", "avg")["mse"] == pytest.approx(0.419)


# ---------------------------------------------------------------- speed suite

def test_fit_exponent_recovers_power_laws():
    assert fit_exponent([(n, 3.0 * n**2) for n in (256, 512, 1024)]) == pytest.approx(2.0)
    assert fit_exponent([(n, 0.5 * n) for n in (64, 128, 256, 512)]) == pytest.approx(1.0)
    assert fit_exponent([(512, 1.0)]) is None


def test_speed_suite_tiny(tmp_path):
    torch.set_num_threads(1)
    # every registered mixer through the timing path (memory profiling is slow for op-heavy mixers)
    tiny = dict(lengths=(16, 32, 64), widths=(16,), reps=1, min_seconds=0.0)
    res = run_speed(SpeedConfig(**tiny, time_budget_s=60.0, memory=False), log=_quiet)
    cells = res["cells"]
    assert len(cells) == 3 * len(available_mixers())
    assert all(c.status == "ok" for c in cells if c.mixer == "softmax")
    assert all(c.ms > 0 for c in cells if c.status == "ok")
    assert all(c.status.startswith(("ok", "error:", "skipped:")) for c in cells)
    rat = ratios(res)
    assert all(rat[("softmax", 16, n)][0] == 1.0 for n in (16, 32, 64))
    files = write_speed(res, tmp_path)
    md = files["markdown"].read_text()
    assert "| softmax |" in md and "exponent" in md
    assert len(list(csv.DictReader(open(files["csv"])))) == len(cells)
    again = load_speed_json(files["json"])  # what `tsmix benchmark-speed --render` re-renders from
    assert again["exponents"] == res["exponents"] and [c.ms for c in again["cells"]] == [c.ms for c in cells]
    # memory path, and an impossible time budget: measured once, every larger length skipped
    res = run_speed(SpeedConfig(**tiny, time_budget_s=1e-9, mixers=("softmax",)), log=_quiet)
    first, *rest = res["cells"]
    assert first.status == "ok" and first.peak_mb > 0
    assert rest and all(c.status.startswith("skipped: predicted") for c in rest)


# ---------------------------------------------------------------- provenance and MLflow scope

def test_git_commit_is_the_checkout_head():
    import subprocess
    from pathlib import Path

    import tsmix
    from tsmix.provenance import git_commit

    root = Path(tsmix.__file__).resolve().parent.parent
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
    head = out.stdout.strip()
    assert head and git_commit(short=False).removesuffix("+dirty") == head
    assert head.startswith(git_commit().removesuffix("+dirty"))
    assert runner_mod.git_commit() == git_commit()  # the benchmark's lookup is the shared one


def test_checkout_commit_marks_changed_tracked_files(tmp_path):
    import subprocess

    from tsmix.provenance import checkout_commit

    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=tmp_path,
                              capture_output=True, text=True, check=True).stdout.strip()

    git("init", "-q")
    (tmp_path / "a.txt").write_text("1\n")
    git("add", "a.txt")
    git("commit", "-qm", "one")
    head = git("rev-parse", "HEAD")
    assert checkout_commit(tmp_path, short=False) == head
    (tmp_path / "new.txt").write_text("untracked\n")  # untracked files do not change the result
    assert checkout_commit(tmp_path, short=False) == head
    (tmp_path / "a.txt").write_text("2\n")
    assert checkout_commit(tmp_path, short=False) == head + "+dirty"
    assert checkout_commit(tmp_path / "nowhere") == "unknown"


def test_an_archive_names_its_commit_and_a_checkout_asks_git(tmp_path, monkeypatch):
    """``git archive`` writes the hash into tsmix/_archive.py (export-subst): a copy installed from
    it names HEAD; in the checkout the placeholders stay and git is asked."""
    import io
    import subprocess
    import sys
    import tarfile
    from pathlib import Path

    import tsmix
    from tsmix import _archive
    from tsmix.provenance import UNKNOWN, archived_commit, commit_at

    root = Path(tsmix.__file__).resolve().parent.parent
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                          check=True).stdout.strip()
    assert archived_commit() == UNKNOWN and _archive.FULL.startswith("$Format")  # a checkout
    blob = subprocess.run(["git", "archive", "--format=tar", "HEAD", "tsmix"], cwd=root, capture_output=True,
                          check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(tmp_path, filter="data")
    out = subprocess.run([sys.executable, "-c", "from tsmix.provenance import git_commit as g; "
                          "print(g(short=False)); print(g())"], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-2000:]
    full, short = out.stdout.split()
    assert full == head and head.startswith(short) and len(short) >= 7
    # the same lookup, in process: no .git beside the package means the archive's word
    monkeypatch.setattr(_archive, "FULL", head)
    assert commit_at(tmp_path, short=False) == head
    monkeypatch.setattr(_archive, "SHORT", "")
    assert commit_at(tmp_path) == UNKNOWN


def test_benchmark_mlflow_logging_leaves_the_global_tracking_uri_alone(tmp_path, monkeypatch):
    import mlflow
    from mlflow.tracking import is_tracking_uri_set

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    mlflow.set_tracking_uri(None)
    uri = f"sqlite:///{tmp_path / 'bench.db'}"
    row = _row()
    runner_mod.log_row_mlflow(row, uri)
    assert not is_tracking_uri_set() and "MLFLOW_TRACKING_URI" not in os.environ
    runs = mlflow.MlflowClient(tracking_uri=uri).search_runs(
        [mlflow.MlflowClient(tracking_uri=uri).get_experiment_by_name("tsmix-benchmark-t").experiment_id])
    assert len(runs) == 1 and runs[0].data.params["commit"] == "abc"


def test_append_csv_writes_the_header_once_and_only_the_named_fields(tmp_path):
    path = tmp_path / "rows.csv"
    append_csv(path, ["a", "b"], [{"a": 1, "b": 2, "extra": 9}])
    append_csv(path, ["a", "b"], [{"a": 3}, {"b": 4, "a": 5}])
    assert path.read_text().splitlines() == ["a,b", "1,2", "3,", "5,4"]
    assert csv_keys(path, ["b", "a"]) == {("2", "1"), ("", "3"), ("4", "5")}
    assert csv_keys(tmp_path / "none.csv", ["a"]) == set()


def test_append_csv_adds_new_trailing_columns_and_refuses_other_headers(tmp_path):
    path = tmp_path / "rows.csv"
    append_csv(path, ["a", "b"], [{"a": 1, "b": 2}])
    append_csv(path, ["a", "b", "cpu"], [{"a": 3, "b": 4, "cpu": 5.5}])  # a script that gained a column
    assert path.read_text().splitlines() == ["a,b,cpu", "1,2,", "3,4,5.5"]
    with pytest.raises(TsmixError, match=r"has the columns a, b, cpu; this script writes b, a"):
        append_csv(path, ["b", "a"], [{"a": 6, "b": 7}])  # would misalign every later row
    with pytest.raises(TsmixError, match="another output file"):
        append_csv(path, ["a", "x", "cpu"], [{"a": 6}])
    assert path.read_text().splitlines() == ["a,b,cpu", "1,2,", "3,4,5.5"]  # untouched by the refusals
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.csv", "rows.csv.tsmix-lock"]
