"""``tsmix backtest`` and the panel flags (``--id-col ... --production``) that fit/predict/evaluate share.

Wiring is one line per command module: ``add_backtest_command(sub)`` in ``forecasting/cli.py``'s
``add_commands``; ``add_panel_flags(parser)`` + ``panel_options(args)`` give any command the long
format's column roles and covariates.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tsmix.errors import TsmixError


def _columns(text: str) -> tuple[str, ...]:
    """``a,b,c`` -> ("a", "b", "c")."""
    cols = tuple(c.strip() for c in text.split(",") if c.strip())
    if not cols:
        raise argparse.ArgumentTypeError(f"expected comma-separated column names, got {text!r}")
    return cols


def add_panel_flags(parser: argparse.ArgumentParser) -> None:
    """Long-format roles and covariates; giving any of --id-col/--hist-exog/--futr-exog/--static (or
    a file with a ``unique_id`` column) selects the panel path."""
    g = parser.add_argument_group("long-format panels (unique_id, ds, y + covariates)")
    g.add_argument("--id-col", help="series id column (default unique_id)")
    g.add_argument("--time-col", help="timestamp column (default ds)")
    g.add_argument("--target-col", help="target column (default y)")
    g.add_argument("--hist-exog", type=_columns, metavar="COLS", help="past-only covariates, a,b,c")
    g.add_argument("--futr-exog", type=_columns, metavar="COLS", help="future-known covariates, a,b,c")
    g.add_argument("--static", metavar="FILE", help=".csv/.parquet, one row per series (id + attributes)")
    g.add_argument("--futr", metavar="FILE",
                   help="predict: .csv/.parquet with the future covariates over the horizon")
    g.add_argument("--val-size", type=int, help="validation steps at each series' end (default: horizon)")
    g.add_argument("--test-size", type=int, help="test steps at each series' end (default horizon; 0 none; "
                                                 "wide data: only 0, the same as --production)")
    g.add_argument("--production", action="store_true",
                   help="pick the epoch count on validation, then refit on every row for that many epochs "
                        "(panels and wide data; no test is scored)")


_ROLES = ("id_col", "time_col", "target_col", "hist_exog", "futr_exog", "val_size", "test_size")


def panel_options(args: argparse.Namespace) -> dict[str, Any]:
    """The PanelOptions fields given on the command line (and only those)."""
    out = {k: getattr(args, k) for k in _ROLES if getattr(args, k, None) is not None}
    if getattr(args, "production", False):
        out.update(production=True, test_size=0)
    return out


def read_table(path: str | None, flag: str) -> Any:
    """A .csv/.parquet file as a polars frame (None when not given); a missing file is one line."""
    if path is None:
        return None
    from tsmix.datasets.panel_io import frame_of

    try:
        return frame_of(path)[0]
    except TsmixError as exc:
        raise TsmixError(f"{flag}: {exc}") from None


def is_panel_request(args: argparse.Namespace, data: str) -> bool:
    """The panel path: a panel flag given, or a file whose columns hold the id column."""
    if any(getattr(args, a, None) for a in ("id_col", "hist_exog", "futr_exog", "static", "futr")):
        return True
    p = Path(data).expanduser()
    if not p.is_file():
        return False  # a benchmark name: wide
    from tsmix.datasets.panel_io import frame_of

    return (getattr(args, "id_col", None) or "unique_id") in frame_of(p)[0].columns


def cmd_backtest(args: argparse.Namespace) -> int:
    from tsmix.forecasting import Forecaster
    from tsmix.forecasting.backtest import cross_validation
    from tsmix.forecasting.cli import check_output_file, config_overrides, write_frame
    from tsmix.forecasting.panel_fit import PanelForecaster

    out = check_output_file(args.output) if args.output else None
    plot = Path(args.plot).expanduser() if args.plot else None
    if plot is not None and (plot.suffix != ".png" or not plot.parent.is_dir()):
        raise TsmixError(f"--plot {plot}: give a .png path in an existing folder")
    refit = {"false": False, "true": True}.get(args.refit.lower())
    if refit is None:
        try:
            refit = int(args.refit)
        except ValueError:
            raise TsmixError(f"--refit must be false, true or a positive int, got {args.refit!r}") from None
    params = config_overrides(args)
    if is_panel_request(args, args.data):
        est: Any = PanelForecaster(**params, **panel_options(args))
        data: Any = args.data
    else:
        from tsmix.datasets import load

        est = Forecaster(**params)
        data = load(args.data, data_dir=args.data_dir).to_pandas()
    bt = cross_validation(est, data, n_windows=args.n_windows, step=args.step, refit=refit,
                          static_df=read_table(args.static, "--static"), season=args.season,
                          level=params.get("level"))  # --level also asks the backtest for interval columns
    if out is not None:
        write_frame(bt.frame, out)
    if plot is not None:
        bt.plot(plot)
    if args.json:
        per_cutoff = json.loads(bt.per_cutoff.to_json(orient="records", date_format="iso"))
        print(json.dumps({"metrics": bt.metrics, "season_length": bt.season_length, "per_cutoff": per_cutoff},
                         indent=2))
        return 0
    m = bt.metrics
    print(f"backtest {args.n_windows} window(s), {m['rows']} forecast rows: mse {m['mse']:.4f}  "
          f"mae {m['mae']:.4f}  mase {m['mase']:.4f} (season {bt.season_length})  smape {m['smape']:.2f}")
    cover = {k: v for k, v in m.items() if k.startswith(("coverage-", "width-"))}
    if cover:
        print("  " + "  ".join(f"{k} {v:.3f}" for k, v in cover.items()))
    for _, r in bt.per_cutoff.iterrows():
        print(f"  cutoff {r['cutoff']}  mse {r['mse']:.4f}  mae {r['mae']:.4f}  mase {r['mase']:.4f}  "
              f"smape {r['smape']:.2f}")
    return 0


def add_backtest_command(sub: argparse._SubParsersAction) -> None:
    from tsmix.forecasting.cli import add_config_flags

    b = sub.add_parser("backtest", help="rolling-origin cross-validation: forecasts per cutoff vs actuals",
                       description="Fit on the rows before each cutoff (once, or every k windows), forecast "
                                   "the horizon after it, score MSE/MAE/MASE/sMAPE per cutoff and overall.")
    b.add_argument("--data", required=True, help="long .csv/.parquet (unique_id, ds, y), a wide file or a "
                                                 "benchmark name")
    b.add_argument("--data-dir", help="folder holding the benchmark files (else $TSMIX_DATA_DIR, cache)")
    b.add_argument("--n-windows", type=int, default=1, help="forecast windows per series [default: 1]")
    b.add_argument("--step", type=int, help="rows between cutoffs [default: the horizon]")
    b.add_argument("--refit", default="false",
                   help="false: fit once; true: refit at every cutoff; k: every k windows [default: false]")
    b.add_argument("--season", type=int, help="MASE season [default: from the frequency, e.g. 24 hourly]")
    b.add_argument("--output", help=".csv/.parquet for the unique_id, ds, cutoff, y, y_hat rows")
    b.add_argument("--plot", help=".png of forecasts against actuals per cutoff")
    b.add_argument("--json", action="store_true", help="print the metrics as JSON")
    b.add_argument("--mixer-option", action="append", metavar="K=V", help="a mixer option; repeatable")
    add_panel_flags(b)
    add_config_flags(b)
    b.set_defaults(func=cmd_backtest)


def add_commands(sub: argparse._SubParsersAction) -> None:
    """``tsmix backtest`` (the dispatcher in tsmix/cli.py calls every module's add_commands)."""
    add_backtest_command(sub)
