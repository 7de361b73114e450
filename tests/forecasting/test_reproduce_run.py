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


def fake_row(model, dataset, horizon, seed, mixer, patience, epochs, mixer_options) -> dict:
    """The row a replaced fit returns: the key columns as run_one writes them, made-up scores."""
    return {f: "" for f in run.FIELDS} | {
        "dataset": dataset, "horizon": horizon, "lookback": 336, "model": model,
        "mixer": run.mixer_label(mixer, mixer_options or {}), "seed": seed, "patience": patience,
        "epochs_max": epochs, "mse": 0.4, "mae": 0.4, "mse_paper": 0.4, "mae_paper": 0.4,
        "epochs": 1, "best_epoch": 1, "seconds_per_epoch": 1.0}


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
                     mixer_options=None, checkpoint_dir=None):
        seen.append((mixer, mixer_options))
        return fake_row(model, dataset, horizon, seed, mixer, patience, epochs, mixer_options)

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


def test_checkpoints_give_each_run_a_folder_removed_once_its_row_is_stored(tmp_path, monkeypatch):
    """--checkpoints: every run gets its own folder (by row key, so a variant never continues the
    default's weights) and the folder is gone once the row is in the CSV."""
    out, root = tmp_path / "results.csv", tmp_path / "ck"
    folders: list = []

    def fake_run_one(model, dataset, horizon, seed, mixer, patience, epochs, threads, data_dir, lookback=None,
                     mixer_options=None, checkpoint_dir=None, callbacks=()):
        checkpoint_dir.mkdir(parents=True)
        (checkpoint_dir / "last.safetensors").write_bytes(b"weights")
        folders.append(checkpoint_dir)
        return fake_row(model, dataset, horizon, seed, mixer, patience, epochs, mixer_options)

    monkeypatch.setattr(run, "run_one", fake_run_one)
    argv = ["--models", "patchtst", "--datasets", "ETTh1", "--horizons", "96,192", "--seeds", "2021",
            "--epochs", "20", "--mixer", "nrgpt", "--out", str(out), "--checkpoints", str(root)]
    assert run.main(argv) == 0
    assert run.main([*argv, "--mixer-option", "steps=1"]) == 0
    assert len(folders) == len(set(folders)) == 4 and all(f.parent == root / "reproduce" for f in folders)
    assert "mixer=nrgpt_steps=1_" in folders[2].name and not any(f.exists() for f in folders)
    assert len(out.read_text().splitlines()) == 5  # header + 4 rows


class Stop(Exception):
    pass


def test_a_killed_run_continues_from_its_checkpoint_to_the_uninterrupted_result(tmp_path, data_dir):
    """The real fit: a run stopped in its third epoch (two were checkpointed), rerun with the same
    checkpoint folder, trains only the remaining epochs and scores exactly what one uninterrupted
    run scores."""
    import torch

    n = torch.get_num_threads()
    common = ("dlinear", "ETTh1", 96, 2021, "-", None, 4, 1, str(data_dir))
    try:
        ref = run.run_one(*common)
        folder, seen = tmp_path / "ck", []

        def stop_in_third(epoch, logs):  # before epoch 3's checkpoint is written
            seen.append(epoch)
            if epoch == 3:
                raise Stop

        with pytest.raises(Stop):
            run.run_one(*common, checkpoint_dir=folder, callbacks=(stop_in_third,))
        assert seen == [1, 2, 3]
        seen.clear()
        row = run.run_one(*common, checkpoint_dir=folder, callbacks=(lambda e, logs: seen.append(e),))
    finally:
        torch.set_num_threads(n)
    assert seen[0] == 3  # continued, not restarted
    for k in ("mse", "mae", "mse_paper", "mae_paper", "val_mse", "epochs", "best_epoch", "windows"):
        assert row[k] == ref[k], k


def test_an_unusable_checkpoint_folder_is_refused_before_any_run(tmp_path, capsys):
    """--checkpoints naming a file: argparse's one line naming the flag, no run, no results file."""
    out, blocker = tmp_path / "r.csv", tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as exc:
        run.main(["--models", "dlinear", "--out", str(out), "--checkpoints", str(blocker)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "error: --checkpoints:" in err and "a-file" in err and "Traceback" not in err
    assert not out.exists()
