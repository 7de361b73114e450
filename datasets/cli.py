"""``tsmix data NAME_OR_PATH``: summary of a dataset (rows, channels, freq, borders, windows per split).

Reads only; writes nothing (a missing benchmark file is downloaded into the cache, as any lookup).
"""

from __future__ import annotations

import argparse
import json

from tsmix.datasets.dates import DATE_UNITS


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="summarize a dataset: rows, channels, borders, windows per split",
                       description="Load, validate and split a dataset; print its summary.")
    p.add_argument("source", metavar="NAME_OR_PATH",
                   help="benchmark name (ETTh1, ETTh2, ETTm1, ETTm2, Weather) or a .csv/.parquet file")
    p.add_argument("--lookback", type=int, required=True, help="input window length L")
    p.add_argument("--horizon", type=int, required=True, help="forecast length H")
    p.add_argument("--features", default="M", choices=("M", "S", "MS"),
                   help="M all->all, S target->target, MS all->target (default M)")
    p.add_argument("--data-dir", default=None, help="folder with the benchmark files (else $TSMIX_DATA_DIR)")
    p.add_argument("--date-col", default=None, help="date column (default: detected)")
    p.add_argument("--date-format", default=None, metavar="FMT",
                   help="strftime format of the dates, e.g. '%%m/%%d/%%Y' (default: inferred from the whole "
                        "column; an ambiguous column is an error)")
    p.add_argument("--date-unit", default=None, choices=DATE_UNITS,
                   help="the date column holds epoch numbers in this unit (UTC)")
    p.add_argument("--target", default=None, help="target column (default OT, else the last column)")
    p.add_argument("--fill", default=None, choices=("ffill", "interpolate", "zero"),
                   help="fill NaN/inf values and missing timestamps (default: reject them)")
    p.add_argument("--calendar", action="store_true", help="add calendar features to the inputs")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_data)


def run_data(args: argparse.Namespace) -> int:
    from tsmix.datasets.prepare import SPLITS, prepare  # lazy: `tsmix --help` stays fast

    prep = prepare(args.source, args.lookback, args.horizon, args.features, data_dir=args.data_dir,
                   date_col=args.date_col, target=args.target, fill=args.fill, calendar=args.calendar,
                   date_format=args.date_format, date_unit=args.date_unit)
    s = prep.summary()
    if args.json:
        print(json.dumps(s))
        return 0
    cols = ", ".join(s["columns"])
    lines = [
        f"{s['name']}  ({s['path'] or 'frame'})",
        f"rows      {s['rows']}  ({s['start']} .. {s['end']}, freq {s['freq']})",
        f"channels  {s['channels']}: {cols}",
        f"target    {s['target']}  features {s['features']}: x {s['x_channels']} -> y {s['y_channels']} "
        f"channels" + (f" (calendar: {', '.join(s['calendar'])})" if s["calendar"] else ""),
        f"borders   {s['kind']} rule, lookback {s['lookback']}, horizon {s['horizon']}",
        f"{'split':<8}{'rows':<18}windows",
    ]
    for k in SPLITS:
        a, b = s["borders"][k]
        lines.append(f"{k:<8}{f'[{a}, {b})':<18}{s[f'{k}_windows']}")
    print("\n".join(lines))
    return 0
