"""``tsmix ensemble``: score (and save, and forecast with) the mean of saved runs.

    tsmix ensemble --runs runs/patchtst runs/rlinear --split test --out runs/ens
    tsmix ensemble --runs runs/ens --output forecast.csv     # a saved ensemble folder
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tsmix.errors import TsmixError
from tsmix.forecasting.cli import check_output_file, write_frame
from tsmix.forecasting.config import PROTOCOLS
from tsmix.forecasting.ensemble import MANIFEST, Ensemble


def load_ensemble(runs: list[str], weights: list[float] | None) -> Ensemble:
    """An ensemble folder (one path holding ``ensemble.json``) or run directories to combine."""
    from tsmix.forecasting import Forecaster

    if len(runs) == 1 and (Path(runs[0]) / MANIFEST).is_file():
        ens = Ensemble.load(runs[0])
        return ens if weights is None else Ensemble(ens.members, weights)
    if len(runs) < 2:
        raise TsmixError(f"--runs needs at least 2 run directories (or one ensemble folder), got {runs}")
    return Ensemble([Forecaster.load(r) for r in runs], weights)


def cmd_ensemble(args: argparse.Namespace) -> int:
    ens = load_ensemble(args.runs, args.weights)
    out_file = check_output_file(args.output) if args.output else None
    m = ens.evaluate(args.split, args.eval_protocol, data=args.data, data_dir=args.data_dir)
    if args.json:
        print(json.dumps(m, indent=2))
    else:
        print(f"{args.split} mse {m['mse']:.4f}  mae {m['mae']:.4f}  "
              f"({m['protocol']}, {m['windows']} windows)")
        names = args.runs if len(args.runs) > 1 else [f"member_{k}" for k in range(len(ens.members))]
        for name, w, mse in zip(names, m["weights"], m["members"]):
            print(f"  {name}: weight {w:.3f}  mse {mse:.4f}")
    if args.out:
        print(f"saved {ens.save(args.out)}")
    if out_file is not None:
        write_frame(ens.predict(args.input), out_file)
        print(f"wrote {out_file}")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """``tsmix ensemble`` (the dispatcher in tsmix/cli.py calls every module's add_commands)."""
    p = sub.add_parser("ensemble", help="score, save and forecast with the mean of saved runs",
                       description="The (weighted) mean point forecast of saved runs that forecast alike "
                                   "(same data, horizon, features): scored over every window of a split, "
                                   "each member's own score beside it.")
    p.add_argument("--runs", nargs="+", required=True, metavar="DIR",
                   help="run directories (tsmix fit --out / Forecaster.save), or one ensemble folder")
    p.add_argument("--weights", nargs="+", type=float, metavar="W",
                   help="one non-negative weight per run, normalized (default: equal weights)")
    p.add_argument("--split", default="test", choices=("train", "val", "test"), help="default test")
    p.add_argument("--eval-protocol", default="fair", choices=PROTOCOLS,
                   help="fair: every window; paper: full test batches only (default fair)")
    p.add_argument("--data", metavar="FILE",
                   help="score on this .csv/.parquet file (default: the data the runs were fitted on)")
    p.add_argument("--data-dir", help="where the runs' benchmark file lives (default: as at fit time)")
    p.add_argument("--out", metavar="DIR", help="save the ensemble folder there (default: not saved)")
    p.add_argument("--output", metavar="FILE",
                   help="write the mean forecast after the last row of --input to .csv/.parquet "
                        "(default: none)")
    p.add_argument("--input", metavar="FILE",
                   help="history for --output with the fitted columns (default: the fitted data)")
    p.add_argument("--json", action="store_true", help="print the full metrics as JSON (default: a summary)")
    p.set_defaults(func=cmd_ensemble)
