"""Issue #22 anchors: fit the candidate members once per (dataset, horizon, seed), score every
member and every ensemble of them on validation AND test, one CSV row per candidate.

Members (each with its own recipe; the model is never chosen by looking at test):

* ``patchtst``: the patch encoder with ``--mixer`` on the PatchTST paper preset, capped at 20
  epochs with patience 10 (the reproduction recipe);
* ``rlinear``: RevIN + one linear map, with the hyper-parameters of the best trial of a
  ``tsmix tune`` study (validation objective) named by ``--rlinear-study``;
* ``dlinear``: DLinear's paper preset.

``--members`` picks which of them are fitted; ``--rlinear-label`` names the RLinear member when it
comes from another study (e.g. ``rlinear-{dataset}-lb``, whose space also searches the lookback:
``space_lookback.json``), so its rows sit beside the first study's instead of replacing them.

Candidates are each member alone and every ensemble (equal-weight mean) of two or more. The
report (``report.py``) picks, per dataset, the candidate with the lowest validation MSE averaged
over the four horizons and puts its test score beside the published anchors. Fitted members are
saved under ``--runs`` so new combinations can be scored without training again. Resumable: a
(dataset, horizon, seed, mixer) whose rows are in the CSV is skipped.

    OMP_NUM_THREADS=1 python benchmarks/anchors/run.py --datasets ETTh1,ETTh2 --seeds 2021 \\
        --rlinear-study sqlite:///optuna.db
"""

from __future__ import annotations

import argparse
import csv
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

    from tsmix.tuning.study import best_params

    study = optuna.load_study(study_name=study_name, storage=storage)
    return best_params(study, "rlinear", ["softmax"], study.best_trial)


def members(names: list[str], dataset: str, horizon: int, seed: int, mixer: str, rl: dict,
            rl_label: str) -> dict:
    """The fitted-to-be members by candidate name, in ``names`` order."""
    from tsmix.forecasting import Forecaster

    common = dict(seed=seed, threads=1, progress=False)
    make = {
        "patchtst": lambda: Forecaster.from_preset("paper", "patchtst", dataset, horizon, mixer=mixer,
                                                   epochs=20, patience=10, **common),
        # the study's lookback when it searched one, else the anchors' 336
        "rlinear": lambda: Forecaster(model="rlinear", horizon=horizon, epochs=10, patience=3,
                                      **{"lookback": 336, **rl}, **common),
        "dlinear": lambda: Forecaster.from_preset("paper", "dlinear", dataset, horizon, **common),
    }
    return {(rl_label if n == "rlinear" else n): make[n]() for n in names}


def candidates(labels: list[str]) -> list[tuple[str, ...]]:
    """Every member alone and every ensemble of two or more, in a fixed order."""
    return [c for size in range(1, len(labels) + 1) for c in itertools.combinations(labels, size)]


def main(argv: list[str] | None = None) -> int:
    from tsmix.forecasting.ensemble import Ensemble
    from tsmix.provenance import git_commit

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", default="ETTh1,ETTh2")
    ap.add_argument("--horizons", default="96,192,336,720")
    ap.add_argument("--seeds", default="2021")
    ap.add_argument("--mixer", default="softmax", help="mixer of the patchtst member")
    ap.add_argument("--members", default="patchtst,rlinear,dlinear",
                    help="comma-separated members to fit (patchtst, rlinear, dlinear)")
    ap.add_argument("--rlinear-study", required=True, help="Optuna storage holding the rlinear study")
    ap.add_argument("--rlinear-study-name", default="rlinear-{dataset}-336",
                    help="study whose best trial gives RLinear's settings ({dataset} is filled in)")
    ap.add_argument("--rlinear-label", default="rlinear",
                    help="candidate name of the RLinear member (give another for another study)")
    ap.add_argument("--data-dir", default=os.environ.get("TSMIX_DATA_DIR"))
    ap.add_argument("--runs", default="anchor-runs", help="folder for the fitted members")
    ap.add_argument("--out", default=str(HERE / "results.csv"))
    ap.add_argument("--commit", default=None,
                    help="commit named in the rows (default: the checkout's; give it for an installed copy)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    names = [m.strip() for m in args.members.split(",") if m.strip()]
    unknown = sorted(set(names) - {"patchtst", "rlinear", "dlinear"})
    if unknown or not names:
        ap.error(f"--members: unknown {unknown or 'empty list'}; choose from patchtst, rlinear, dlinear")
    labels = [args.rlinear_label if n == "rlinear" else n for n in names]
    done = set()
    if out.is_file():
        with open(out, newline="") as fh:
            done = {(r["dataset"], r["horizon"], r["seed"], r["mixer"], r["candidate"])
                    for r in csv.DictReader(fh)}
    commit = args.commit or git_commit()
    for seed in (int(s) for s in args.seeds.split(",")):
        for dataset in args.datasets.split(","):
            rl = (rlinear_params(args.rlinear_study, args.rlinear_study_name.format(dataset=dataset))
                  if "rlinear" in names else {})
            for horizon in (int(h) for h in args.horizons.split(",")):
                key = (dataset, str(horizon), str(seed), args.mixer)
                if all((*key, "+".join(c)) in done for c in candidates(labels)):
                    continue
                print(f"[{datetime.now():%H:%M:%S}] {dataset} H={horizon} seed={seed} rlinear {rl}",
                      flush=True)
                fitted, seconds = {}, {}
                for name, f in members(names, dataset, horizon, seed, args.mixer, rl,
                                       args.rlinear_label).items():
                    t0 = time.perf_counter()
                    f.fit(dataset, data_dir=args.data_dir)
                    seconds[name] = time.perf_counter() - t0
                    f.save(Path(args.runs) / dataset / str(horizon) / str(seed) / f"{name}-{args.mixer}")
                    fitted[name] = f
                    print(f"    {name}: val {f.metrics_['val_mse']:.4f} test {f.metrics_['mse']:.4f} "
                          f"({seconds[name]:.0f} s)", flush=True)
                rows = []
                for combo in candidates(list(fitted)):
                    size = len(combo)
                    if size == 1:
                        f = fitted[combo[0]]
                        val, test, paper = (f.evaluate("val")["mse"], f.evaluate("test"),
                                            f.evaluate("test", "paper"))
                        member_mse = ""
                    else:
                        ens = Ensemble([fitted[n] for n in combo])
                        val, test, paper = (ens.evaluate("val")["mse"], ens.evaluate("test"),
                                            ens.evaluate("test", "paper"))
                        member_mse = ";".join(f"{m:.6f}" for m in test["members"])
                    rows.append({
                        "dataset": dataset, "horizon": horizon, "seed": seed, "mixer": args.mixer,
                        "candidate": "+".join(combo), "size": size, "val_mse": val, "mse": test["mse"],
                        "mae": test["mae"], "mse_paper": paper["mse"], "windows": test["windows"],
                        "members_mse": member_mse,
                        "train_seconds": round(sum(seconds[n] for n in combo), 1),
                        "rlinear_params": repr(rl) if args.rlinear_label in combo else "", "commit": commit,
                        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    })
                new = not out.is_file() or out.stat().st_size == 0
                with open(out, "a", newline="") as fh:  # one block per (dataset, horizon, seed): all or none
                    w = csv.DictWriter(fh, fieldnames=FIELDS)
                    if new:
                        w.writeheader()
                    w.writerows(rows)
                    fh.flush()
                    os.fsync(fh.fileno())
                for r in rows:
                    print(f"    {r['candidate']:<26} val {r['val_mse']:.4f} test {r['mse']:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
