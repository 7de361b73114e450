"""benchmarks/reproduce/run.py: a mixer variant (--mixer-option) is its own row key and label."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "reproduce" / "run.py"
_spec = importlib.util.spec_from_file_location("reproduce_run", SCRIPT)
run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run)


@pytest.fixture(autouse=True)
def _allocator_untouched(monkeypatch):
    """main() keeps freed memory as the tsmix command does; that is process-wide, and other tests
    check that pytest's process never applied it."""
    from tsmix.engine import memory

    monkeypatch.setattr(memory, "retain_unless_disabled", lambda: None)


def test_mixer_label_names_the_options_in_a_fixed_order():
    assert run.mixer_label("nrgpt", {}) == "nrgpt"
    assert run.mixer_label("nrgpt", {"steps": 1}) == "nrgpt[steps=1]"
    assert run.mixer_label("nrgpt", {"step": 0.3, "steps": 2}) == "nrgpt[step=0.3,steps=2]"


def test_a_variant_is_not_skipped_as_the_default_mixers_stored_run(tmp_path, monkeypatch):
    """The stored nrgpt row must not count as done for nrgpt[steps=1]: the variant runs (here: the
    fit is replaced, and the row it writes carries the variant's label and its typed options)."""
    out = tmp_path / "results.csv"
    seen: list[tuple] = []

    def fake_run_one(model, dataset, horizon, seed, mixer, patience, epochs, threads, data_dir, lookback=None,
                     mixer_options=None):
        seen.append((mixer, mixer_options))
        return {f: "" for f in run.FIELDS} | {
            "dataset": dataset, "horizon": horizon, "lookback": 336, "model": model,
            "mixer": run.mixer_label(mixer, mixer_options or {}), "seed": seed, "patience": patience,
            "epochs_max": epochs, "mse": 0.4, "mae": 0.4, "mse_paper": 0.4, "mae_paper": 0.4,
            "epochs": 1, "best_epoch": 1, "seconds_per_epoch": 1.0}

    monkeypatch.setattr(run, "run_one", fake_run_one)
    argv = ["--models", "patchtst", "--datasets", "ETTh1", "--horizons", "96", "--seeds", "2021",
            "--epochs", "20", "--mixer", "nrgpt", "--out", str(out)]
    assert run.main(argv) == 0
    assert run.main([*argv, "--mixer-option", "steps=1"]) == 0
    assert run.main([*argv, "--mixer-option", "steps=1"]) == 0  # stored now: skipped
    assert seen == [("nrgpt", {}), ("nrgpt", {"steps": 1})]
    assert type(seen[1][1]["steps"]) is int
    labels = [ln.split(",")[4] for ln in out.read_text().splitlines()[1:]]
    assert labels == ["nrgpt", "nrgpt[steps=1]"]


def test_a_mistyped_option_is_refused_before_any_run(tmp_path, capsys):
    """A usage error: exit status 2 and argparse's one line naming the option, no traceback, no file."""
    out = tmp_path / "r.csv"
    with pytest.raises(SystemExit) as exc:
        run.main(["--mixer", "nrgpt", "--mixer-option", "steps=one", "--out", str(out)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "error: --mixer-option:" in err and "steps" in err and "Traceback" not in err
    assert not out.exists()
