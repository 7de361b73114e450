"""``tsmix fit`` / ``tsmix evaluate`` / ``tsmix predict``.

The hyper-parameter flags are generated from :class:`ForecasterConfig` (one flag per field,
help text from the field's comment), so the dataclass stays the only source of defaults: a
flag that is not given is not passed at all.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import re
import types
import typing
from pathlib import Path
from typing import Any

from tsmix.errors import TsmixError
from tsmix.forecasting import config as config_mod
from tsmix.forecasting.config import (
    FEATURES,
    LR_SCHEDULES,
    MODEL_NAMES,
    OPTIMIZERS,
    PADDINGS,
    PROTOCOLS,
    ForecasterConfig,
)

CHOICES = {
    "model": MODEL_NAMES, "features": FEATURES, "optimizer": OPTIMIZERS, "lr_schedule": LR_SCHEDULES,
    "eval_protocol": PROTOCOLS, "padding_patch": PADDINGS,
}
SKIP = {"mixer_options"}  # given as repeated --mixer-option k=v


def _field_comments() -> dict[str, str]:
    """``name: type = default  # comment`` lines of ForecasterConfig -> {name: comment}."""
    src = inspect.getsource(config_mod.ForecasterConfig)
    pat = re.compile(r"^\s+(\w+): [^=]+=.*?#\s*(.+)$")
    return {m.group(1): m.group(2).strip() for m in map(pat.match, src.splitlines()) if m}


def _none_or(kind: type):
    def parse(text: str):
        return None if text.lower() in ("none", "null") else kind(text)

    parse.__name__ = kind.__name__
    return parse


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One ``--flag`` per ForecasterConfig field (dashes for underscores), default: not given."""
    hints = typing.get_type_hints(ForecasterConfig)
    comments = _field_comments()
    group = parser.add_argument_group("hyper-parameters (ForecasterConfig fields; default = the config's)")
    for f in dataclasses.fields(ForecasterConfig):
        if f.name in SKIP:
            continue
        hint = hints[f.name]
        args = typing.get_args(hint)
        optional = (typing.get_origin(hint) in (typing.Union, types.UnionType)) and type(None) in args
        base = next(a for a in args if a is not type(None)) if optional else hint
        default = f.default if f.default is not dataclasses.MISSING else None
        kw: dict[str, Any] = {"dest": f.name, "default": argparse.SUPPRESS,
                              "help": f"{comments.get(f.name, '')} [default: {default}]"}
        if base is bool:
            kw["action"] = argparse.BooleanOptionalAction
        else:
            kw["type"] = _none_or(base) if optional else base
            if f.name in CHOICES:
                kw["choices"] = CHOICES[f.name]
            kw["metavar"] = f.name.upper()
        group.add_argument("--" + f.name.replace("_", "-"), **kw)


def _parse_option(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise TsmixError(f"--mixer-option takes key=value, got {text!r}")
    key, raw = text.split("=", 1)
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw  # a bare string
    return key.strip(), value


def config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The ForecasterConfig fields given on the command line (and only those)."""
    names = {f.name for f in dataclasses.fields(ForecasterConfig)}
    out = {k: v for k, v in vars(args).items() if k in names}
    if getattr(args, "mixer_option", None):
        out["mixer_options"] = dict(_parse_option(t) for t in args.mixer_option)
    return out


def build_forecaster(args: argparse.Namespace):
    from tsmix.forecasting import Forecaster
    from tsmix.forecasting.presets import preset_params

    params = config_overrides(args)
    if args.preset:
        model = params.get("model", ForecasterConfig.model)
        horizon = params.get("horizon", ForecasterConfig.horizon)
        params = {**preset_params(args.preset, model, args.dataset, horizon), **params}
    return Forecaster(**params)


def _default_out(f, dataset: str) -> Path:
    c = f.config
    name = Path(dataset).stem if Path(dataset).suffix else dataset
    return Path("runs") / f"{name}-{c.model}-{c.mixer}-L{c.lookback}-H{c.horizon}-s{c.seed}"


def _fmt(m: dict) -> str:
    return f"mse {m['mse']:.4f}  mae {m['mae']:.4f}"


def cmd_fit(args: argparse.Namespace) -> int:
    from tsmix.tuning.cli import track_from_args, tracking_requested

    f = build_forecaster(args)
    out_dir = args.out or _default_out(f, args.dataset)
    if tracking_requested(args):
        # The tracking server is checked before training; the run directory is saved
        # locally before anything is logged remotely.
        run = track_from_args(f, args.dataset, args, out_dir=out_dir, data_dir=args.data_dir,
                              date_col=args.date_col)
        out = run.out_dir
        where = f"MLflow run {run.run_id} at {run.tracking_uri}"
        if run.registered_name:
            where += f"; registered models:/{run.registered_name}@{run.alias} (version {run.version})"
        print(where)
    else:
        f.fit(args.dataset, data_dir=args.data_dir, date_col=args.date_col)
        out = f.save(out_dir)
    m = f.metrics_
    print(f"test {_fmt(m)}  ({m['protocol']}, {m['test_windows']} windows)  val_mse {m['val_mse']:.4f}  "
          f"epochs {m['epochs']} (best {m['best_epoch']})  {m['train_seconds']:.1f}s  "
          f"params {m['params']}  -> {out}")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from tsmix.forecasting import Forecaster

    f = Forecaster.load(args.run)
    m = f.evaluate(args.split, protocol=args.eval_protocol, data_dir=args.data_dir)
    if args.json:
        print(json.dumps(m, indent=2))
        return 0
    print(f"{args.split} {_fmt(m)}  ({m['protocol']}, {m['windows']} windows)")
    for col, cm in m["per_channel"].items():
        print(f"  {col:>12s}  {_fmt(cm)}")
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    from tsmix.forecasting import Forecaster

    f = Forecaster.load(args.run)
    frame = f.predict(Path(args.input) if args.input else None)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".parquet":
        frame.to_parquet(out, index=False)
    elif out.suffix in (".csv", ".txt", ""):
        frame.to_csv(out, index=False)
    else:
        raise TsmixError(f"unsupported output type {out.suffix!r}: use .csv or .parquet")
    print(f"wrote {len(frame)} forecast rows x {frame.shape[1] - 1} columns to {out}")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    from tsmix.forecasting.presets import PRESETS

    p = sub.add_parser("fit", help="train a forecaster, evaluate on test, write a run directory",
                       description="Train, evaluate on the test split and save the run directory.")
    p.add_argument("--dataset", required=True, help="benchmark name (ETTh1, ...) or a .csv/.parquet path")
    p.add_argument("--preset", choices=sorted(PRESETS), help="start from a preset (explicit flags win)")
    p.add_argument("--out", help="run directory (default runs/<data>-<model>-<mixer>-L-H-seed)")
    p.add_argument("--data-dir", help="folder holding the benchmark files (else $TSMIX_DATA_DIR, cache)")
    p.add_argument("--date-col", help="date column of a file (default: detected)")
    p.add_argument("--mixer-option", action="append", metavar="K=V",
                   help="a mixer option (value parsed as JSON, else string); repeatable")
    add_config_flags(p)
    from tsmix.tuning.cli import add_tracking_arguments

    add_tracking_arguments(p)  # --track, --tracking-uri, --experiment, --register-as, --alias
    p.set_defaults(func=cmd_fit)

    e = sub.add_parser("evaluate", help="MSE/MAE of a saved run on its data")
    e.add_argument("--run", required=True, help="run directory written by tsmix fit / Forecaster.save")
    e.add_argument("--split", default="test", choices=("train", "val", "test"))
    e.add_argument("--eval-protocol", choices=PROTOCOLS, help="default: the run's")
    e.add_argument("--data-dir", help="where the run's benchmark file lives (default: as at fit time)")
    e.add_argument("--json", action="store_true", help="print the full metrics as JSON")
    e.set_defaults(func=cmd_evaluate)

    r = sub.add_parser("predict", help="forecast the next horizon steps after a file's last row")
    r.add_argument("--run", required=True, help="run directory")
    r.add_argument("--input", help=".csv/.parquet history with the fitted columns (default: fitted data)")
    r.add_argument("--output", required=True, help=".csv or .parquet to write")
    r.set_defaults(func=cmd_predict)
