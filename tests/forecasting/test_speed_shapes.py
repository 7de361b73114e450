"""`tsmix benchmark-speed --shapes`: the encoders' real token shapes, batch as an axis, ratios to
softmax from one run and the issue #21 targets. Structure and positivity only: no timing thresholds
(the test machine is shared and loaded)."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from tsmix.cli import main as cli_main
from tsmix.errors import TsmixError
from tsmix.forecasting.benchmark.speed import (
    SHAPES,
    ShapeCell,
    ShapesConfig,
    load_shapes_json,
    run_shapes,
    write_shapes,
)
from tsmix.forecasting.benchmark.speed_cells import TARGETS, target_verdict
from tsmix.forecasting.benchmark.speed_timing import alternate
from tsmix.registry import mixer_options


def _quiet(_: str) -> None:
    pass


@pytest.fixture(scope="module")
def tiny() -> dict:
    torch.set_num_threads(1)
    cfg = ShapesConfig(shapes=("patch", "variate"), batches=(1, 2), rounds=2, min_pass_s=0.0,
                       mixers=("linear", "nrgpt"))
    return run_shapes(cfg, log=_quiet)


def test_cells_cover_every_shape_batch_and_token_count_with_softmax_first(tiny):
    cells = tiny["cells"]
    assert tiny["mixers"] == ["softmax", "linear", "nrgpt"]  # softmax added: every ratio needs it
    per_mixer = sum(len(SHAPES[s].tokens) for s in ("patch", "variate")) * 2  # two batches
    assert len(cells) == 3 * per_mixer
    assert all(c.status == "ok" and c.ms > 0 and c.ratio > 0 for c in cells)
    assert all(c.ratio == 1.0 for c in cells if c.mixer == "softmax")
    patch = [c for c in cells if c.shape == "patch"]
    assert {(c.batch, c.sequences, c.tokens, c.width, c.heads) for c in patch} == {
        (1, 7, 42, 16, 4), (2, 14, 42, 16, 4)}  # windows x 7 channels, 42 patches
    variate = [c for c in cells if c.shape == "variate"]
    assert {(c.sequences, c.tokens, c.width, c.heads) for c in variate} == {
        (b, n, 128, 8) for b in (1, 2) for n in (7, 21)}


def test_energy_steps_come_from_the_mixer_options(tiny):
    steps = mixer_options("nrgpt").steps
    nrgpt = [c for c in tiny["cells"] if c.mixer == "nrgpt"]
    assert all(c.steps == steps and c.per_step == pytest.approx(c.ratio / steps) for c in nrgpt)
    assert all(c.steps is None and c.per_step is None for c in tiny["cells"] if c.mixer == "linear")


def test_report_has_a_section_per_shape_with_targets_and_round_trips(tiny, tmp_path):
    files = write_shapes(tiny, tmp_path)
    assert {p.name for p in files.values()} == {"speed_shapes.csv", "speed_shapes.md", "speed_shapes.json"}
    assert not list(tmp_path.glob(".*tmp"))  # atomic writes leave no temporaries
    md = files["markdown"].read_text()
    assert "## patch:" in md and "## variate:" in md
    assert "| B=1 (7×42) | B=2 (14×42) |" in md and "B=2 (2×21)" in md
    lines = [ln for ln in md.splitlines() if ln.startswith("| nrgpt |")]
    assert len(lines) == 2 and all("≤ 1.3× per step" in ln and "/step)" in ln for ln in lines)
    linear = [ln for ln in md.splitlines() if ln.startswith("| linear |")]
    assert len(linear) == 2 and all(
        "| ≤ 1.2× |" in ln and (ln.endswith("| **met** |") or "| not met" in ln) for ln in linear)
    rows = list(csv.DictReader(open(files["csv"])))
    assert len(rows) == len(tiny["cells"])
    assert all(float(r["time_vs_softmax"]) > 0 for r in rows)
    assert {r["verdict"] for r in rows if r["mixer"] in TARGETS} <= {"met", "not met"}
    again = load_shapes_json(files["json"])
    assert [c.ms for c in again["cells"]] == [c.ms for c in tiny["cells"]]
    assert json.loads(files["json"].read_text())["kind"] == "shapes"


def test_target_verdicts():
    def cell(mixer: str, ratio: float, steps: int | None = None) -> ShapeCell:
        return ShapeCell("patch", mixer, 1, 7, 42, 16, 4, ms=1.0, ratio=ratio, steps=steps)

    assert target_verdict(cell("fem-sm", 1.29)) == ("≤ 1.3×", "met")
    assert target_verdict(cell("fem-sm", 1.31)) == ("≤ 1.3×", "not met")
    assert target_verdict(cell("fem-ssm", 2.9))[1] == "met"
    assert target_verdict(cell("nrgpt", 5.0, steps=4)) == ("≤ 1.3× per step", "met")  # 1.25 per step
    assert target_verdict(cell("nrgpt", 5.6, steps=4))[1] == "not met"  # 1.4 per step
    assert target_verdict(cell("gated", 9.0)) == ("", "")  # no target in the issue


def test_alternate_reports_a_failing_fn_and_times_the_rest():
    def boom() -> None:
        raise RuntimeError("shape refused\nmore")

    out = alternate({"ok": lambda: sum(range(1000)), "bad": boom}, rounds=2, dev=torch.device("cpu"))
    assert list(out) == ["ok", "bad"]
    assert isinstance(out["ok"], float) and out["ok"] >= 0
    assert out["bad"] == "error: RuntimeError: shape refused"


def test_unknown_shape_or_bad_batches_are_errors():
    with pytest.raises(TsmixError, match="unknown shape"):
        run_shapes(ShapesConfig(shapes=("huge",)), log=_quiet)
    with pytest.raises(TsmixError, match="--batches"):
        run_shapes(ShapesConfig(batches=(0,)), log=_quiet)


def test_the_report_names_the_allocator_setting(tiny, monkeypatch):
    from tsmix.engine import memory
    from tsmix.forecasting.benchmark.speed import _malloc

    monkeypatch.setattr(memory, "_applied", True)
    assert _malloc() == "freed memory kept"
    monkeypatch.setattr(memory, "_applied", False)
    assert _malloc() == "allocator as it comes"


def test_cli_shapes_writes_speed_shapes_only_and_renders_back(tmp_path, capsys):
    out = tmp_path / "speed"
    argv = ["benchmark-speed", "--shapes", "patch", "--batches", "1", "--rounds", "1", "--mixers", "linear",
            "--out", str(out)]
    assert cli_main(argv) == 0
    assert (out / "speed_shapes.md").is_file() and not (out / "speed.md").exists()  # sweep not asked
    md = (out / "speed_shapes.md").read_text()
    assert "| linear |" in md and "| softmax |" in md and "## variate" not in md
    # the allocator setting changes CPU timings: the report says which one ran (pytest's process
    # never applied tsmix.engine.memory; the tsmix command does)
    assert ", allocator as it comes;" in md
    (out / "speed_shapes.md").unlink()
    again = tmp_path / "again"
    assert cli_main(["benchmark-speed", "--render", str(out / "speed_shapes.json"), "--out", str(again)]) == 0
    assert (again / "speed_shapes.md").read_text() == md
    assert "wrote" in capsys.readouterr().out


def test_the_report_names_the_processor(tiny, tmp_path):
    import os

    from tsmix.provenance import processor

    name = processor("cpu")
    assert name.endswith(f", {os.cpu_count()} logical cores") and len(name) > len(", 1 logical cores")
    assert tiny["processor"] == name
    md = write_shapes(tiny, tmp_path)["markdown"].read_text()
    assert f"device cpu ({name})" in md
    older = {k: v for k, v in tiny.items() if k != "processor"}  # JSON written before the field existed
    assert "device cpu, torch" in write_shapes(older, tmp_path / "old")["markdown"].read_text()
