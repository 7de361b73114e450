"""Bad-input catalogue (data side): each case fails through the CLI with exit 2 and one stderr line naming
the problem and the fix, and through the API with one TsmixError; no traceback, nothing written.

To add a case append a :class:`Bad` to ``CASES``: ``files`` are written into an empty folder that is
also the working directory, ``argv`` is the full command line (any subcommand, e.g. ``fit``), ``api``
calls the Python API with that folder (None: CLI only), ``match`` is a substring of the message.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tsmix.cli import main
from tsmix.datasets import load, prepare
from tsmix.errors import TsmixError


@dataclass(frozen=True)
class Bad:
    id: str  # test id
    argv: list[str]  # command line after `tsmix`
    match: str  # substring of the one-line message (the problem)
    files: dict[str, str | None] = field(default_factory=dict)  # name -> text; None makes a folder
    api: Callable[[Path], object] | None = None  # the same mistake through the API


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


def _write(folder: Path, files: dict[str, str | None]) -> None:
    for name, text in files.items():
        if text is None:
            (folder / name).mkdir()
        else:
            (folder / name).write_text(text)


def _tree(folder: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(folder)), p.stat().st_size if p.is_file() else -1)
                  for p in folder.rglob("*"))


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TSMIX_DATA_DIR", raising=False)  # nothing may be found (or fetched) elsewhere
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / ".cache-never-used"))
    return tmp_path


def test_catalogue_is_big_and_ids_unique():
    assert len(CASES) >= 25 and len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_cli(case: Bad, workdir, capsys):
    _write(workdir, case.files)
    before = _tree(workdir)
    rc = main(case.argv)
    out, err = capsys.readouterr()
    assert rc == 2 and out == "", (rc, out, err)
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"tsmix {case.argv[0]}: error: "), err
    assert case.match in err and "Traceback" not in err, err
    assert ": " in err[len(f"tsmix {case.argv[0]}: error: "):], f"no fix named: {err}"  # problem: fix
    assert _tree(workdir) == before


@pytest.mark.parametrize("case", [c for c in CASES if c.api], ids=[c.id for c in CASES if c.api])
def test_api(case: Bad, workdir):
    _write(workdir, case.files)
    before = _tree(workdir)
    with pytest.raises(TsmixError) as exc:
        case.api(workdir)
    msg = str(exc.value)
    assert case.match in msg and "\n" not in msg, msg
    assert _tree(workdir) == before
