"""benchmarks/anchors/report.py: the #22 anchors table, selection on validation only."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import optuna
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "anchors" / "report.py"
_spec = importlib.util.spec_from_file_location("anchors_report", SCRIPT)
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)

HORIZONS = (96, 192, 336, 720)


def _row(candidate: str, horizon: int, val: float, test: float, *, dataset: str = "ETTh1",
         secs: float = 10.0) -> dict:
    return {"dataset": dataset, "horizon": str(horizon), "seed": "2021", "mixer": "-",
            "candidate": candidate, "val_mse": str(val), "mse": str(test), "mse_paper": str(test - 0.001),
            "train_seconds": str(secs)}


def _rows() -> list[dict]:
    rows = []
    for i, h in enumerate(HORIZONS):
        # dlinear wins validation at every horizon but loses on test; rlinear the other way round
        rows.append(_row("dlinear", h, 0.9 + i / 10, 0.45 + i / 100))
        rows.append(_row("rlinear", h, 1.0 + i / 10, 0.40 + i / 100))
        # refit twins: scored on test by the train+val fit, ranked by the train-only validation
        rows.append(_row("dlinear@tv", h, 0.9 + i / 10, 0.44 + i / 100))
        rows.append(_row("rlinear@tv", h, 1.0 + i / 10, 0.39 + i / 100))
    rows.append(_row("rlinear+dlinear", 96, 0.1, 0.1))  # one horizon only: never selected
    return rows


def test_selects_on_validation_and_states_the_verdict():
    text = report.table(_rows())
    lines = text.splitlines()
    first = next(ln for ln in lines if ln.startswith("| dlinear"))
    assert "← selected on validation" in first  # lowest validation average, though worse on test
    # validation avg (0.9 + 1.0 + 1.1 + 1.2) / 4, test avg (0.45 + ... + 0.48) / 4, seconds summed
    assert "| 2021 | 1.0500 | 0.4650 | 0.4640 |" in first and first.endswith("| 40 |")
    assert ("Selected on validation: `dlinear` (seed 2021), test 4-horizon average **0.4650** (fair) "
            "against the target 0.407: **not met**.") in text
    assert "Selected refit: `dlinear@tv` (seed 2021), test 4-horizon average **0.4550**" in text
    assert "Incomplete (not all four horizons yet): rlinear+dlinear" in text
    assert "`rlinear+dlinear`" not in text.split("Incomplete")[0]  # not a candidate until complete


def test_an_encoder_members_mixer_is_named_where_it_is_selected():
    """Two variate members differ only by mixer (the rows' mixer column): the verdict names which."""
    rows = []
    for mixer, val in (("fem-aft", 0.6), ("yb-spectral", 0.5)):
        for h in HORIZONS:
            rows.append(_row("dlinear+itransformer-notok", h, val, 0.35, dataset="ETTm1") | {"mixer": mixer})
    rows.append(_row("itransformer", 96, 0.1, 0.1, dataset="ETTm1") | {"mixer": "nrgpt"})
    text = report.table(rows)
    assert "Selected on validation: `dlinear+itransformer[yb-spectral]-notok` (seed 2021)" in text
    assert "| dlinear+itransformer[fem-aft]-notok | 2021 |" in text
    assert "Incomplete (not all four horizons yet): itransformer[nrgpt]" in text


def test_an_ensemble_across_mixers_keeps_its_members_mixers():
    mixed = "dlinear+itransformer-notok[fem-aft]+itransformer-notok[nrgpt]"
    rows = [_row(mixed, h, 0.5, 0.35, dataset="ETTm1") | {"mixer": "fem-aft+nrgpt"} for h in HORIZONS]
    assert f"Selected on validation: `{mixed}` (seed 2021)" in report.table(rows)


def test_met_when_the_validation_pick_reaches_the_target():
    rows = [_row("rlinear", h, 1.0, 0.30, dataset="ETTh2") for h in HORIZONS]
    assert "test 4-horizon average **0.3000** (fair) against the target 0.330: **met**." in report.table(rows)


def test_per_horizon_selection_takes_each_horizons_best_validation():
    rows = []
    for h, (val_a, val_b) in zip(HORIZONS, ((1.0, 2.0), (2.0, 1.0), (1.0, 2.0), (2.0, 1.0))):
        rows += [_row("a", h, val_a, 0.1), _row("b", h, val_b, 0.3)]
    by = report.by_candidate(rows)
    line = report.per_horizon_selection(report._scored(by, list(by)))
    assert "test 4-horizon average 0.2000" in line  # (0.1 + 0.3 + 0.1 + 0.3) / 4
    assert "H=96 `a` 0.1000, H=192 `b` 0.3000" in line


def test_export_studies_merges_with_the_rows_of_other_storages(tmp_path):
    out = tmp_path / "studies.csv"
    out.write_text("study,trial,state,val_mse,best,param_lr\n"
                   "rlinear-ETTh1-336,0,COMPLETE,1.2,True,0.001\n"
                   "rlinear-Weather-336,0,COMPLETE,9.9,True,0.1\n")
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="rlinear-Weather-336", storage=storage)
    for value in (0.6, 0.5):
        study.enqueue_trial({"lr": value / 100})
    study.optimize(lambda t: t.suggest_float("lr", 1e-4, 1e-2) * 100, n_trials=2)
    optuna.create_study(study_name="other", storage=storage)  # not an rlinear study: not exported
    report.export_studies(storage, out)
    rows = list(csv.DictReader(out.read_text().splitlines()))
    assert [(r["study"], r["trial"], r["best"]) for r in rows] == [
        ("rlinear-ETTh1-336", "0", "True"),  # kept: not in this storage
        ("rlinear-Weather-336", "0", "False"),  # replaced by the storage's trials
        ("rlinear-Weather-336", "1", "True"),
    ]
    assert float(rows[2]["val_mse"]) == pytest.approx(0.5)
    assert not list(tmp_path.glob(".studies.csv.*"))  # the atomic write left no temporary behind
