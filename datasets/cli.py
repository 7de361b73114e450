"""``tsmix data NAME_OR_PATH``: summary of a dataset (rows, channels, freq, borders, windows per split).

A long file (``--id-col`` given, or a ``unique_id`` column) is read as a panel: series count, rows,
lengths, windows per split and each series' span. Reads only; writes nothing (a missing benchmark
file is downloaded into the cache, as any lookup).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tsmix.datasets.dates import DATE_UNITS
from tsmix.errors import TsmixError

_PANEL_FLAGS = ("time_col", "target_col", "val_size", "test_size")  # meaningful for long panels only
_WIDE_FLAGS = ("date_col", "date_format", "date_unit", "target", "features")  # for wide files only


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="summarize a dataset: rows, channels, borders, windows per split",
                       description="Load, validate and split a dataset; print its summary.")
    p.add_argument("source", metavar="NAME_OR_PATH",
                   help="benchmark name (ETTh1, ETTh2, ETTm1, ETTm2, Weather) or a .csv/.parquet file")
    p.add_argument("--lookback", type=int, required=True, help="input window length L")
    p.add_argument("--horizon", type=int, required=True, help="forecast length H")
    p.add_argument("--features", default=None, choices=("M", "S", "MS"),
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
    g = p.add_argument_group("long-format panels (unique_id, ds, y): --id-col or a unique_id column")
    g.add_argument("--id-col", default=None, help="series id column; giving it reads the file as a panel "
                                                  "(default unique_id)")
    g.add_argument("--time-col", default=None, help="timestamp column (default ds)")
    g.add_argument("--target-col", default=None, help="target column (default y)")
    g.add_argument("--val-size", type=int, default=None,
                   help="validation steps at each series' end (default: horizon)")
    g.add_argument("--test-size", type=int, default=None,
                   help="test steps at each series' end (default: horizon)")
    p.set_defaults(func=run_data)


def file_columns(source: str) -> list[str]:
    """Column names of a .csv/.parquet file from its header alone; [] for a benchmark name or an unreadable
    file (the full read then reports what is wrong)."""
    import csv

    import polars as pl

    from tsmix.datasets.io import CSV_SUFFIXES, PARQUET_SUFFIXES, sniff

    path = Path(source).expanduser()
    suffix = path.suffix.lower()
    try:
        if not path.is_file():
            return []
        if suffix in CSV_SUFFIXES:
            return sniff(path)[1]
        if suffix in PARQUET_SUFFIXES:
            return list(pl.read_parquet_schema(path))
    except (OSError, csv.Error, pl.exceptions.PolarsError):
        return []
    return []


def _given(args: argparse.Namespace, flags: tuple[str, ...]) -> list[str]:
    return ["--" + f.replace("_", "-") for f in flags if getattr(args, f) is not None]


def run_data(args: argparse.Namespace) -> int:
    from tsmix.datasets.panel import PanelColumns

    if args.id_col is not None or PanelColumns().id_col in file_columns(args.source):
        return run_panel(args)
    if given := _given(args, _PANEL_FLAGS):
        raise TsmixError(f"flag(s) {', '.join(given)} are for long panels: give --id-col (or a file with a "
                         f"{PanelColumns().id_col} column), or drop them for this wide dataset")
    return run_wide(args)


def run_wide(args: argparse.Namespace) -> int:
    """One wide dataset (a date column + one column per channel): LTSF borders and windows."""
    from tsmix.datasets.prepare import SPLITS, prepare  # lazy: `tsmix --help` stays fast

    prep = prepare(args.source, args.lookback, args.horizon, args.features or "M", data_dir=args.data_dir,
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


def panel_summary(args: argparse.Namespace) -> dict[str, Any]:
    """``PreparedPanel.summary()`` of the long file, its split sizes and each series' span."""
    from tsmix.datasets.dates import localize
    from tsmix.datasets.panel import Panel, PanelColumns
    from tsmix.datasets.panel_prepare import prepare_panel
    from tsmix.datasets.panel_split import PanelSplit

    if given := _given(args, _WIDE_FLAGS):
        raise TsmixError(f"flag(s) {', '.join(given)} are for wide files: a long panel names its columns "
                         f"with --id-col/--time-col/--target-col")
    d, H = PanelColumns(), args.horizon
    panel = Panel.from_long(args.source, id_col=args.id_col or d.id_col, time_col=args.time_col or d.time_col,
                            target_col=args.target_col or d.target_col, fill=args.fill)
    # `is None`, not `or`: an explicit 0 must meet the split's own check, not silently become H
    split = PanelSplit(val_size=H if args.val_size is None else args.val_size,
                       test_size=H if args.test_size is None else args.test_size)
    prep = prepare_panel(panel, args.lookback, H, split, calendar=args.calendar)
    p = prep.panel
    first = localize(p.timestamps[p.offsets[:-1]], p.tz)  # (S,) first stamp of each series
    last = localize(p.timestamps[p.offsets[1:] - 1], p.tz)  # (S,) last stamp
    spans = [{"id": i, "start": str(a), "end": str(b), "rows": int(n)}
             for i, a, b, n in zip(p.ids, first, last, p.lengths)]
    c = p.columns
    return {**prep.summary(), "path": str(args.source), "id_col": c.id_col, "time_col": c.time_col,
            "target_col": c.target_col, "val_size": split.val_size, "test_size": split.test_size,
            "spans": spans}


def run_panel(args: argparse.Namespace) -> int:
    """A long panel: series count, rows, lengths, windows per split and each series' span."""
    from tsmix.datasets.panel_split import SPLITS

    s = panel_summary(args)
    if args.json:
        print(json.dumps(s))
        return 0
    lines = [
        f"{s['name']}  ({s['path']}, long: {s['id_col']}, {s['time_col']}, {s['target_col']})",
        f"series    {s['series']}  ({s['rows']} rows, lengths {s['min_length']}..{s['max_length']})",
        f"span      {s['start']} .. {s['end']}, freq {s['freq']}",
        f"borders   per series: val {s['val_size']} + test {s['test_size']} steps at the end, lookback "
        f"{s['lookback']}, horizon {s['horizon']}" + (f" (calendar: {', '.join(s['calendar'])})"
                                                      if s["calendar"] else ""),
        f"{'split':<8}windows",
        *(f"{k:<8}{s[f'{k}_windows']}" for k in SPLITS),
    ]
    w = max(2, *(len(r["id"]) for r in s["spans"]))
    tw = max(5, *(len(r["start"]) for r in s["spans"]))
    lines.append(f"{'id':<{w}}  {'first':<{tw}}  {'last':<{tw}}  rows")
    lines += [f"{r['id']:<{w}}  {r['start']:<{tw}}  {r['end']:<{tw}}  {r['rows']}" for r in s["spans"]]
    print("\n".join(lines))
    return 0
