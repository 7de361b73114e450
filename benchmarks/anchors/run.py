"""Issue #22 anchors: fit the candidate members once per (dataset, horizon, seed), score every
member and every ensemble of them on validation AND test, one CSV row per candidate.

Members (each with its own recipe; the model is never chosen by looking at test):

* ``patchtst``: the patch encoder with ``--mixer`` on the PatchTST paper preset, capped at 20
  epochs with patience 10 (the reproduction recipe);
* ``rlinear``: RevIN + one linear map, with the hyper-parameters of the best trial of a
  ``tsmix tune`` study (validation objective) named by ``--rlinear-study`` (its Optuna storage),
  or replayed from the committed trials with ``--rlinear-trials benchmarks/anchors/studies.csv``;
* ``dlinear``: DLinear's paper preset;
* ``itransformer``: the variate encoder with ``--mixer`` on the iTransformer paper preset, at
  ``--variate-lookback`` (default 336; the preset's 96 is the official setting) and with the
  official timestamp tokens (``calendar=True``) unless ``--no-variate-calendar``: the settings
  that lowered validation MSE on ETTm1 (README: the iTransformer timestamp tokens).

``--members`` picks which of them are fitted; ``--rlinear-label`` names the RLinear member when it
comes from another study (e.g. ``rlinear-{dataset}-lb``, whose space also searches the lookback:
``space_lookback.json``), so its rows sit beside the first study's instead of replacing them;
``--variate-label`` does the same for an itransformer member with other settings (e.g.
``itransformer-notok`` with ``--no-variate-calendar``).

``--mixer`` takes a comma-separated list too: the patchtst and itransformer members then come once
per mixer and the candidates include ensembles across mixers, named with each member's mixer
(``dlinear+itransformer-notok[fem-aft]+itransformer-notok[yb-spectral]``, mixer column
``fem-aft+yb-spectral``); a candidate with one mixer keeps the rows and saved fits of a run with
that ``--mixer`` alone.

``--linear-lookbacks 192,336,720`` fits the rlinear and dlinear members once per lookback
(``rlinear-L192``, ``dlinear-L720``; the one at the anchors' 336 keeps its plain name, rows and saved
fits), so the candidates include ensembles across lookbacks. ``--variate-lookbacks 336,720`` does
the same for the itransformer member (``itransformer-notok-L720[nrgpt]``): its member at one
lookback is the very one ``--variate-lookback <L> --variate-label itransformer-notok-L<L>`` fits.

Candidates are each member alone and every ensemble (equal-weight mean) of two or more. The
report (``report.py``) picks, per dataset, the candidate with the lowest validation MSE averaged
over the four horizons and puts its test score beside the published anchors. Fitted members are
saved under ``--runs`` and loaded from there when present, so new combinations can be scored
without training again. Resumable: only candidates whose rows are not in the CSV yet are scored.

``--seed-ensemble`` (with two or more ``--seeds``) also scores every candidate with each member
replaced by the mean of its fits over those seeds (rows under the seed ``2021+2022+...``): the
seed ensemble, selected on validation like any other candidate.

``--refit`` adds tsmix tune's champion protocol: each member is trained again on train+val for
the epoch count at which its train-only fit was best on validation, and every candidate gets a
twin ``<candidate>@tv`` scored on test with those members. It is selected by its train-only
twin's validation score (its own members have trained on validation). Not the published
protocol (those models never trained on the validation rows): the report lists it apart.

    OMP_NUM_THREADS=1 python benchmarks/anchors/run.py --datasets ETTh1,ETTh2 --seeds 2021 \\
        --rlinear-study sqlite:///optuna.db
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIELDS = ["dataset", "horizon", "seed", "mixer", "candidate", "size", "val_mse", "mse", "mae", "mse_paper",
          "windows", "members_mse", "train_seconds", "rlinear_params", "commit", "finished_at"]


def rlinear_params(storage: str, study_name: str) -> dict:
    """Forecaster kwargs of the best trial of the study ``study_name`` in ``storage``."""
    import optuna

    from tsmix.tuning.storage import resolve_storage_url
    from tsmix.tuning.study import best_params

    kind, _, target = resolve_storage_url(storage)
    if kind != "postgresql" and not Path(target).is_file():  # optuna would create an empty database there
        raise SystemExit(f"no study storage at {target}: fix --rlinear-study, or run `tsmix tune --model "
                         f"rlinear --study {study_name} --storage {storage} ...` first")
    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
        best = study.best_trial
    except (KeyError, ValueError):  # no such study / no finished trial in it
        raise SystemExit(f"no finished rlinear study {study_name!r} in {storage}: run `tsmix tune --model "
                         f"rlinear --study {study_name} --storage {storage} ...` first, or fix "
                         "--rlinear-study / --rlinear-study-name") from None
    return best_params(study, "rlinear", ["softmax"], best)


def rlinear_params_csv(path: str, study_name: str, fixed: dict | None = None) -> dict:
    """Forecaster kwargs of the best finished trial of ``study_name`` in a trials CSV as
    ``report.py`` writes it (``studies.csv``: ``study, trial, state, val_mse, param_*``), replayed
    through the rlinear search space: the committed file stands in for the Optuna storage. A
    study that held some of its space fixed (``tsmix tune --set``) left those out of its trials'
    params: ``fixed`` gives them again (``--rlinear-set``, the study's ``--set``); without it the
    replay fails on them, naming the parameter."""
    import csv

    from tsmix.tuning.study import make_search

    if not Path(path).is_file():
        raise SystemExit(f"--rlinear-trials {path}: no such file (benchmarks/anchors/studies.csv holds "
                         "the committed studies' trials)")
    with open(path, newline="") as fh:
        rows = [r for r in csv.DictReader(fh)
                if r.get("study") == study_name and r.get("state") == "COMPLETE"]
    if not rows:
        raise SystemExit(f"--rlinear-trials {path}: no finished trial of study {study_name!r}; fix "
                         "--rlinear-study-name, or tune it first")
    best = min(rows, key=lambda r: float(r["val_mse"]))

    def value(text: str):
        if text in ("True", "False"):
            return text == "True"
        try:
            return int(text)
        except ValueError:
            return float(text)

    params = {k.removeprefix("param_"): value(v) for k, v in best.items()
              if k.startswith("param_") and v != ""}
    try:
        return make_search("rlinear", ["softmax"], fixed or {}, None).replay(params, int(best["trial"]))
    except ValueError as exc:  # a parameter the study held fixed is not in its trials
        raise SystemExit(f"--rlinear-trials: trial {best['trial']} of {study_name!r} cannot be replayed "
                         f"from {path} ({exc}); give what the study held fixed with --rlinear-set KEY=VALUE "
                         "(its tsmix tune --set), or its storage with --rlinear-study") from None


def members(names: list[str], dataset: str, horizon: int, seed: int, mixers: list[str], rl: dict,
            labels: dict[str, str], variate: dict | None = None, lookbacks: list[int] | None = None,
            variate_lookbacks: list[int] | None = None) -> dict:
    """Factories of the members by internal label, in ``names`` order: ``make(**overrides)``. A
    member built with a mixer comes once per ``mixers`` entry, labelled ``<label>[<mixer>]``
    (``itransformer-notok[fem-aft]``); a linear member once per ``lookbacks`` entry, labelled
    ``<label>-L<lookback>`` but at the anchors' 336 (:func:`member_labels`), and the itransformer
    member so once per ``variate_lookbacks`` entry (``itransformer-notok-L720[nrgpt]``); ``labels``
    gives a member's name in the rows, when not its own."""
    from tsmix.forecasting import Forecaster

    common = dict(seed=seed, threads=1, progress=False)
    make = {
        "patchtst": lambda mixer, **o: Forecaster.from_preset(
            "paper", "patchtst", dataset, horizon, mixer=mixer,
            **{"epochs": 20, "patience": 10, **common, **o}),
        # the study's lookback when it searched one, else the anchors' 336
        "rlinear": lambda **o: Forecaster(
            model="rlinear", horizon=horizon,
            **{"epochs": 10, "patience": 3, "lookback": 336, **rl, **common, **o},
        ),
        "dlinear": lambda **o: Forecaster.from_preset("paper", "dlinear", dataset, horizon,
                                                      **{**common, **o}),
        "itransformer": lambda mixer, **o: Forecaster.from_preset(
            "paper", "itransformer", dataset, horizon, mixer=mixer, **{**(variate or {}), **common, **o}),
    }
    out = {}
    for n in names:
        for lab in member_labels([n], labels, mixers, lookbacks, variate_lookbacks):
            mixer = split_label(lab)[1]
            if mixer:
                at = ({"lookback": lookback_of(split_label(lab)[0])}
                      if n == "itransformer" and variate_lookbacks else {})
                out[lab] = lambda m=mixer, f=make[n], at=at, **o: f(m, **{**at, **o})
            elif lookbacks:  # the member at each lookback (the plain label is the one at 336)
                at = lookback_of(lab)
                out[lab] = lambda f=make[n], at=at, **o: f(**{"lookback": at, **o})
            else:
                out[lab] = make[n]
    return out


MIXER_MEMBERS = ("patchtst", "itransformer")  # members built with --mixer; the others have no mixer
LINEAR_MEMBERS = ("rlinear", "dlinear")  # members --linear-lookbacks repeats (cheap to fit)
ANCHOR_LOOKBACK = 336  # the anchors' lookback: the member at it keeps its plain name (and old rows)


def member_labels(names: list[str], labels: dict[str, str], mixers: list[str],
                  lookbacks: list[int] | None = None,
                  variate_lookbacks: list[int] | None = None) -> list[str]:
    """The members' internal labels: a mixer member once per mixer, ``<label>[<mixer>]``; with
    ``lookbacks``, a linear member once per lookback, ``<label>-L<lookback>`` (plain at 336); with
    ``variate_lookbacks``, the itransformer member so once per lookback, each once per mixer."""
    out = []
    for n in names:
        base = labels.get(n, n)
        if n in MIXER_MEMBERS:
            bases = ([at_lookback(base, lb) for lb in variate_lookbacks]
                     if n == "itransformer" and variate_lookbacks else [base])
            out += [f"{b}[{m}]" for b in bases for m in mixers]
        elif n in LINEAR_MEMBERS and lookbacks:
            out += [at_lookback(base, lb) for lb in lookbacks]
        else:
            out.append(base)
    return out


def at_lookback(base: str, lookback: int) -> str:
    """The label of member ``base`` at ``lookback``: ``base-L<lookback>``, plain at the anchors' 336."""
    return base if lookback == ANCHOR_LOOKBACK else f"{base}-L{lookback}"


def split_lookback(label: str) -> tuple[str, int | None]:
    """``"rlinear-L720"`` -> ``("rlinear", 720)``; a label without a lookback -> ``(label, None)``."""
    head, sep, tail = label.rpartition("-L")
    return (head, int(tail)) if sep and tail.isdigit() else (label, None)


def lookback_of(label: str) -> int:
    """The lookback a linear member's label names: ``"rlinear-L720"`` -> 720, ``"rlinear"`` -> 336."""
    return split_lookback(label)[1] or ANCHOR_LOOKBACK


def has_member(combo: tuple[str, ...], label: str) -> bool:
    """Whether ``combo`` holds the member named ``label`` at any lookback (``rlinear``, ``rlinear-L720``)."""
    return any(split_lookback(n)[0] == label for n in combo)


def split_label(label: str) -> tuple[str, str]:
    """``"itransformer-notok[fem-aft]"`` -> ``("itransformer-notok", "fem-aft")``; a member without a
    mixer -> ``(label, "")``."""
    base, _, mixer = label.partition("[")
    return base, mixer.removesuffix("]")


def row_id(combo: tuple[str, ...]) -> tuple[str, str]:
    """A candidate's ``(mixer, candidate)`` in the rows. With one mixer among its members (or none:
    ``-``) the candidate is named without brackets and the mixer column holds it, so its rows and
    saved fits are those of a run with that ``--mixer`` alone (and the linear members' rows are
    shared by runs with any). With several it keeps each member's mixer in its name
    (``dlinear+itransformer[fem-aft]+itransformer[yb-spectral]``) and the column joins them."""
    mixers = list(dict.fromkeys(m for _, m in map(split_label, combo) if m))
    if len(mixers) <= 1:
        return (mixers[0] if mixers else "-"), "+".join(split_label(n)[0] for n in combo)
    return "+".join(mixers), "+".join(combo)


def row_name(combo: tuple[str, ...], refit: bool) -> tuple[str, str]:
    """:func:`row_id`, with the refit twin's ``@tv`` suffix."""
    mixer, cand = row_id(combo)
    return mixer, cand + ("@tv" if refit else "")


def candidates(labels: list[str]) -> list[tuple[str, ...]]:
    """Every member alone and every ensemble of two or more, in a fixed order."""
    return [c for size in range(1, len(labels) + 1) for c in itertools.combinations(labels, size)]


def fit_or_load(make, path: Path, dataset: str, data_dir: str | None, **overrides):
    """``(forecaster, seconds)``: the run saved at ``path`` if it was fitted with these settings
    (seconds from its metrics), else ``make(**overrides)`` fitted and saved there. A run saved
    there with other settings (another study's RLinear under the same label) is an error."""
    from tsmix.forecasting import Forecaster

    f = make(**overrides)
    if (path / "config.json").is_file():
        saved = Forecaster.load(path)
        # resolved on both sides: a saved run holds its resolved config (defaults filled in)
        want, have = (dataclasses.asdict(x.config.resolved()) for x in (f, saved))
        if have != want:
            diff = ", ".join(f"{k}: saved {have.get(k)!r}, wanted {want.get(k)!r}"
                             for k in sorted(set(want) | set(have)) if have.get(k) != want.get(k))
            raise SystemExit(f"{path} holds a member fitted with other settings ({diff}); remove it, "
                             "or give another --runs or --rlinear-label")
        return saved, float(saved.metrics_.get("fit_seconds") or 0.0)
    t0 = time.perf_counter()
    f.fit(dataset, data_dir=data_dir)
    seconds = time.perf_counter() - t0
    f.save(path)
    return f, seconds


class Pool:
    """What the candidates of one (dataset, horizon, seed) share: every fit's forecasts of a split,
    made once however many ensembles hold the fit, and each combination's validation score (a
    candidate and its refit twin are selected by the same one)."""

    def __init__(self) -> None:
        self.vals: dict[tuple[str, ...], float] = {}
        self._made: dict[tuple[str, str], tuple] = {}

    def forecasts(self, key: str, fits: list, split: str) -> tuple[dict, object, list]:
        """``({id(fit): forecast}, targets, columns)`` of every fit in ``fits`` over ``split``."""
        from tsmix.forecasting.ensemble import Ensemble

        if (key, split) not in self._made:
            ens = Ensemble(fits)
            preds, target = ens.split_forecasts(split)
            self._made[key, split] = ({id(f): p for f, p in zip(fits, preds)}, target, ens.columns)
        return self._made[key, split]


def score(combo: tuple[str, ...], fitted: dict, refit: bool, pool: Pool) -> dict:
    """Validation (train-only fits) and test scores of one candidate; a refit candidate is scored on
    test by its train+val members and keeps its train-only twin's validation score (the one it was
    selected by: its own members trained on validation). An ensemble is scored from ``pool``'s
    forecasts (the same numbers as ``Ensemble(fits).evaluate``, without running its members again)."""
    from tsmix.forecasting.ensemble import mean_scores

    def fits_of(group: dict, names) -> list:
        # a member is one fit, or a list of fits (its seed ensemble): every fit weighs alike, so
        # with the same seeds for every member this is the mean of the members' seed means
        return [f for n in names for f in (group[n] if isinstance(group[n], list) else [group[n]])]

    def evaluate(key: str, split: str, protocol: str = "fair") -> dict:
        fits = fits_of(fitted[key], combo)
        if len(fits) == 1:
            return fits[0].evaluate(split, protocol)
        made, target, columns = pool.forecasts(key, fits_of(fitted[key], fitted[key]), split)
        return mean_scores([made[id(f)] for f in fits], target, columns, split=split, protocol=protocol,
                           batch_size=fits[0].config.resolved().test_batch_size)

    if combo not in pool.vals:
        pool.vals[combo] = evaluate("train", "val")["mse"]
    final = "tv" if refit else "train"
    test, paper = evaluate(final, "test"), evaluate(final, "test", "paper")
    members_mse = ";".join(f"{m:.6f}" for m in test["members"]) if "members" in test else ""
    return {"val_mse": pool.vals[combo], "mse": test["mse"], "mae": test["mae"], "mse_paper": paper["mse"],
            "windows": test["windows"], "members_mse": members_mse}


def main(argv: list[str] | None = None) -> int:
    from tsmix.forecasting.benchmark.store import append_csv, csv_keys
    from tsmix.forecasting.revin import CENTERS
    from tsmix.provenance import git_commit
    from tsmix.registry import available_mixers
    from tsmix.tuning.cli import parse_key_value

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", default="ETTh1,ETTh2")
    ap.add_argument("--horizons", default="96,192,336,720")
    ap.add_argument("--seeds", default="2021")
    ap.add_argument("--mixer", default="softmax",
                    help="mixer of the patchtst and itransformer members; comma-separated for one such "
                         "member per mixer, and ensembles across mixers (fem-aft,yb-spectral)")
    ap.add_argument("--members", default="patchtst,rlinear,dlinear",
                    help="comma-separated members to fit (patchtst, rlinear, dlinear, itransformer)")
    ap.add_argument("--variate-lookback", type=int, default=None,
                    help=f"lookback of the itransformer member (default {ANCHOR_LOOKBACK}; plain label)")
    ap.add_argument("--variate-lookbacks", default=None, metavar="L1,L2,...",
                    help="instead: the itransformer member once per lookback (itransformer-L720[nrgpt]; "
                         f"the one at {ANCHOR_LOOKBACK} keeps its plain name), and the ensembles across them")
    ap.add_argument("--linear-lookbacks", default=None, metavar="L1,L2,...",
                    help="the rlinear and dlinear members once per lookback (rlinear-L720, ...; the one "
                         f"at {ANCHOR_LOOKBACK} keeps its plain name), and the ensembles across them")
    ap.add_argument("--variate-calendar", action=argparse.BooleanOptionalAction, default=True,
                    help="the itransformer member reads the timestamp tokens (calendar=True)")
    ap.add_argument("--variate-label", default="itransformer",
                    help="name of the itransformer member in the rows (itransformer or itransformer-<tag>)")
    ap.add_argument("--rlinear-study", help="Optuna storage of the rlinear study (with the rlinear member)")
    ap.add_argument("--rlinear-trials", help="instead of --rlinear-study: a trials CSV as report.py writes "
                    "it (benchmarks/anchors/studies.csv); its best trial of --rlinear-study-name")
    ap.add_argument("--rlinear-set", type=parse_key_value, action="append", default=[], metavar="KEY=VALUE",
                    help="with --rlinear-trials: a value the study held fixed (its tsmix tune --set, e.g. "
                         "individual=false; repeatable): such values are not in its trials")
    ap.add_argument("--rlinear-study-name", default="rlinear-{dataset}-336",
                    help="study whose best trial gives RLinear's settings ({dataset} is filled in)")
    ap.add_argument("--rlinear-center", choices=CENTERS, default="mean",
                    help="what the RLinear member's RevIN subtracts (last: PatchTST's subtract_last); "
                         "another than mean needs its own --rlinear-label")
    ap.add_argument("--rlinear-label", default="rlinear",
                    help="candidate name of the RLinear member (give another for another study)")
    ap.add_argument("--refit", action="store_true",
                    help="also refit every member on train+val for its best epoch count (tsmix tune's "
                         "champion protocol) and score each candidate's refit twin (<candidate>@tv) on test")
    ap.add_argument("--seed-ensemble", action="store_true",
                    help="also score every candidate with each member averaged over all --seeds "
                         "(rows under the seed '2021+2022+...')")
    ap.add_argument("--data-dir", default=os.environ.get("TSMIX_DATA_DIR"))
    ap.add_argument("--runs", default="anchor-runs",
                    help="folder for the fitted members (a member saved there is loaded, not fitted again)")
    ap.add_argument("--out", default=str(HERE / "results.csv"))
    ap.add_argument("--commit", default=None,
                    help="commit named in the rows (default: the checkout's; give it for an installed copy)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    names = [m.strip() for m in args.members.split(",") if m.strip()]
    known = ("patchtst", "rlinear", "dlinear", "itransformer")
    unknown = sorted(set(names) - set(known))
    if unknown or not names:
        ap.error(f"--members: unknown {unknown or 'empty list'}; choose from {', '.join(known)}")
    if "rlinear" in names and not (args.rlinear_study or args.rlinear_trials):
        ap.error("--members has rlinear: give --rlinear-study (the Optuna storage of its tuning study) "
                 "or --rlinear-trials (its trials CSV)")
    if args.rlinear_study and args.rlinear_trials:
        ap.error("give one of --rlinear-study and --rlinear-trials")
    if args.rlinear_set and not args.rlinear_trials:  # a storage replays its fixed values itself
        ap.error("--rlinear-set goes with --rlinear-trials (what a study held fixed is missing only from "
                 "its trials CSV)")
    if args.rlinear_center != "mean" and args.rlinear_label == "rlinear":
        ap.error(f"--rlinear-center {args.rlinear_center}: name the member apart, e.g. --rlinear-label "
                 f"rlinear-{args.rlinear_center} (the rows and fits of 'rlinear' are mean-centred)")
    if not (args.variate_label == "itransformer" or args.variate_label.startswith("itransformer-")):
        ap.error(f"--variate-label must be itransformer or itransformer-<tag>, got {args.variate_label!r}")
    mixers = list(dict.fromkeys(m.strip() for m in args.mixer.split(",") if m.strip()))
    bad = sorted(set(mixers) - set(available_mixers()))
    if bad or not mixers:
        ap.error(f"--mixer: unknown {bad or 'empty list'}; choose from {', '.join(available_mixers())}")
    seeds = [int(x) for x in args.seeds.split(",")]
    args.lookbacks = parse_lookbacks(ap, "--linear-lookbacks", args.linear_lookbacks)
    if args.lookbacks and not set(names) & set(LINEAR_MEMBERS):
        ap.error("--linear-lookbacks repeats the rlinear and dlinear members: --members has neither")
    args.variate_lookbacks = parse_lookbacks(ap, "--variate-lookbacks", args.variate_lookbacks)
    if args.variate_lookbacks:
        if args.variate_lookback is not None:
            ap.error("give one of --variate-lookback (one member, plain label) and --variate-lookbacks")
        if "itransformer" not in names:
            ap.error("--variate-lookbacks repeats the itransformer member: --members has none")
        if split_lookback(args.variate_label)[1] is not None:
            ap.error(f"--variate-lookbacks names each member <label>-L<lookback>: --variate-label "
                     f"{args.variate_label!r} already ends in a lookback; drop it")
    if args.variate_lookback is None:
        args.variate_lookback = ANCHOR_LOOKBACK
    if args.seed_ensemble and (len(set(seeds)) < 2 or args.refit):
        ap.error("--seed-ensemble needs two or more distinct --seeds and no --refit")
    variate = {"lookback": args.variate_lookback, "calendar": args.variate_calendar}
    label = {"rlinear": args.rlinear_label, "itransformer": args.variate_label}
    labels = member_labels(names, label, mixers, args.lookbacks, args.variate_lookbacks)
    wanted = [(c, False) for c in candidates(labels)] + [(c, True) for c in candidates(labels) if args.refit]
    done = csv_keys(out, ("dataset", "horizon", "seed", "mixer", "candidate"))
    commit = args.commit or git_commit()
    for seed in seeds:
        for dataset in args.datasets.split(","):
            rl = rlinear_settings(args, names, dataset)
            for horizon in (int(h) for h in args.horizons.split(",")):
                key = (dataset, str(horizon), str(seed))
                todo = [(c, refit) for c, refit in wanted if (*key, *row_name(c, refit)) not in done]
                if not todo:
                    continue
                print(f"[{datetime.now():%H:%M:%S}] {dataset} H={horizon} seed={seed} rlinear {rl}",
                      flush=True)
                fitted, seconds = fit_members(args, names, mixers, dataset, horizon, seed, rl, label, variate)
                rows, pool = [], Pool()
                for combo, refit in todo:
                    mixer, cand = row_name(combo, refit)
                    took = seconds["train"] if not refit else {n: seconds["train"][n] + seconds["tv"][n]
                                                               for n in combo}
                    rows.append({
                        "dataset": dataset, "horizon": horizon, "seed": seed,
                        "mixer": mixer, "candidate": cand, "size": len(combo),
                        **score(combo, fitted, refit, pool),
                        "train_seconds": round(sum(took[n] for n in combo), 1),
                        "rlinear_params": repr(rl) if has_member(combo, args.rlinear_label) else "",
                        "commit": commit,
                        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    })
                append_csv(out, FIELDS, rows)  # one block per (dataset, horizon, seed): all or none
                for r in rows:
                    print(f"    {r['candidate']:<30} val {r['val_mse']:.4f} test {r['mse']:.4f}", flush=True)
    if args.seed_ensemble:
        seed_ensembles(args, names, mixers, seeds, label, labels, variate, out, done, commit)
    return 0


def parse_lookbacks(ap: argparse.ArgumentParser, flag: str, text: str | None) -> list[int] | None:
    """``"192,336,720"`` -> ``[192, 336, 720]`` (repeats dropped); ``None`` when the flag is not given."""
    if text is None:
        return None
    try:
        out = list(dict.fromkeys(int(x) for x in text.split(",") if x.strip()))
    except ValueError:
        out = []
    if not out or min(out) < 1:
        ap.error(f"{flag}: give positive integers, e.g. 192,336,720; got {text!r}")
    return out


def rlinear_settings(args, names: list[str], dataset: str) -> dict:
    """The RLinear member's settings for ``dataset`` (empty without the rlinear member)."""
    if "rlinear" not in names:
        return {}
    study_name = args.rlinear_study_name.format(dataset=dataset)
    rl = (rlinear_params_csv(args.rlinear_trials, study_name, dict(args.rlinear_set)) if args.rlinear_trials
          else rlinear_params(args.rlinear_study, study_name))
    if args.rlinear_center != "mean":
        rl["revin_center"] = args.rlinear_center
    if args.lookbacks and rl.get("lookback", ANCHOR_LOOKBACK) != ANCHOR_LOOKBACK:
        # the plain-named member would no longer be the study's: its rows would mean two things
        raise SystemExit(f"--linear-lookbacks: study {args.rlinear_study_name.format(dataset=dataset)!r} "
                         f"chose lookback {rl['lookback']}, but with --linear-lookbacks the plain "
                         f"{args.rlinear_label!r} member is the one at {ANCHOR_LOOKBACK}; use a study at "
                         f"{ANCHOR_LOOKBACK} (rlinear-{{dataset}}-336)")
    return rl


def fit_members(args, names: list[str], mixers: list[str], dataset: str, horizon: int, seed: int, rl: dict,
                label: dict[str, str], variate: dict) -> tuple[dict, dict]:
    """Every member of one (dataset, horizon, seed) fitted or loaded from ``--runs``, and its refit
    twin with ``--refit``: ``({"train": {name: fit}, "tv": {...}}, seconds alike)``."""
    fitted, seconds = {"train": {}, "tv": {}}, {"train": {}, "tv": {}}
    folder = Path(args.runs) / dataset / str(horizon) / str(seed)
    made = members(names, dataset, horizon, seed, mixers, rl, label, variate, args.lookbacks,
                   args.variate_lookbacks)
    for name, make in made.items():
        base, mixer = split_label(name)
        run = folder / (f"{base}-{mixer}" if mixer else name)
        f, secs = fit_or_load(make, run, dataset, args.data_dir)
        fitted["train"][name], seconds["train"][name] = f, secs
        print(f"    {name}: val {f.metrics_['val_mse']:.4f} test {f.metrics_['mse']:.4f} "
              f"({secs:.0f} s)", flush=True)
        if args.refit:  # as long as the train-only fit took to its best validation epoch
            epochs = max(1, int(f.metrics_["best_epoch"]))
            g, secs = fit_or_load(make, run.with_name(run.name + "@tv"), dataset,
                                  args.data_dir, epochs=epochs, train_on="train+val")
            fitted["tv"][name], seconds["tv"][name] = g, secs
            print(f"    {name}@tv ({epochs} epochs): test {g.metrics_['mse']:.4f} ({secs:.0f} s)",
                  flush=True)
    return fitted, seconds


def seed_ensembles(args, names: list[str], mixers: list[str], seeds: list[int], label: dict[str, str],
                   labels: list[str], variate: dict, out: Path, done: set, commit: str) -> None:
    """Every candidate with each member the mean of its fits over ``seeds`` (those fits are the
    per-seed runs' own, loaded from ``--runs``), scored and written like the single-seed rows under
    the seed ``"2021+2022+..."``; its training seconds are the fits' recorded ``fit_seconds``
    summed (loaded fits report those; a fresh fit's row counts its whole ``fit`` call)."""
    from tsmix.forecasting.benchmark.store import append_csv

    tag = "+".join(str(s) for s in seeds)
    wanted = candidates(labels)
    for dataset in args.datasets.split(","):
        rl = rlinear_settings(args, names, dataset)
        for horizon in (int(h) for h in args.horizons.split(",")):
            todo = [c for c in wanted if (dataset, str(horizon), tag, *row_name(c, False)) not in done]
            if not todo:
                continue
            print(f"[{datetime.now():%H:%M:%S}] {dataset} H={horizon} seed ensemble {tag}", flush=True)
            group: dict[str, list] = {n: [] for n in labels}
            seconds = dict.fromkeys(labels, 0.0)
            for seed in seeds:
                fitted, secs = fit_members(args, names, mixers, dataset, horizon, seed, rl, label, variate)
                for n in labels:
                    group[n].append(fitted["train"][n])
                    seconds[n] += secs["train"][n]
            rows, pool = [], Pool()
            for combo in todo:
                mixer, cand = row_name(combo, False)
                rows.append({
                    "dataset": dataset, "horizon": horizon, "seed": tag,
                    "mixer": mixer, "candidate": cand, "size": len(combo),
                    **score(combo, {"train": group}, False, pool),
                    "train_seconds": round(sum(seconds[n] for n in combo), 1),
                    "rlinear_params": repr(rl) if has_member(combo, args.rlinear_label) else "",
                    "commit": commit,
                    "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                })
            append_csv(out, FIELDS, rows)
            for r in rows:
                print(f"    {r['candidate']:<30} val {r['val_mse']:.4f} test {r['mse']:.4f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
