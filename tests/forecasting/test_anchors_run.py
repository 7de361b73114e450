"""benchmarks/anchors/run.py: the RLinear member's settings replayed from the committed trials CSV."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tsmix.tuning.cli import parse_key_value

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("anchors_run", ROOT / "benchmarks" / "anchors" / "run.py")
run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run)

HEADER = ("study,trial,state,val_mse,best,param_batch_size,param_dropout,param_individual,param_lr,"
          "param_revin_affine,param_lookback\n")


def test_best_finished_trial_is_replayed_with_its_types(tmp_path):
    path = tmp_path / "studies.csv"
    path.write_text(HEADER
                    + "rlinear-ETTh1-336,0,COMPLETE,1.20,False,32,0.5,True,0.001,True,\n"
                    + "rlinear-ETTh1-336,1,COMPLETE,1.10,True,16,0.25,False,0.002,False,\n"
                    # pruned: never the best, however low its value
                    + "rlinear-ETTh1-336,2,PRUNED,0.50,False,64,0.1,False,0.003,False,\n"
                    + "rlinear-ETTh2-336,0,COMPLETE,0.30,True,64,0.1,False,0.004,True,\n")
    rl = run.rlinear_params_csv(str(path), "rlinear-ETTh1-336")
    assert rl == {"lr": 0.002, "batch_size": 16, "dropout": 0.25, "revin_affine": False, "individual": False}
    assert type(rl["batch_size"]) is int and type(rl["individual"]) is bool


def test_the_committed_trials_give_the_committed_members_settings():
    """The ETTh rows of results.csv were fitted from the Optuna storage; the CSV replays the same."""
    import csv

    trials = str(ROOT / "benchmarks" / "anchors" / "studies.csv")
    with open(ROOT / "benchmarks" / "anchors" / "results.csv", newline="") as fh:
        used = {(r["dataset"], r["rlinear_params"]) for r in csv.DictReader(fh)
                if r["candidate"] == "rlinear" and r["dataset"] in ("ETTh1", "ETTh2")}
    assert used, "no ETTh rlinear rows committed"
    for dataset, params in used:
        assert repr(run.rlinear_params_csv(trials, f"rlinear-{dataset}-336")) == params


def test_a_parameter_the_study_held_fixed_or_a_missing_study_is_a_clear_error(tmp_path):
    path = tmp_path / "studies.csv"
    path.write_text(HEADER + "rlinear-ETTm1-336,0,COMPLETE,0.6,True,16,0.07,,0.0004,False,\n")
    with pytest.raises(SystemExit, match="individual.*--rlinear-set KEY=VALUE.*--rlinear-study"):
        run.rlinear_params_csv(str(path), "rlinear-ETTm1-336")
    with pytest.raises(SystemExit, match="no finished trial of study 'rlinear-X'"):
        run.rlinear_params_csv(str(path), "rlinear-X")
    with pytest.raises(SystemExit, match="no such file"):
        run.rlinear_params_csv(str(tmp_path / "none.csv"), "rlinear-ETTm1-336")


def test_what_the_study_held_fixed_is_given_again(capsys):
    """The ETTm1/ETTm2/Weather studies ran with --set individual=false: their trials lack it,
    --rlinear-set gives it back, and the replay lands on the settings the committed rows were fitted
    with. Without --rlinear-trials the flag is refused, not ignored."""
    import csv

    trials = str(ROOT / "benchmarks" / "anchors" / "studies.csv")
    with open(ROOT / "benchmarks" / "anchors" / "results.csv", newline="") as fh:
        used = {(r["dataset"], r["rlinear_params"]) for r in csv.DictReader(fh)
                if r["candidate"] == "rlinear" and r["dataset"] in ("ETTm1", "ETTm2", "Weather")}
    assert len(used) == 3, used
    key, value = parse_key_value("individual=false")
    for dataset, params in used:
        assert repr(run.rlinear_params_csv(trials, f"rlinear-{dataset}-336", {key: value})) == params
    with pytest.raises(SystemExit) as exc:
        run.main(["--members", "rlinear", "--rlinear-study", "sqlite:///x.db",
                  "--rlinear-set", "individual=false"])
    assert exc.value.code == 2 and "--rlinear-set goes with --rlinear-trials" in capsys.readouterr().err


def test_a_last_centred_rlinear_needs_its_own_label(capsys):
    """Rows and saved fits are keyed by the member's label: a last-centred RLinear under the plain
    label would be skipped as done (or clash with the mean-centred fit), so it is refused."""
    with pytest.raises(SystemExit):
        run.main(["--members", "rlinear", "--rlinear-center", "last",
                  "--rlinear-trials", str(ROOT / "benchmarks" / "anchors" / "studies.csv")])
    assert "--rlinear-label rlinear-last" in capsys.readouterr().err


def test_a_seed_ensemble_needs_two_seeds_and_no_refit(capsys):
    for extra in (["--seeds", "2021"], ["--seeds", "2021,2021"], ["--seeds", "2021,2022", "--refit"]):
        with pytest.raises(SystemExit):
            run.main(["--members", "dlinear", "--seed-ensemble", *extra])
        assert "--seed-ensemble needs two or more distinct --seeds" in capsys.readouterr().err


def cheap_members(names, dataset, horizon, seed, mixers, rl, labels, variate=None, lookbacks=None,
                  variate_lookbacks=None):
    """Stand-in for run.members: the same labels, members at 1 epoch and L=48 (a linear member
    with ``lookbacks``, or the variate member with ``variate_lookbacks``, at the lookback its label
    names)."""
    from tsmix.forecasting import Forecaster

    common = dict(horizon=horizon, lookback=48, epochs=1, seed=seed, threads=1, progress=False)
    out = {}
    for n in names:
        for label in run.member_labels([n], labels, mixers, lookbacks, variate_lookbacks):
            extra = {"mixer": run.split_label(label)[1]} if n in run.MIXER_MEMBERS else {}
            if n in run.LINEAR_MEMBERS and lookbacks:
                extra = {"lookback": run.lookback_of(label)}
            if n == "itransformer" and variate_lookbacks:
                extra["lookback"] = run.lookback_of(run.split_label(label)[0])
            out[label] = lambda model=n, extra=extra, **o: Forecaster(model=model, **{**common, **extra, **o})
    return out


def test_rows_name_a_candidate_by_its_mixers():
    assert run.row_id(("dlinear",)) == ("-", "dlinear")
    assert run.row_id(("dlinear", "itransformer-notok[fem-aft]")) == ("fem-aft", "dlinear+itransformer-notok")
    assert run.row_id(("patchtst[softmax]", "itransformer[softmax]")) == ("softmax", "patchtst+itransformer")
    assert run.row_id(("itransformer[fem-aft]", "itransformer[yb-spectral]")) == (
        "fem-aft+yb-spectral", "itransformer[fem-aft]+itransformer[yb-spectral]")
    assert run.row_name(("rlinear", "patchtst[gated]"), True) == ("gated", "rlinear+patchtst@tv")
    assert run.member_labels(["dlinear", "itransformer"], {"itransformer": "itransformer-notok"},
                             ["a", "b"]) == ["dlinear", "itransformer-notok[a]", "itransformer-notok[b]"]


def test_an_unknown_mixer_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        run.main(["--members", "itransformer", "--mixer", "softmax,fem-nope"])
    assert exc.value.code == 2 and "--mixer: unknown ['fem-nope']" in capsys.readouterr().err


def test_ensembles_across_mixers_share_the_single_mixer_runs(tmp_path, monkeypatch, data_dir):
    """--mixer a,b fits the encoder member once per mixer; its one-mixer candidates are the rows a
    run with --mixer a alone writes (so such a run afterwards has nothing left to do), and the
    cross-mixer ensembles average the very fits those rows scored."""
    import csv

    monkeypatch.setattr(run, "members", cheap_members)
    out, runs = tmp_path / "rows.csv", tmp_path / "runs"
    argv = ["--datasets", "ETTh1", "--horizons", "24", "--seeds", "2021", "--members", "dlinear,itransformer",
            "--variate-label", "itransformer-notok", "--data-dir", str(data_dir), "--runs", str(runs),
            "--out", str(out), "--commit", "test"]

    def rows():
        with open(out, newline="") as fh:
            return {(r["mixer"], r["candidate"]): r for r in csv.DictReader(fh)}

    assert run.main([*argv, "--mixer", "softmax"]) == 0
    alone = rows()
    assert set(alone) == {("-", "dlinear"), ("softmax", "itransformer-notok"),
                          ("softmax", "dlinear+itransformer-notok")}
    assert run.main([*argv, "--mixer", "softmax,linear"]) == 0
    both = rows()
    mixed = "itransformer-notok[softmax]+itransformer-notok[linear]"
    assert set(both) - set(alone) == {
        ("linear", "itransformer-notok"), ("linear", "dlinear+itransformer-notok"),
        ("softmax+linear", mixed), ("softmax+linear", "dlinear+" + mixed)}
    assert {k: both[k]["mse"] for k in alone} == {k: r["mse"] for k, r in alone.items()}  # not scored again
    assert sorted(p.name for p in (runs / "ETTh1" / "24" / "2021").iterdir()) == [
        "dlinear", "itransformer-notok-linear", "itransformer-notok-softmax"]
    parts = [float(m) for m in both["softmax+linear", "dlinear+" + mixed]["members_mse"].split(";")]
    assert parts == pytest.approx([float(both[k]["mse"]) for k in (
        ("-", "dlinear"), ("softmax", "itransformer-notok"), ("linear", "itransformer-notok"))], abs=1e-6)
    # scored from forecasts made once per member: the very numbers Ensemble.evaluate gives
    from tsmix.forecasting import Forecaster
    from tsmix.forecasting.ensemble import Ensemble

    folder = runs / "ETTh1" / "24" / "2021"
    ens = Ensemble([Forecaster.load(folder / m) for m in ("dlinear", "itransformer-notok-softmax",
                                                           "itransformer-notok-linear")])
    row = both["softmax+linear", "dlinear+" + mixed]
    assert float(row["mse"]) == ens.evaluate("test")["mse"]
    assert float(row["mse_paper"]) == ens.evaluate("test", "paper")["mse"]
    assert float(row["val_mse"]) == ens.evaluate("val")["mse"]
    n = len(out.read_text().splitlines())
    assert n == 1 + len(both)  # the header, and no candidate twice
    assert run.main([*argv, "--mixer", "linear"]) == 0
    assert len(out.read_text().splitlines()) == n


def test_seed_ensembles_average_every_members_fits_over_the_seeds(tmp_path, monkeypatch, data_dir):
    """Cheap members (1 epoch, L=48) stand in for the real ones; the seed-ensemble rows must be the
    equal-weight mean of the per-seed fits the single-seed rows scored."""
    import csv

    from tsmix.forecasting import Forecaster

    monkeypatch.setattr(run, "members", cheap_members)
    out, runs = tmp_path / "rows.csv", tmp_path / "runs"
    argv = ["--datasets", "ETTh1", "--horizons", "24", "--seeds", "2021,2022", "--members", "rlinear,dlinear",
            "--rlinear-trials", str(ROOT / "benchmarks" / "anchors" / "studies.csv"), "--seed-ensemble",
            "--data-dir", str(data_dir), "--runs", str(runs), "--out", str(out), "--commit", "test"]
    assert run.main(argv) == 0
    with open(out, newline="") as fh:
        rows = {(r["seed"], r["candidate"]): r for r in csv.DictReader(fh)}
    assert set(rows) == {(s, c) for s in ("2021", "2022", "2021+2022")
                         for c in ("rlinear", "dlinear", "rlinear+dlinear")}
    single = {(s, m): float(rows[s, m]["mse"]) for s in ("2021", "2022") for m in ("rlinear", "dlinear")}
    assert single["2021", "dlinear"] != single["2022", "dlinear"]  # the seeds did train apart
    for cand, members in (("dlinear", ["dlinear"]), ("rlinear+dlinear", ["rlinear", "dlinear"])):
        row = rows["2021+2022", cand]
        parts = [float(m) for m in row["members_mse"].split(";")]
        # every member's fit of every seed, each the very fit its single-seed row scored
        assert parts == pytest.approx([single[s, m] for m in members for s in ("2021", "2022")], abs=1e-6)
        # MSE is convex: the mean forecast scores at most the mean of its parts' scores
        assert float(row["mse"]) <= sum(parts) / len(parts) + 1e-9
        # the fits' own recorded training time, summed (they were loaded, not trained again)
        took = sum(Forecaster.load(runs / "ETTh1" / "24" / s / m).metrics_["fit_seconds"]
                   for s in ("2021", "2022") for m in members)
        assert float(row["train_seconds"]) == pytest.approx(took, abs=0.1)
    n = len(rows)
    assert run.main(argv) == 0  # resumable: nothing left to score, no row twice
    with open(out, newline="") as fh:
        assert len(list(csv.DictReader(fh))) == n


def test_linear_members_come_once_per_lookback():
    """--linear-lookbacks: rlinear and dlinear once per lookback, the one at 336 under its plain name
    (so its rows and fits are a plain run's); every factory builds its member at its lookback."""
    labels = run.member_labels(["rlinear", "dlinear", "itransformer"], {"rlinear": "rlinear-last"},
                               ["softmax"], [96, 336, 720])
    assert labels == ["rlinear-last-L96", "rlinear-last", "rlinear-last-L720", "dlinear-L96", "dlinear",
                      "dlinear-L720", "itransformer[softmax]"]
    assert run.member_labels(["rlinear"], {}, ["softmax"], None) == ["rlinear"]
    assert [run.lookback_of(n) for n in ("rlinear-L720", "rlinear", "rlinear-last", "dlinear-L96")] == [
        720, 336, 336, 96]
    assert run.has_member(("dlinear", "rlinear-L720"), "rlinear")
    assert not run.has_member(("dlinear", "rlinear-last-L720"), "rlinear")
    assert run.has_member(("rlinear-last-L720",), "rlinear-last")
    made = run.members(["rlinear", "dlinear"], "ETTh1", 96, 2021, ["softmax"], {"lr": 1e-3}, {}, None,
                       [192, 336])
    assert {k: f().config.lookback for k, f in made.items()} == {
        "rlinear-L192": 192, "rlinear": 336, "dlinear-L192": 192, "dlinear": 336}
    plain = run.members(["rlinear", "dlinear"], "ETTh1", 96, 2021, ["softmax"], {"lr": 1e-3}, {})
    for name in ("rlinear", "dlinear"):  # the plain member is the very config of a run without the flag
        assert made[name]().config.resolved() == plain[name]().config.resolved()


def test_linear_lookbacks_are_checked(capsys, monkeypatch):
    for bad in ("", "336,x", "0,336"):
        with pytest.raises(SystemExit) as exc:
            run.main(["--members", "dlinear", "--linear-lookbacks", bad])
        assert exc.value.code == 2 and "--linear-lookbacks: give positive integers" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        run.main(["--members", "itransformer", "--linear-lookbacks", "336,720"])
    assert exc.value.code == 2 and "--members has neither" in capsys.readouterr().err
    # a study that chose lookback 512 (its storage replays it): its member is not the one at 336
    import argparse

    monkeypatch.setattr(run, "rlinear_params_csv", lambda *a: {"lr": 1e-3, "lookback": 512})
    args = argparse.Namespace(rlinear_study_name="rlinear-{dataset}-lb", rlinear_trials="t.csv",
                              rlinear_set=[], rlinear_center="mean", rlinear_label="rlinear",
                              lookbacks=[336, 720])
    with pytest.raises(SystemExit) as exc:
        run.rlinear_settings(args, ["rlinear"], "ETTh1")
    assert "'rlinear-ETTh1-lb' chose lookback 512" in str(exc.value.code)
    args.lookbacks = None  # without the flag the study's lookback stands
    assert run.rlinear_settings(args, ["rlinear"], "ETTh1") == {"lr": 1e-3, "lookback": 512}


def test_ensembles_across_lookbacks_keep_the_plain_rows(tmp_path, monkeypatch, data_dir):
    """With --linear-lookbacks 48,336 the members at 336 are the plain run's (not scored or fitted
    again), and an ensemble across lookbacks averages the fits its members' rows scored."""
    import csv

    monkeypatch.setattr(run, "members", cheap_members)
    out, runs = tmp_path / "rows.csv", tmp_path / "runs"
    argv = ["--datasets", "ETTh1", "--horizons", "24", "--seeds", "2021", "--members", "dlinear",
            "--data-dir", str(data_dir), "--runs", str(runs), "--out", str(out), "--commit", "test"]

    def rows():
        with open(out, newline="") as fh:
            return {r["candidate"]: r for r in csv.DictReader(fh)}

    assert run.main([*argv, "--linear-lookbacks", "336"]) == 0  # one lookback: the plain member alone
    first = rows()
    assert set(first) == {"dlinear"}
    assert run.main([*argv, "--linear-lookbacks", "48,336"]) == 0
    both = rows()
    assert set(both) == {"dlinear", "dlinear-L48", "dlinear-L48+dlinear"}
    assert both["dlinear"] == first["dlinear"]  # kept, not scored again
    parts = [float(m) for m in both["dlinear-L48+dlinear"]["members_mse"].split(";")]
    assert parts == pytest.approx([float(both[k]["mse"]) for k in ("dlinear-L48", "dlinear")], abs=1e-6)
    assert float(both["dlinear-L48+dlinear"]["mse"]) <= sum(parts) / 2 + 1e-9  # MSE is convex
    assert sorted(p.name for p in (runs / "ETTh1" / "24" / "2021").iterdir()) == ["dlinear", "dlinear-L48"]


def test_the_variate_member_comes_once_per_lookback():
    """--variate-lookbacks: the itransformer member once per lookback and mixer, the one at 336 under
    its plain name; each is the very member a one-lookback run fits (same label, same settings)."""
    labels = run.member_labels(["dlinear", "itransformer"], {"itransformer": "itransformer-notok"},
                               ["nrgpt", "yb-spectral"], None, [336, 720])
    assert labels == ["dlinear", "itransformer-notok[nrgpt]", "itransformer-notok[yb-spectral]",
                      "itransformer-notok-L720[nrgpt]", "itransformer-notok-L720[yb-spectral]"]
    assert run.row_id(("dlinear-L720", "itransformer-notok-L720[nrgpt]")) == (
        "nrgpt", "dlinear-L720+itransformer-notok-L720")
    variate = {"lookback": 336, "calendar": False}
    notok = {"itransformer": "itransformer-notok"}
    made = run.members(["itransformer"], "ETTm1", 96, 2021, ["nrgpt"], {}, notok, variate, None, [336, 720])
    assert {k: f().config.lookback for k, f in made.items()} == {
        "itransformer-notok[nrgpt]": 336, "itransformer-notok-L720[nrgpt]": 720}
    plain = run.members(["itransformer"], "ETTm1", 96, 2021, ["nrgpt"], {}, notok, variate)
    alone = run.members(["itransformer"], "ETTm1", 96, 2021, ["nrgpt"], {},
                        {"itransformer": "itransformer-notok-L720"}, {"lookback": 720, "calendar": False})
    for name, one in (("itransformer-notok[nrgpt]", plain), ("itransformer-notok-L720[nrgpt]", alone)):
        assert made[name]().config.resolved() == one[name]().config.resolved()
        assert made[name]().config.calendar is False


def test_variate_lookbacks_are_checked(capsys):
    for bad in ("", "336,x", "0,336"):
        with pytest.raises(SystemExit) as exc:
            run.main(["--members", "itransformer", "--variate-lookbacks", bad])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and "--variate-lookbacks: give positive integers" in err
    for argv, why in (
            (["--members", "dlinear", "--variate-lookbacks", "336,720"], "--members has none"),
            (["--members", "itransformer", "--variate-lookbacks", "336,720", "--variate-lookback", "96"],
             "give one of --variate-lookback"),
            (["--members", "itransformer", "--variate-lookbacks", "336,720", "--variate-label",
              "itransformer-L96"], "already ends in a lookback")):
        with pytest.raises(SystemExit) as exc:
            run.main(argv)
        assert exc.value.code == 2 and why in capsys.readouterr().err


def test_ensembles_across_variate_lookbacks_load_the_one_lookback_fits(tmp_path, monkeypatch, data_dir):
    """A run with --variate-lookback 48 --variate-label itransformer-L48 writes the rows and fits that
    --variate-lookbacks 48,336 then keeps and loads; only the member at 336 is fitted anew."""
    import csv

    monkeypatch.setattr(run, "members", cheap_members)
    out, runs = tmp_path / "rows.csv", tmp_path / "runs"
    argv = ["--datasets", "ETTh1", "--horizons", "24", "--seeds", "2021", "--members", "itransformer",
            "--mixer", "linear", "--data-dir", str(data_dir), "--runs", str(runs), "--out", str(out),
            "--commit", "test"]

    def rows():
        with open(out, newline="") as fh:
            return {r["candidate"]: r for r in csv.DictReader(fh)}

    assert run.main([*argv, "--variate-lookback", "48", "--variate-label", "itransformer-L48"]) == 0
    first = rows()
    assert set(first) == {"itransformer-L48"}
    folder = runs / "ETTh1" / "24" / "2021"
    stamp = (folder / "itransformer-L48-linear" / "config.json").stat().st_mtime_ns
    assert run.main([*argv, "--variate-lookbacks", "48,336"]) == 0
    both = rows()
    assert set(both) == {"itransformer-L48", "itransformer", "itransformer-L48+itransformer"}
    assert both["itransformer-L48"] == first["itransformer-L48"]
    assert (folder / "itransformer-L48-linear" / "config.json").stat().st_mtime_ns == stamp  # loaded
    parts = [float(m) for m in both["itransformer-L48+itransformer"]["members_mse"].split(";")]
    assert parts == pytest.approx([float(both[k]["mse"]) for k in ("itransformer-L48", "itransformer")],
                                  abs=1e-6)
