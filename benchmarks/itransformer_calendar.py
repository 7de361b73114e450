"""Do the official iTransformer's timestamp tokens matter? tsmix's variate encoder vs the same
encoder reading the window's calendar features as extra variate tokens.

The official ``thuml/iTransformer`` embeds ``x_mark`` (Informer's "timeF" calendar features of the
lookback window: 4 for hourly data, 5 for 15-minute data) as extra variate tokens beside the
series' own, normalizes only the series (``use_norm``) and keeps only the series' outputs. tsmix's
``itransformer`` has them as ``calendar=True`` (off by default and in the ``paper`` preset, whose
rows predate it). This script trains both forms from the same seed on the same windows with the
paper preset (L=96, type1 schedule, 10 epochs, patience 3) and scores every test window (fair
protocol):

* ``calendar=0``: the preset as it is (the run must equal the ``paper`` suite's row of the same
  seed: a check that nothing else differs);
* ``calendar=1``: the same with ``calendar=True``: the network reads ``[series, calendar]`` tokens,
  RevIN on the series only, and only the series' outputs are kept and scored.

One CSV row per run (appended, resumable). ``OMP_NUM_THREADS=1``:

    python benchmarks/itransformer_calendar.py --dataset ETTm1 --horizons 96 --seeds 2021 2022 \\
        --mixers softmax --out benchmarks/itransformer_calendar.csv
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

FIELDS = ["dataset", "horizon", "mixer", "seed", "calendar", "tokens", "mse", "mae", "val_mse", "epochs",
          "best_epoch", "train_seconds", "commit", "finished_at"]


def run(dataset: str, horizon: int, mixer: str, seed: int, calendar: bool, data_dir: str | None,
        epochs: int | None = None) -> dict:
    from tsmix.forecasting import Forecaster

    over = {} if epochs is None else {"epochs": epochs}
    f = Forecaster.from_preset("paper", "itransformer", dataset, horizon, mixer=mixer, seed=seed, threads=1,
                               progress=False, calendar=calendar, **over)
    f.fit(dataset, data_dir=data_dir)
    m = f.metrics_
    return {"tokens": len(m["per_channel"]) + len(m["calendar"]), "mse": m["mse"], "mae": m["mae"],
            "val_mse": m["val_mse"], "epochs": m["epochs"], "best_epoch": m["best_epoch"],
            "train_seconds": m["train_seconds"]}


def main(argv: list[str] | None = None) -> int:
    from tsmix.forecasting.benchmark.store import append_csv, csv_keys
    from tsmix.provenance import git_commit

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="ETTm1")
    ap.add_argument("--horizons", type=int, nargs="+", default=[96])
    ap.add_argument("--seeds", type=int, nargs="+", default=[2021, 2022])
    ap.add_argument("--mixers", nargs="+", default=["softmax"])
    ap.add_argument("--forms", type=int, nargs="+", choices=(0, 1), default=[0, 1],
                    help="calendar forms to run: 0 without, 1 with (1 alone when the paper suite holds "
                         "the seed's row without)")
    ap.add_argument("--epochs", type=int, default=None, help="override the preset's epochs (smoke checks)")
    ap.add_argument("--data-dir", default=os.environ.get("TSMIX_DATA_DIR"))
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "itransformer_calendar.csv"))
    ap.add_argument("--commit", default=None, help="commit named in the rows (default: the checkout's)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    done = csv_keys(out, ("dataset", "horizon", "mixer", "seed", "calendar"))
    commit = args.commit or git_commit()
    for seed in args.seeds:
        for horizon in args.horizons:
            for mixer in args.mixers:
                for calendar in (bool(c) for c in sorted(set(args.forms))):
                    key = (args.dataset, str(horizon), mixer, str(seed), str(int(calendar)))
                    if key in done:
                        continue
                    t0 = time.perf_counter()
                    row = run(args.dataset, horizon, mixer, seed, calendar, args.data_dir, args.epochs)
                    row = {"dataset": args.dataset, "horizon": horizon, "mixer": mixer, "seed": seed,
                           "calendar": int(calendar), **row, "commit": commit,
                           "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
                    append_csv(out, FIELDS, [row])
                    print(f"{key} tokens {row['tokens']}: test mse {row['mse']:.4f} val {row['val_mse']:.4f} "
                          f"epochs {row['epochs']} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    from tsmix.errors import TsmixError

    try:
        sys.exit(main())
    except TsmixError as exc:  # bad dataset, mixer, data folder: one line, as the tsmix command
        sys.exit(f"error: {exc}")
