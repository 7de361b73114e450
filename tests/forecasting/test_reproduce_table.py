"""benchmarks/reproduce/table.py: the paired mixer-vs-softmax table the evidence grid is read from."""

from __future__ import annotations

import importlib.util
import math
import statistics
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "reproduce" / "table.py"
_spec = importlib.util.spec_from_file_location("reproduce_table", SCRIPT)
table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(table)

HORIZONS = (96, 192, 336, 720)


def _row(mixer: str, dataset: str, horizon: int, seed: int, mse: float, *, secs: float = 100.0,
         cpu: float | None = None, lookback: int = 336, epochs_max: int = 20) -> dict:
    return {"model": "patchtst", "mixer": mixer, "dataset": dataset, "horizon": str(horizon),
            "seed": str(seed), "mse": str(mse), "epochs_max": str(epochs_max), "lookback": str(lookback),
            "train_seconds": str(secs), "cpu_seconds": "" if cpu is None else str(cpu)}


def _cells(lines: list[str], first: str, dataset: str) -> list[str]:
    hit = [ln for ln in lines if ln.startswith(f"| {first} | {dataset} |")]
    assert len(hit) == 1, lines
    return [c.strip() for c in hit[0].strip("|").split("|")]


def test_mixer_section_pairs_seeds_and_reports_own_average_and_cost():
    base = {96: 0.38, 192: 0.41, 336: 0.43, 720: 0.45}
    rows = []
    for seed, noise in ((2021, 0.0), (2022, 0.002)):
        for h in HORIZONS:
            rows.append(_row("softmax", "ETTh1", h, seed, base[h] + noise, secs=400, cpu=390))
            # the mixer is better by 0.004 at seed 2021 and 0.006 at 2022 at every horizon
            rows.append(_row("lin", "ETTh1", h, seed, base[h] + noise - (0.004 if seed == 2021 else 0.006),
                             secs=300, cpu=None if seed == 2021 else 250))
    # rows that must not enter: a softmax seed the mixer lacks (unpaired), another lookback, other epochs
    rows += [_row("softmax", "ETTh1", h, 2023, 0.9) for h in HORIZONS]
    rows += [_row("lin", "ETTh1", 96, 2021, 0.1, lookback=720),
             _row("lin", "ETTh1", 96, 2021, 0.1, epochs_max=100)]
    lines = table.mixer_section(rows)

    diffs = [-0.004, -0.006]
    se = statistics.stdev(diffs) / math.sqrt(2)
    lin = _cells(lines, "lin", "ETTh1")
    assert lin[2:6] == [f"**{-0.005:+.4f} ± {se:.4f}**"] * 4  # per horizon, beyond 2 SE
    assert lin[6] == f"**{-0.005:+.4f} ± {se:.4f}**"  # the per-seed 4-horizon averages
    own = statistics.mean(statistics.mean(base.values()) + n - d for n, d in ((0.0, 0.004), (0.002, 0.006)))
    assert lin[7] == f"{own:.4f}" and lin[8] == "2"
    assert lin[9:] == ["300", "250 (4)"]  # wall s/run over its runs; CPU s over the runs recording it

    ref = _cells(lines, "softmax (reference)", "ETTh1")
    assert ref[2:7] == ["—"] * 5
    seeds = [statistics.mean(base.values()), statistics.mean(base.values()) + 0.002, 0.9]
    assert ref[7] == f"{statistics.mean(seeds):.4f}" and ref[8] == "3"
    assert ref[9:] == ["300", "390 (8)"]  # (8 x 400 + 4 x 100) / 12 wall; the 2023 rows record no CPU


@pytest.mark.parametrize("seeds", [(2021,), (2021, 2022)])
def test_mixer_section_one_seed_has_no_error_bar_and_missing_horizons_show_a_dash(seeds):
    rows = [_row("softmax", "ETTh2", h, s, 0.3) for s in seeds for h in HORIZONS]
    rows += [_row("nrg", "ETTh2", 96, s, 0.31) for s in seeds]  # one horizon only
    cells = _cells(table.mixer_section(rows), "nrg", "ETTh2")
    expect = "+0.0100 (n=1)" if len(seeds) == 1 else "**+0.0100 ± 0.0000**"  # equal differences: SE 0
    assert cells[2] == expect and cells[3:6] == ["—"] * 3
    assert cells[6] == "—" and cells[7] == "—"  # no seed has all four horizons: no average, no own avg


def test_mixer_section_is_empty_without_other_mixers():
    assert table.mixer_section([_row("softmax", "ETTh1", h, 2021, 0.4) for h in HORIZONS]) == []
