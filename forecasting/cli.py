"""``tsmix fit`` / ``tsmix evaluate`` / ``tsmix predict``.

The hyper-parameter flags are generated from :class:`ForecasterConfig`'s fields (one flag per
field, its type hint parsed by :func:`tsmix.options.parse_text`, help from the field's
``metadata``), so the dataclass stays the only source of defaults: a flag that is not given is
not passed at all. ``--model`` choices come from the model registry. A tuple field takes
several values (``--level 80 95``, or ``--level 80,95``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import typing
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from tsmix.atomic import atomic_path
from tsmix.errors import TsmixError
from tsmix.forecasting.config import PROTOCOLS, ForecasterConfig, choices_of
from tsmix.options import field_hints, parse_text
from tsmix.registry import parse_mixer_options

SKIP = {"mixer_options"}  # given as repeated --mixer-option k=v
READING = ("fill", "date_format", "date_unit")  # how data is read; also flags of predict/evaluate/tune


def _base(hint: Any) -> Any:
    """``X`` of ``X | None`` (the hint itself otherwise)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if len(args) == 1 and type(None) in typing.get_args(hint) else hint


def _text_parser(hint: Any, flag: str) -> Callable[[str], Any]:
    """argparse ``type=``: the text typed by the field's hint (``none`` for an optional field)."""

    def parse(text: str) -> Any:
        return parse_text(text, hint, flag)

    parse.__name__ = getattr(_base(hint), "__name__", "value")  # argparse: "invalid float value: 'x'"
    return parse


class JoinValues(argparse.Action):
    """``nargs="+"`` of a tuple-typed flag: the tuples of every token joined (``80 95`` or ``80,95``);
    ``none`` alone is None."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option: Any = None) -> None:
        if any(v is None for v in values):
            if len(values) > 1:
                parser.error(f"{option}: none cannot be combined with values")
            setattr(namespace, self.dest, None)
            return
        setattr(namespace, self.dest, tuple(x for v in values for x in v))


def _is_tuple(hint: Any) -> bool:
    return typing.get_origin(_base(hint)) is tuple


def add_dataclass_flags(group: Any, cls: type, skip: Collection[str] = frozenset(),
                        only: Collection[str] | None = None) -> None:
    """One ``--flag`` per field of dataclass ``cls`` (dashes for underscores), default: not given;
    ``only``: just these fields."""
    hints = field_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip or (only is not None and f.name not in only):
            continue
        flag = "--" + f.name.replace("_", "-")
        default = f.default if f.default is not dataclasses.MISSING else None
        text = f"{f.metadata.get('help', '')} [default: {default}]".replace("%", "%%")  # argparse formats it
        kw: dict[str, Any] = {"dest": f.name, "default": argparse.SUPPRESS, "help": text}
        if _base(hints[f.name]) is bool:
            kw["action"] = argparse.BooleanOptionalAction
        else:
            kw["type"] = _text_parser(hints[f.name], flag)
            kw["choices"] = choices_of(f)
            kw["metavar"] = f.name.upper()
            if _is_tuple(hints[f.name]):
                kw.update(nargs="+", action=JoinValues)
        group.add_argument(flag, **kw)


def add_reading_flags(parser: argparse.ArgumentParser, title: str) -> None:
    """``--fill``, ``--date-format``, ``--date-unit`` (ForecasterConfig fields) on another command."""
    group = parser.add_argument_group(title)
    add_dataclass_flags(group, ForecasterConfig, only=READING)


def reading_of(args: argparse.Namespace) -> dict[str, Any]:
    """The reading flags given (and only those)."""
    return {k: getattr(args, k) for k in READING if hasattr(args, k)}


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """The ForecasterConfig flags of ``tsmix fit`` (and ``tsmix tune``'s shared ones)."""
    group = parser.add_argument_group("hyper-parameters (ForecasterConfig fields; default = the config's)")
    add_dataclass_flags(group, ForecasterConfig, SKIP)


def config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The ForecasterConfig fields given on the command line (and only those)."""
    names = {f.name for f in dataclasses.fields(ForecasterConfig)}
    out = {k: v for k, v in vars(args).items() if k in names}
    if getattr(args, "mixer_option", None):
        mixer = out.get("mixer", ForecasterConfig.mixer)
        out["mixer_options"] = parse_mixer_options(mixer, args.mixer_option)
    return out


def is_panel_request(args: argparse.Namespace, data: str) -> bool:
    from tsmix.forecasting.backtest_cli import is_panel_request as panel

    return panel(args, data)


def read_table(path: str | None, flag: str) -> Any:
    from tsmix.forecasting.backtest_cli import read_table as read

    return read(path, flag)


def add_panel_flags(parser: argparse.ArgumentParser) -> None:
    from tsmix.forecasting.backtest_cli import add_panel_flags as add

    add(parser)


def build_forecaster(args: argparse.Namespace):
    from tsmix.forecasting import Forecaster
    from tsmix.forecasting.backtest_cli import panel_options
    from tsmix.forecasting.presets import preset_params

    params = {**config_overrides(args), **panel_options(args)}
    if args.preset:
        model = params.get("model", ForecasterConfig.model)
        horizon = params.get("horizon", ForecasterConfig.horizon)
        params = {**preset_params(args.preset, model, args.dataset, horizon), **params}
    return Forecaster(**params)


def _default_out(f, dataset: str) -> Path:
    c = f.config
    name = Path(dataset).stem if Path(dataset).suffix else dataset
    model = f"{c.model}-{c.mixer}" if c.model_spec().uses_mixer else c.model  # no mixer, none named
    return Path("runs") / f"{name}-{model}-L{c.lookback}-H{c.horizon}-s{c.seed}"


def _fmt(m: dict) -> str:
    return f"mse {m['mse']:.4f}  mae {m['mae']:.4f}"


def _probabilistic_line(m: dict) -> str | None:
    """``intervals (split-conformal): coverage 80% 0.812 95% 0.951  width ...  crps 0.2871``."""
    p = m.get("probabilistic")
    if not p:
        return None
    cov = " ".join(f"{lv}% {p['coverage'][lv]:.3f}" for lv in p["levels"])
    width = " ".join(f"{lv}% {p['width'][lv]:.3f}" for lv in p["levels"])
    parts = [f"intervals ({p['interval_method']}):"] + ([f"coverage {cov}", f"width {width}"] if cov else [])
    return "  ".join([*parts, f"pinball {p['pinball']:.4f}", f"crps {p['crps']:.4f}"])


def checkpoint_of(args: argparse.Namespace, out_dir: Path) -> Path | None:
    """Where ``tsmix fit`` checkpoints: ``--checkpoint-dir``, or ``<out>.ckpt`` with ``--resume``
    (beside the run directory, which a save replaces); None: no checkpoints."""
    if args.checkpoint_dir:
        return Path(args.checkpoint_dir).expanduser().resolve()
    return out_dir.with_name(out_dir.name + ".ckpt") if args.resume else None


def cmd_fit(args: argparse.Namespace) -> int:
    from tsmix.engine import from_env
    from tsmix.forecasting.fitted import check_device
    from tsmix.forecasting.forecaster import check_mixer
    from tsmix.forecasting.rundir import check_out_dir
    from tsmix.tuning.cli import track_from_args, tracking_requested

    f = build_forecaster(args)
    cfg = f.config.resolved()
    check_mixer(cfg)  # the cheap checks first: a wrong --out or --device costs no data read, no training
    check_device(cfg.device)
    out_dir = check_out_dir(args.out or _default_out(f, args.dataset))
    ckpt = checkpoint_of(args, out_dir)
    if ckpt is not None and tracking_requested(args):
        raise TsmixError("--resume/--checkpoint-dir are not available with MLflow tracking yet; "
                         "drop --track (log the finished run later) or drop the checkpoint flags")
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
    elif is_panel_request(args, args.dataset):
        f.fit(args.dataset, static_df=read_table(args.static, "--static"), out=out_dir, checkpoint_dir=ckpt,
              resume=args.resume)
        out = f.save(out_dir)
    else:
        f.fit(args.dataset, data_dir=args.data_dir, date_col=args.date_col, out=out_dir, checkpoint_dir=ckpt,
              resume=args.resume)
        out = f.save(out_dir)  # rank 0 only under torchrun
    if not from_env().is_main:
        return 0
    m = f.metrics_
    if f.panel_ is not None:
        scored = "no test held out (production)" if m["mse"] is None else \
            f"test {_fmt(m)}  ({m['series']} series, {m['test_windows']} windows)"
        print(f"{scored}  val_mse {m['val_mse']:.4f}  epochs {m['epochs']} (best {m['best_epoch']})  "
              f"{m['train_seconds']:.1f}s  -> {out}")
        line = _probabilistic_line(m)
        if line:
            print(line)
        return 0
    if m.get("production"):  # nothing held out: the selection fit's numbers, then the refit's
        print(f"production fit: {m['epochs']} epochs (best of {m['selection_epochs']} on validation, val_mse "
              f"{m['val_mse']:.4f}) on all {m['train_windows']} windows, no test held out  "
              f"{m['train_seconds']:.1f}s  params {m['params']}  -> {out}")
        return 0
    print(f"test {_fmt(m)}  ({m['protocol']}, {m['test_windows']} windows)  val_mse {m['val_mse']:.4f}  "
          f"epochs {m['epochs']} (best {m['best_epoch']})  {m['train_seconds']:.1f}s  "
          f"params {m['params']}  -> {out}")
    line = _probabilistic_line(m)
    if line:
        print(line)
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from tsmix.forecasting import Forecaster

    f = Forecaster.load(args.run)
    if f.panel_ is not None and args.data is None:
        raise TsmixError("a panel run keeps only each series' last rows: pass --data FILE (the long-format "
                         "data to score)")
    m = f.evaluate(args.split, protocol=args.eval_protocol, data=args.data, data_dir=args.data_dir,
                   **reading_of(args))
    if args.json:
        print(json.dumps(m, indent=2))
        return 0
    if f.panel_ is not None:
        print(f"{args.split} {_fmt(m)}  ({m['windows']} windows)")
        for sid, sm in m["per_series"].items():
            print(f"  {sid:>12s}  {_fmt(sm)}")
    else:
        print(f"{args.split} {_fmt(m)}  ({m['protocol']}, {m['windows']} windows)")
        for col, cm in m["per_channel"].items():
            print(f"  {col:>12s}  {_fmt(cm)}")
    line = _probabilistic_line(m)
    if line:
        print(line)
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    from tsmix.forecasting import Forecaster

    out = check_output_file(args.output)
    f = Forecaster.load(args.run)
    if f.panel_ is not None:
        frame = f.predict(args.input, futr_df=read_table(args.futr, "--futr"), h=args.h,
                          static_df=read_table(args.static, "--static"), level=args.level,
                          quantiles=args.quantiles)
        write_frame(frame, out)
        print(f"wrote {len(frame)} forecast rows for {frame['unique_id'].nunique()} series to {out}")
        return 0
    if args.futr or args.static:
        raise TsmixError("--futr/--static belong to runs fitted on a long-format panel; this run is wide")
    frame = f.predict(Path(args.input) if args.input else None, level=args.level, quantiles=args.quantiles,
                      h=args.h, **reading_of(args))
    write_frame(frame, out)
    method = frame.attrs.get("interval_method")
    print(f"wrote {len(frame)} forecast rows x {frame.shape[1] - 1} columns to {out}"
          + (f" (intervals: {method})" if method else ""))
    return 0


def _floats(text: str) -> tuple[float, ...] | None:
    """argparse ``type=`` of --level / --quantiles tokens: ``80``, ``80,95``; ``none``."""
    from tsmix.forecasting.probabilistic import parse_floats

    try:
        return parse_floats(text)
    except TsmixError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


OUTPUT_TYPES = (".csv", ".txt", "", ".parquet")


def check_output_file(path: str) -> Path:
    """Where ``tsmix predict --output`` may write: a .csv/.parquet file path in a writable folder."""
    out = Path(path).expanduser()
    if out.suffix not in OUTPUT_TYPES:
        raise TsmixError(f"unsupported output type {out.suffix!r}: use .csv or .parquet")
    if out.is_dir():
        raise TsmixError(f"--output {out} is a folder; pass a file path such as {out / 'forecast.csv'}")
    anchor = out.parent
    while not anchor.exists() and anchor != anchor.parent:
        anchor = anchor.parent
    if not anchor.is_dir() or not os.access(anchor, os.W_OK | os.X_OK):
        raise TsmixError(f"--output {out}: cannot write under {anchor}; choose a writable folder")
    return out


def write_frame(frame: Any, out: Path) -> None:
    """Write ``frame`` atomically (temporary sibling, then rename): a kill leaves no half file."""
    try:
        with atomic_path(out, suffix=out.suffix) as tmp:
            if out.suffix == ".parquet":
                frame.to_parquet(tmp, index=False)
            else:
                frame.to_csv(tmp, index=False)
    except OSError as exc:
        reason = exc.strerror or exc
        raise TsmixError(f"cannot write --output {out} ({reason}); choose a writable folder") from None


def add_commands(sub: argparse._SubParsersAction) -> None:
    from tsmix.forecasting.presets import preset_names

    p = sub.add_parser("fit", help="train a forecaster, evaluate on test, write a run directory",
                       description="Train, evaluate on the test split and save the run directory.")
    p.add_argument("--dataset", required=True, help="benchmark name (ETTh1, ...) or a .csv/.parquet path")
    p.add_argument("--preset", choices=preset_names(), help="start from a preset (explicit flags win)")
    p.add_argument("--out", help="run directory (default runs/<data>-<model>-<mixer>-L-H-seed)")
    p.add_argument("--data-dir", help="folder holding the benchmark files (else $TSMIX_DATA_DIR, cache)")
    p.add_argument("--date-col", help="date column of a file (default: detected)")
    p.add_argument("--mixer-option", action="append", metavar="K=V",
                   help="a mixer option, typed by the mixer's options dataclass; repeatable "
                        "(`tsmix mixers -v` lists them)")
    p.add_argument("--checkpoint-dir", metavar="DIR",
                   help="write a checkpoint there after every epoch (default with --resume: <out>.ckpt, "
                        "beside the run directory); kept after the fit")
    p.add_argument("--resume", action="store_true",
                   help="continue from the checkpoint of an interrupted fit with the same flags and data "
                        "(starts fresh when there is none); a different config is refused")
    add_config_flags(p)
    add_panel_flags(p)
    from tsmix.tuning.cli import add_tracking_arguments

    add_tracking_arguments(p)  # --track, --tracking-uri, --experiment, --register-as, --alias
    p.set_defaults(func=cmd_fit)

    e = sub.add_parser("evaluate", help="MSE/MAE of a saved run on its data")
    e.add_argument("--run", required=True, help="run directory written by tsmix fit / Forecaster.save")
    e.add_argument("--split", default="test", choices=("train", "val", "test"))
    e.add_argument("--eval-protocol", choices=PROTOCOLS, help="default: the run's")
    e.add_argument("--data", metavar="FILE",
                   help="evaluate on this .csv/.parquet file (or benchmark name) with the fitted columns "
                        "(default: the data the run was fitted on)")
    e.add_argument("--data-dir", help="where the run's benchmark file lives (default: as at fit time)")
    e.add_argument("--json", action="store_true", help="print the full metrics as JSON")
    add_reading_flags(e, "reading --data (default: as the run was fitted)")
    e.set_defaults(func=cmd_evaluate)

    r = sub.add_parser("predict", help="forecast the next horizon steps after a file's last row")
    r.add_argument("--run", required=True, help="run directory")
    r.add_argument("--input", help=".csv/.parquet history with the fitted columns (default: fitted data)")
    r.add_argument("--output", required=True, help=".csv or .parquet to write")
    r.add_argument("--level", nargs="+", type=_floats, action=JoinValues, metavar="LEVEL",
                   help="prediction intervals in %%, e.g. 80 95: <col>-lo-80, <col>-hi-80 columns (the "
                        "model's own, or split-conformal for point models)")
    r.add_argument("--quantiles", nargs="+", type=_floats, action=JoinValues, metavar="Q",
                   help="quantile columns <col>-q0.1, ..., e.g. 0.1,0.5,0.9")
    r.add_argument("--steps", dest="h", type=int, metavar="H",
                   help="forecast only the first H steps (at most the trained horizon)")
    r.add_argument("--futr", metavar="FILE",
                   help="panel runs: future covariates over the horizon (.csv/.parquet)")
    r.add_argument("--static", metavar="FILE", help="panel runs: one row per series (id + attributes)")
    add_reading_flags(r, "reading --input (default: as the run was fitted)")
    r.set_defaults(func=cmd_predict)
