"""Bad-input catalogue (data side): each case fails through the CLI with exit 2 and one stderr line naming
the problem and the fix, and through the API with one TsmixError; no traceback, nothing written.

To add a case append a :class:`Bad` to ``CASES``: ``files`` are written into an empty folder that is
also the working directory, ``argv`` is the full command line (any subcommand, e.g. ``fit``), ``api``
calls the Python API with that folder (None: CLI only), ``match`` is a substring of the message.
``fitted=True`` also puts a copy of a tiny fitted DLinear run at ``run/`` and its 400-row data at
``s.csv`` (fit once per module), which ``damage(folder)`` may then break.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest

from tsmix.cli import main
from tsmix.datasets import load, prepare
from tsmix.errors import TsmixError
from tsmix.forecasting import Forecaster


@dataclass(frozen=True)
class Bad:
    id: str  # test id
    argv: list[str]  # command line after `tsmix`
    match: str  # substring of the one-line message (the problem)
    files: dict[str, str | None] = field(default_factory=dict)  # name -> text; None makes a folder
    api: Callable[[Path], object] | None = None  # the same mistake through the API
    fitted: bool = False  # copy the module's tiny fitted run to run/ and its data to s.csv first
    damage: Callable[[Path], None] | None = None  # then break something in the folder


def csv(rows: int = 40, fmt: str = "2020-01-01 {h:02d}:00", value: str = "{i}", header: str = "date,x",
        sep: str = ",", start: int = 0) -> str:
    """``rows`` lines of an hourly series (hours wrap into days), one value column."""
    out = [header.replace(",", sep)]
    for i in range(start, start + rows):
        stamp = fmt.format(h=i % 24).replace("2020-01-01", f"2020-01-{1 + i // 24:02d}")
        out.append(f"{stamp}{sep}{value.format(i=i)}")
    return "\n".join(out) + "\n"


GOOD = csv()


def data(src: str, *flags: str, lookback: str = "4", horizon: str = "2") -> list[str]:
    return ["data", src, "--lookback", lookback, "--horizon", horizon, *flags]


def prep(src: str, lookback: int = 4, horizon: int = 2, **kw) -> Callable[[Path], object]:
    """``prepare`` on ``src`` relative to the case folder (the working directory), like the CLI."""
    return lambda d: prepare(src, lookback, horizon, **kw)


D = "d.csv"  # the file most cases write

CASES: list[Bad] = [
    Bad("nan-value", data(D), "missing/NaN/inf values", {D: csv(value="{i}").replace(",5\n", ",nan\n")},
        prep(D)),
    Bad("unsorted", data(D), "timestamps are not sorted",
        {D: "date,x\n" + "".join(GOOD.splitlines(True)[1:][::-1])}, prep(D)),
    Bad("duplicated-stamp", data(D), "duplicated timestamp(s)",
        {D: GOOD + "2020-01-02 15:00,1\n"}, prep(D)),
    Bad("irregular", data(D), "irregular timestamps",
        {D: GOOD + "2020-01-02 16:17,1\n"}, prep(D)),
    Bad("missing-stamps", data(D), "missing timestamp(s)",
        {D: csv(rows=20) + csv(rows=20, start=25).split("\n", 1)[1]}, prep(D)),
    Bad("text-values", data(D), "non-numeric columns 'x' (e.g. 'abc')",
        {D: csv(value="abc")}, prep(D)),
    Bad("no-value-column", data(D), "no value columns",
        {D: "date\n" + "".join(f"2020-01-{d:02d}\n" for d in range(1, 30))}, prep(D)),
    Bad("no-date-column", data(D), "no date column found",
        {D: "a,b\n" + "".join(f"{i},{i}.5\n" for i in range(30))}, prep(D)),
    Bad("date-missing", data(D), "date column 'date' has 1 missing value(s), first at row 3",
        {D: "date,x\n2020-01-01,1\n2020-01-02,1\n2020-01-03,1\n,1\n2020-01-05,1\n"}, prep(D)),
    Bad("date-garbage", data(D), "does not parse as dates",
        {D: GOOD + "2020-13-45 99:00,1\n"}, prep(D)),
    Bad("date-ambiguous", data(D), "is ambiguous",
        {D: "date,x\n01/01/2000,1\n02/01/2000,2\n03/01/2000,3\n"}, prep(D)),
    Bad("date-format-mismatch", data(D, "--date-format", "%d.%m.%Y %H:%M"), "does not match date_format",
        {D: GOOD}, prep(D, date_format="%d.%m.%Y %H:%M")),
    Bad("date-format-no-directive", data(D, "--date-format", "YYYY-MM-DD"), "has no % directive",
        {D: GOOD}, prep(D, date_format="YYYY-MM-DD")),
    Bad("epoch-without-unit", data(D), "pass date_unit='s' or 'ms'",
        {D: "timestamp,x\n" + "".join(f"{1467331200 + 3600 * i},{i}\n" for i in range(40))},
        prep(D)),
    Bad("epoch-wrong-unit", data(D, "--date-unit", "s"), "gives dates outside 1677..2262",
        {D: "timestamp,x\n" + "".join(f"{1467331200000000 + i},{i}\n" for i in range(40))},
        prep(D, date_unit="s")),
    Bad("epoch-unit-on-text", data(D, "--date-unit", "ms", "--date-col", "date"), "reads epoch numbers",
        {D: GOOD}, prep(D, date_unit="ms", date_col="date")),
    Bad("format-and-unit", data(D, "--date-unit", "s", "--date-format", "%Y"), "pass only one of them",
        {D: GOOD}, prep(D, date_unit="s", date_format="%Y")),
    Bad("dates-out-of-range", data(D), "outside the supported range",
        {D: "date,x\n" + "".join(f"15{y:02d}-01-01,1\n" for y in range(30))}, prep(D)),
    Bad("duplicated-header", data(D), "duplicated column names ['x']",
        {D: csv(header="date,x,x", value="{i},{i}")}, prep(D)),
    Bad("decimal-comma-in-comma-file", data(D), "decimal commas",
        {D: csv(value='"{i},5"')}, prep(D)),
    Bad("separator-unclear", data(D), "no separator among , ; tab |",
        {D: "date;x\n" + csv().split("\n", 1)[1]}, prep(D)),
    Bad("float32-overflow", data(D), "overflow float32", {D: csv(value="1e39")}, prep(D)),
    Bad("one-row", data(D), "needs at least 2 timestamps", {D: csv(rows=1)}, prep(D)),
    Bad("header-only", data(D), "no rows", {D: "date,x\n"}, prep(D)),
    Bad("empty-file", data(D), "cannot read", {D: ""}, prep(D)),
    Bad("unknown-target", data(D, "--target", "OT"), "unknown target 'OT'", {D: GOOD},
        prep(D, target="OT")),
    Bad("unknown-date-col", data(D, "--date-col", "when"), "date column 'when' not found",
        {D: GOOD}, prep(D, date_col="when")),
    Bad("xlsx", data("d.xlsx"), "unsupported file type 'd.xlsx'", {"d.xlsx": GOOD}, prep("d.xlsx")),
    Bad("missing-file", data("nope.csv"), "file 'nope.csv' not found", {}, prep("nope.csv")),
    Bad("folder", data("sub"), "is a folder", {"sub": None}, lambda d: load(d / "sub")),
    Bad("unknown-benchmark", data("ETTx9"), "dataset 'ETTx9' not found", {}, lambda d: load("ETTx9")),
    Bad("lookback-too-long", data(D, lookback="30"), "longer than the 28-row training split",
        {D: GOOD}, prep(D, lookback=30)),
    Bad("val-too-short", data(D, horizon="6"), "the val split has", {D: GOOD},
        prep(D, horizon=6)),
    Bad("lookback-zero", data(D, lookback="0"), "lookback must be a positive integer, got 0",
        {D: GOOD}, prep(D, lookback=0)),
    Bad("fill-empty-column", data(D, "--fill", "ffill"), "no finite value to fill from",
        {D: csv(header="date,x,y", value="{i},")}, prep(D, fill="ffill")),
]


# ---------------------------------------------------------------- forecasting, tuning, benchmark (#16)
def fit(*flags: str, data: str = D) -> list[str]:
    return ["fit", "--dataset", data, "--model", "dlinear", "--lookback", "4", "--horizon", "2",
            "--epochs", "1", "--no-progress", *flags]


def forecaster(d: Path, **kw) -> Forecaster:
    return Forecaster(**{"model": "dlinear", "lookback": 4, "horizon": 2, "epochs": 1, "progress": False,
                         **kw})


def _edit_json(name: str, edit: Callable[[dict], object]) -> Callable[[Path], None]:
    def damage(d: Path) -> None:
        doc = json.loads((d / "run" / name).read_text())
        edit(doc)
        (d / "run" / name).write_text(json.dumps(doc))
    return damage


def _write_run_file(name: str, data: bytes | None) -> Callable[[Path], None]:
    def damage(d: Path) -> None:
        if data is None:
            (d / "run" / name).unlink()
        else:
            (d / "run" / name).write_bytes(data)
    return damage


def _truncate(name: str) -> Callable[[Path], None]:
    def damage(d: Path) -> None:
        blob = (d / "run" / name).read_bytes()
        (d / "run" / name).write_bytes(blob[: len(blob) // 2])
    return damage


def _history(edit: Callable[[pd.DataFrame], pd.DataFrame]) -> Callable[[Path], None]:
    def damage(d: Path) -> None:
        edit(pd.read_csv(d / "s.csv")).to_csv(d / "h.csv", index=False)
    return damage


class _Hostile:
    def __reduce__(self):  # what torch.load(weights_only=False) would run
        return (print, ("pwned",))


def _hostile_pt(d: Path) -> None:
    import pickle

    (d / "run" / "model.safetensors").unlink()
    (d / "run" / "model.pt").write_bytes(pickle.dumps(_Hostile()))


def _temporary(d: Path) -> None:
    shutil.copytree(d / "run", d / ".run.tmp-abc123")


def _set(section: str, key: str, value: object) -> Callable[[Path], None]:
    return _edit_json("config.json", lambda doc: doc[section].__setitem__(key, value))


def predict(run: str = "run", *flags: str) -> list[str]:
    return ["predict", "--run", run, "--output", "p.csv", *flags]


def load_run(d: Path, name: str = "run") -> Forecaster:
    return Forecaster.load(d / name)


CASES += [
    Bad("fit-out-is-a-file", fit("--out", "o.txt"), "exists and is a file", {D: GOOD, "o.txt": "x"},
        lambda d: forecaster(d).fit(D, out="o.txt")),
    Bad("fit-out-under-a-file", fit("--out", "o.txt/sub"), "which is a file", {D: GOOD, "o.txt": "x"},
        lambda d: forecaster(d).fit(D, out="o.txt/sub")),
    Bad("fit-out-unwritable", fit("--out", "/proc/tsmix-run"), "cannot write in /proc", {D: GOOD},
        lambda d: forecaster(d).fit(D, out="/proc/tsmix-run")),
    Bad("fit-out-foreign-folder", fit("--out", "sub"), "is not a tsmix run directory",
        {D: GOOD, "sub": None, "sub/x.txt": "mine"}, lambda d: forecaster(d).fit(D, out="sub")),
    Bad("fit-unknown-mixer-dlinear", fit("--mixer", "no-such-mixer"), "unknown mixer", {D: GOOD},
        lambda d: forecaster(d, mixer="no-such-mixer").fit(D)),
    Bad("fit-mixer-option-dlinear", fit("--mixer-option", "bias=false"), "has no token mixer", {D: GOOD},
        lambda d: forecaster(d, mixer_options={"bias": False}).fit(D)),
    Bad("fit-mixer-option-type",
        fit("--model", "patchtst", "--mixer", "fem-sm", "--mixer-option", "beta_init=abc"), "beta_init",
        {D: GOOD}),
    Bad("fit-device-cuda-missing", fit("--device", "cuda:99"), "device 'cuda:99' is not available", {D: GOOD},
        lambda d: forecaster(d, device="cuda:99").fit(D)),
    Bad("fit-device-mps", fit("--device", "mps"), "device 'mps' is not available", {D: GOOD},
        lambda d: forecaster(d, device="mps").fit(D)),
    Bad("fit-device-unknown", fit("--device", "tpu7"), "unknown device 'tpu7'", {D: GOOD},
        lambda d: forecaster(d, device="tpu7").fit(D)),
    Bad("fit-kernel-even", fit("--kernel-size", "4"), "kernel_size must be odd", {D: GOOD},
        lambda d: forecaster(d, kernel_size=4)),
    Bad("fit-nan-without-fill", fit(), "missing/NaN/inf values", {D: GOOD.replace(",5\n", ",nan\n")},
        lambda d: forecaster(d).fit(D)),
    Bad("fit-date-format-no-directive", fit("--date-format", "YYYY"), "has no % directive", {D: GOOD},
        lambda d: forecaster(d, date_format="YYYY")),
    Bad("fit-paper-protocol-small-test", fit("--eval-protocol", "paper"), "keeps only full test batches",
        {D: GOOD}, lambda d: forecaster(d, eval_protocol="paper").fit(D)),
    Bad("fit-preset-custom-data", fit("--preset", "paper"), "no paper preset", {D: GOOD}),
    Bad("fit-unknown-target", fit("--target", "OT"), "unknown target 'OT'", {D: GOOD},
        lambda d: forecaster(d, target="OT").fit(D)),
    Bad("fit-tracking-folder-missing", fit("--tracking-uri", "sqlite:///nowhere/m.db"), "does not exist",
        {D: GOOD}),
    Bad("fit-dataset-folder", fit(data="sub"), "is a folder", {"sub": None},
        lambda d: forecaster(d).fit("sub")),
    Bad("fit-lookback-zero", fit("--lookback", "0"), "lookback must be a positive int", {D: GOOD},
        lambda d: forecaster(d, lookback=0)),
    Bad("predict-missing-run", predict("nope"), "is not a tsmix run directory", {},
        lambda d: load_run(d, "nope")),
    Bad("predict-other-frequency", predict("run", "--input", "h.csv"), "sampled every 2h", fitted=True,
        damage=_history(lambda df: df.iloc[::2]), api=lambda d: load_run(d).predict(d / "h.csv")),
    Bad("predict-other-columns", predict("run", "--input", "h.csv"), "missing ['HUFL']", fitted=True,
        damage=_history(lambda df: df.drop(columns="HUFL")), api=lambda d: load_run(d).predict(d / "h.csv")),
    Bad("predict-short-history", predict("run", "--input", "h.csv"), "history too short", fitted=True,
        damage=_history(lambda df: df.iloc[:20]), api=lambda d: load_run(d).predict(d / "h.csv")),
    Bad("predict-output-type", ["predict", "--run", "run", "--output", "p.xlsx"], "unsupported output type",
        fitted=True),
    Bad("predict-output-folder", ["predict", "--run", "run", "--output", "outdir"], "is a folder",
        {"outdir": None}, fitted=True),
    Bad("predict-empty-config", predict(), "config.json is damaged", fitted=True,
        damage=_write_run_file("config.json", b""), api=load_run),
    Bad("predict-truncated-config", predict(), "config.json is damaged", fitted=True,
        damage=_truncate("config.json"), api=load_run),
    Bad("predict-config-not-a-run", predict(), "is not a tsmix forecaster config", fitted=True,
        damage=_write_run_file("config.json", b"[1, 2]"), api=load_run),
    Bad("predict-config-missing-entry", predict(), "missing entry 'scaler'", fitted=True,
        damage=_edit_json("config.json", lambda doc: doc.pop("scaler")), api=load_run),
    Bad("predict-config-unknown-field", predict(), "unknown hyper-parameter(s) typo", fitted=True,
        damage=_set("config", "typo", 1), api=load_run),
    Bad("predict-truncated-weights", predict(), "model.safetensors is damaged", fitted=True,
        damage=_truncate("model.safetensors"), api=load_run),
    Bad("predict-garbage-weights", predict(), "model.safetensors is damaged", fitted=True,
        damage=_write_run_file("model.safetensors", b"\x00garbage" * 10), api=load_run),
    Bad("predict-missing-context", predict(), "has no context.safetensors", fitted=True,
        damage=_write_run_file("context.safetensors", None), api=load_run),
    Bad("predict-weights-config-mismatch", predict(), "does not match", fitted=True,
        damage=_set("config", "lookback", 8), api=load_run),
    Bad("predict-hostile-model-pt", predict(), "model.pt is never read", fitted=True, damage=_hostile_pt,
        api=load_run),
    Bad("predict-temporary-folder", predict(".run.tmp-abc123"), "temporary folder of an interrupted save",
        fitted=True, damage=_temporary, api=lambda d: load_run(d, ".run.tmp-abc123")),
    Bad("evaluate-frame-run-needs-data", ["evaluate", "--run", "run"], "--data FILE", fitted=True,
        damage=_set("data", "source", None), api=lambda d: load_run(d).evaluate()),
    Bad("evaluate-data-gone", ["evaluate", "--run", "run"], "not found", fitted=True,
        damage=_set("data", "source", "/nonexistent/gone.csv"), api=lambda d: load_run(d).evaluate()),
    Bad("evaluate-other-columns", ["evaluate", "--run", "run", "--data", "h.csv"], "columns differ",
        fitted=True, damage=_history(lambda df: df.drop(columns="HUFL")),
        api=lambda d: load_run(d).evaluate(data=d / "h.csv")),
    Bad("evaluate-temporary-folder", ["evaluate", "--run", ".run.tmp-abc123"], "interrupted save",
        fitted=True, damage=_temporary),
    Bad("tune-no-dataset", ["tune", "--model", "dlinear"], "--dataset is required", {}),
    Bad("tune-unknown-model", ["tune", "--dataset", D, "--model", "nope"], "no search space for model 'nope'",
        {D: GOOD}),
    Bad("tune-unknown-mixer", ["tune", "--dataset", D, "--mixers", "nope"], "nope", {D: GOOD}),
    Bad("tune-zero-trials", ["tune", "--dataset", D, "--model", "dlinear", "--trials", "0"],
        "trials must be a positive int", {D: GOOD}),
    Bad("tune-features-via-set", ["tune", "--dataset", D, "--set", "features=S"], "use --features",
        {D: GOOD}),
    Bad("tune-bad-fixed-value", ["tune", "--dataset", D, "--model", "dlinear", "--set", "lr=-1"],
        "lr must be > 0", {D: GOOD}),
    Bad("tune-fill-disagrees", ["tune", "--dataset", D, "--model", "dlinear", "--set", "fill=zero", "--fill",
                                "ffill"], "disagree", {D: GOOD}),
    Bad("tune-bad-storage", ["tune", "--dataset", D, "--model", "dlinear", "--storage", "mysql://u@h/db"],
        "storage", {D: GOOD}),
    Bad("benchmark-unknown-model", ["benchmark", "--suite", "smoke", "--models", "nope", "--dry-run"],
        "unknown model", {}),
    Bad("benchmark-unknown-mixer", ["benchmark", "--suite", "smoke", "--mixers", "nope", "--dry-run"],
        "unknown mixer", {}),
    Bad("benchmark-bad-part", ["benchmark", "--suite", "smoke", "--part", "x", "--dry-run"], "--part", {}),
    Bad("report-missing-results", ["benchmark-report", "--suite", "smoke", "--results", "nope"],
        "does not exist", {}),
    Bad("report-no-rows", ["benchmark-report", "--suite", "smoke", "--results", "res"], "no result rows",
        {"res": None}),
    Bad("report-notes-missing",
        ["benchmark-report", "--suite", "smoke", "--results", "res", "--notes", "n.md"],
        "cannot read --notes", {"res": None}),
]


# ---------------------------------------------------------------- engine knobs and output heads (#15, #19)
CASES += [
    Bad("fit-grad-accum-zero", fit("--grad-accum", "0"), "grad_accum must be a positive int", {D: GOOD},
        lambda d: forecaster(d, grad_accum=0)),
    Bad("fit-quantiles-outside", fit("--loss", "quantile", "--quantiles", "0.1,1.5"),
        "quantiles must lie strictly between 0 and 1", {D: GOOD},
        lambda d: forecaster(d, loss="quantile", quantiles=[0.1, 1.5])),
    Bad("fit-quantiles-duplicated", fit("--loss", "quantile", "--quantiles", "0.1", "0.1"),
        "quantiles has duplicated values [0.1]", {D: GOOD},
        lambda d: forecaster(d, loss="quantile", quantiles=[0.1, 0.1])),
    Bad("fit-quantiles-point-loss", fit("--quantiles", "0.1,0.9"), "quantiles only apply to loss='quantile'",
        {D: GOOD}, lambda d: forecaster(d, quantiles=[0.1, 0.9])),
    Bad("fit-level-100", fit("--loss", "quantile", "--level", "80", "100"),
        "level must lie strictly between 0 and 100", {D: GOOD},
        lambda d: forecaster(d, loss="quantile", level=[80, 100])),
    Bad("predict-level-zero", predict("run", "--level", "0"), "level must lie strictly between 0 and 100",
        fitted=True, api=lambda d: load_run(d).predict(level=[0])),
    Bad("predict-quantiles-duplicated", predict("run", "--quantiles", "0.5,0.5"),
        "quantiles has duplicated values [0.5]", fitted=True,
        api=lambda d: load_run(d).predict(quantiles=[0.5, 0.5])),
    Bad("predict-level-without-calibration", predict("run", "--level", "80"), "has no conformal calibration",
        fitted=True, damage=_write_run_file("calibration.json", None),
        api=lambda d: load_run(d).predict(level=[80])),
    Bad("predict-damaged-calibration", predict(), "calibration.json is damaged", fitted=True,
        damage=_write_run_file("calibration.json", b'{"levels": [80]}'), api=load_run),
]

def _write(folder: Path, files: dict[str, str | None]) -> None:
    for name, text in files.items():
        if text is None:
            (folder / name).mkdir()
        else:
            (folder / name).write_text(text)


def _tree(folder: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(folder)), p.stat().st_size if p.is_file() else -1)
                  for p in folder.rglob("*"))


@pytest.fixture(scope="module")
def tiny_run(data_dir, tmp_path_factory) -> Path:
    """A tiny DLinear fitted once on the first 400 rows of ETTh1: run directory next to its data."""
    folder = tmp_path_factory.mktemp("tiny-run")
    data = folder / "s.csv"
    data.write_text("".join((data_dir / "ETT-small" / "ETTh1.csv").read_text().splitlines(True)[:401]))
    Forecaster("dlinear", lookback=48, horizon=12, epochs=1, progress=False).fit(data).save(folder / "run")
    return folder


def _setup(case: Bad, folder: Path, request) -> None:
    _write(folder, case.files)
    if case.fitted:
        src = request.getfixturevalue("tiny_run")
        shutil.copytree(src / "run", folder / "run")
        shutil.copyfile(src / "s.csv", folder / "s.csv")
    if case.damage is not None:
        case.damage(folder)


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TSMIX_DATA_DIR", raising=False)  # nothing may be found (or fetched) elsewhere
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / ".cache-never-used"))
    return tmp_path


def test_catalogue_is_big_and_ids_unique():
    assert len(CASES) >= 60 and len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_cli(case: Bad, workdir, capsys, request):
    _setup(case, workdir, request)
    before = _tree(workdir)
    rc = main(case.argv)
    out, err = capsys.readouterr()
    assert rc == 2 and out == "", (rc, out, err)
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"tsmix {case.argv[0]}: error: "), err
    assert case.match in err and "Traceback" not in err, err
    tail = err[len(f"tsmix {case.argv[0]}: error: "):]
    # "problem: fix", "problem; fix" or "<what> must be <the fix>, got <value>"
    assert re.search(r": |; | must ", tail), f"no fix named: {err}"
    assert _tree(workdir) == before


@pytest.mark.parametrize("case", [c for c in CASES if c.api], ids=[c.id for c in CASES if c.api])
def test_api(case: Bad, workdir, request):
    _setup(case, workdir, request)
    before = _tree(workdir)
    with pytest.raises(TsmixError) as exc:
        case.api(workdir)
    msg = str(exc.value)
    assert case.match in msg and "\n" not in msg, msg
    assert _tree(workdir) == before
