"""``tsmix benchmark``, ``tsmix benchmark-report`` and ``tsmix benchmark-speed``.

    tsmix benchmark --suite smoke|quick|paper [--datasets ...] [--horizons ...] [--models ...]
                    [--mixers ...] [--seeds ...] [--results DIR] [--data-dir D] [--tracking-uri U]
                    [--checkpoints DIR] [--progress]
    tsmix benchmark --suite speed ...          (same as tsmix benchmark-speed)
    tsmix benchmark-report --suite quick [--results DIR] [--out DIR]
    tsmix benchmark-speed [--lengths ...] [--widths ...] [--mixers ...] [--out DIR]
    tsmix benchmark-speed --shapes patch variate [--batches 32 128] [--rounds 5]   (speed_shapes.*)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tsmix.errors import TsmixError

DEFAULT_RESULTS = "benchmarks/results"
DEFAULT_SPEED_OUT = "benchmarks/speed"


def add_commands(sub: argparse._SubParsersAction) -> None:
    from .suites import SUITES

    p = sub.add_parser("benchmark", help="run a benchmark suite (resumable) and render its report",
                       description="Run the grid of a suite; every finished run is stored at once as a "
                                   "CSV row, so an interrupted run resumes where it stopped.")
    p.add_argument("--suite", required=True, choices=[*SUITES, "speed"], help="which grid")
    p.add_argument("--datasets", nargs="+",
                   help="replace the suite's datasets (ETTh1 ETTh2 ETTm1 ETTm2 Weather)")
    p.add_argument("--horizons", nargs="+", type=int, help="replace the suite's horizons")
    p.add_argument("--models", nargs="+",
                   help="subset of the registered models (tsmix.forecasting.available_models())")
    p.add_argument("--mixers", nargs="+", help="mixers (default: every registered mixer)")
    p.add_argument("--seeds", nargs="+", type=int, help="replace the suite's seeds (default 2021 2022 2023)")
    p.add_argument("--results", default=DEFAULT_RESULTS, help=f"results folder (default {DEFAULT_RESULTS})")
    p.add_argument("--data-dir", default=None, help="folder holding ETT-small/ and weather/")
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI: log every run and the report")
    p.add_argument("--threads", type=int, default=None, help="torch threads per run (default: torch's)")
    p.add_argument("--shard", default=None,
                   help="write rows to <dataset>.<SHARD>.csv (e.g. a host name; env TSMIX_BENCHMARK_SHARD)")
    p.add_argument("--max-runs", type=int, default=None, help="stop after this many new runs")
    p.add_argument("--part", default=None, metavar="K/N",
                   help="run only part K of N of the grid (round robin), e.g. two processes: 1/2 and 2/2")
    p.add_argument("--rerun-stale", action="store_true", help="re-run rows whose recipe changed")
    p.add_argument("--fail-fast", action="store_true", help="stop at the first failing run")
    p.add_argument("--dry-run", action="store_true", help="show what would run, run nothing")
    p.add_argument("--no-report", action="store_true", help="do not re-render README.md/plots afterwards")
    p.add_argument("--checkpoints", default=None, metavar="DIR",
                   help="checkpoint every run after each epoch under DIR (a folder per run) and continue a "
                        "killed run from there, with the numbers of an uninterrupted one; a run's folder is "
                        "removed once its row is stored")
    p.add_argument("--progress", action="store_true",
                   help="a line per epoch of every run on stderr (a bar too on a terminal); runs on the "
                        "paper grid take up to an hour each")
    _speed_args(p, with_out=True)
    p.set_defaults(func=_benchmark)

    r = sub.add_parser("benchmark-report", help="render tables and plots of stored benchmark rows")
    r.add_argument("--suite", required=True, help="suite whose rows to render")
    r.add_argument("--results", default=DEFAULT_RESULTS)
    r.add_argument("--out", default=None, help="output folder (default RESULTS/SUITE)")
    r.add_argument("--notes", default=None, help="markdown file whose text heads the report")
    r.add_argument("--tracking-uri", default=None)
    r.set_defaults(func=_report)

    s = sub.add_parser("benchmark-speed", help="time and memory of every mixer vs sequence length and width")
    _speed_args(s, with_out=True)
    s.add_argument("--mixers", nargs="+", help="mixers (default: every registered mixer; softmax always)")
    s.add_argument("--render", default=None, metavar="SPEED_JSON",
                   help="re-render speed.md/csv/png into --out from a saved speed.json, measuring nothing")
    s.set_defaults(func=_speed)


def _speed_args(p: argparse.ArgumentParser, with_out: bool) -> None:
    from .speed_cells import DEFAULT_BATCHES, SHAPE_CHOICES  # stdlib-only module: cheap at startup

    g = p.add_argument_group("speed suite")
    g.add_argument("--lengths", nargs="+", type=int, default=None,
                   help="sequence lengths (default 64 ... 8192)")
    g.add_argument("--widths", nargs="+", type=int, default=None, help="widths D (default 64 256)")
    g.add_argument("--batch", type=int, default=1)
    g.add_argument("--reps", type=int, default=3)
    g.add_argument("--time-budget", type=float, default=4.0, help="skip cells predicted slower (s/pass)")
    g.add_argument("--mem-budget", type=float, default=3000.0, help="skip cells predicted larger (MiB)")
    g.add_argument("--device", default="auto")
    g.add_argument("--shapes", nargs="+", default=["lengths"], choices=SHAPE_CHOICES,
                   help="lengths: the N x D sweep (speed.*); patch / variate: the PatchTST and iTransformer "
                        "token shapes, batch as an axis, ratios vs issue #21 targets (speed_shapes.*)")
    g.add_argument("--batches", nargs="+", type=int, default=list(DEFAULT_BATCHES),
                   help="--shapes patch/variate: windows per batch (default %(default)s)")
    g.add_argument("--rounds", type=int, default=5,
                   help="--shapes patch/variate: alternating rounds per cell (median reported)")
    if with_out:
        g.add_argument("--out", default=DEFAULT_SPEED_OUT,
                       help=f"speed output folder (default {DEFAULT_SPEED_OUT})")


def _speed(args: argparse.Namespace) -> int:
    import torch

    from .speed import DEFAULT_LENGTHS, DEFAULT_WIDTHS, SpeedConfig, load_speed_json, run_speed, write_speed

    if getattr(args, "render", None):
        if _json_kind(args.render) == "shapes":  # a speed_shapes.json, not a speed.json
            from .speed import load_shapes_json, write_shapes

            files = write_shapes(load_shapes_json(args.render), args.out)
        else:
            files = write_speed(load_speed_json(args.render), args.out)
        print("wrote " + ", ".join(str(p) for p in files.values()))
        return 0
    if getattr(args, "threads", None):
        torch.set_num_threads(args.threads)
    presets = [s for s in args.shapes if s != "lengths"]
    if presets:
        from .speed import ShapesConfig, run_shapes, write_shapes

        res = run_shapes(ShapesConfig(shapes=tuple(presets), batches=tuple(args.batches), rounds=args.rounds,
                                      device=args.device, mixers=tuple(args.mixers) if args.mixers else None))
        files = write_shapes(res, args.out)
        print(Path(files["markdown"]).read_text())
        print("wrote " + ", ".join(str(p) for p in files.values()))
    if "lengths" not in args.shapes:
        return 0
    cfg = SpeedConfig(lengths=tuple(args.lengths or DEFAULT_LENGTHS),
                      widths=tuple(args.widths or DEFAULT_WIDTHS), batch=args.batch, reps=args.reps,
                      time_budget_s=args.time_budget,
                      mem_budget_mb=args.mem_budget, device=args.device,
                      mixers=tuple(args.mixers) if args.mixers else None)
    if any(n <= 0 for n in cfg.lengths) or any(d <= 0 for d in cfg.widths):
        raise TsmixError("--lengths and --widths must be positive integers")
    result = run_speed(cfg)
    files = write_speed(result, args.out)
    print(Path(files["markdown"]).read_text())
    print("wrote " + ", ".join(str(p) for p in files.values()))
    return 0


def _json_kind(path: str) -> str | None:
    import json

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None  # load_speed_json reports a missing or broken file
    return data.get("kind") if isinstance(data, dict) else None


def _benchmark(args: argparse.Namespace) -> int:
    if args.suite == "speed":
        return _speed(args)
    from .report import write_report
    from .runner import (
        checkpoint_epoch,
        checkpoint_folder,
        default_shard,
        estimate_seconds,
        plan,
        run_suite,
        select_part,
    )
    from .store import ResultStore
    from .suites import expand, get_suite

    suite = get_suite(args.suite)
    shard = args.shard or default_shard()
    part = _parse_part(args.part)
    sel = dict(datasets=args.datasets, horizons=args.horizons, models=args.models, mixers=args.mixers,
               seeds=args.seeds)
    if args.dry_run:
        runs = select_part(expand(suite, **sel), part)
        p = plan(runs, ResultStore(args.results, shard=shard), rerun_stale=args.rerun_stale)
        print(f"{suite.name}: {len(runs)} runs, {len(p.done)} stored, {len(p.stale)} stale, "
              f"{len(p.todo)} to run")
        rows = ResultStore(args.results).rows(suite.name)
        wall, unknown = estimate_seconds(p.todo, rows, "train_seconds")
        cpu, _ = estimate_seconds(p.todo, rows, "cpu_seconds")
        print(f"estimate for what is left, from the stored rows of the same model/mixer: {cpu / 3600:.1f} "
              f"CPU-hours of fit(), {wall / 3600:.1f} h of training wall time at the load those rows saw"
              f"{f'; {unknown} runs have no stored counterpart yet' if unknown else ''}")
        for r in p.todo:
            at = checkpoint_epoch(checkpoint_folder(args.checkpoints, r)) if args.checkpoints else None
            print("  todo", r.label + (f" (checkpoint after epoch {at[0]} of {at[1]})" if at else ""))
        return 0
    out = run_suite(suite, args.results, **sel, data_dir=args.data_dir, threads=args.threads, shard=shard,
                    max_runs=args.max_runs, part=part, rerun_stale=args.rerun_stale, fail_fast=args.fail_fast,
                    tracking_uri=args.tracking_uri, progress=args.progress, checkpoints=args.checkpoints)
    print(f"{suite.name}: ran {out['ran']} runs in {out['seconds']:.0f}s "
          f"({out['done_before']} were already stored); {len(out['failed'])} failed")
    for label, msg in out["failed"]:
        print(f"  FAILED {label}: {msg}")
    if not args.no_report and ResultStore(args.results).rows(suite.name):  # nothing stored: no report
        files = write_report(args.results, suite.name, tracking_uri=args.tracking_uri)
        print("report: " + ", ".join(str(p) for p in files.values()))
    return 1 if out["failed"] else 0


def _parse_part(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        k, n = (int(v) for v in text.split("/"))
    except ValueError:
        raise TsmixError(f"--part must look like K/N (e.g. 1/2), got {text!r}") from None
    return k, n


def _report(args: argparse.Namespace) -> int:
    from .report import write_report

    notes = ""
    if args.notes:
        try:
            notes = Path(args.notes).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise TsmixError(f"cannot read --notes {args.notes}: {exc.strerror or exc}; pass a markdown "
                             "file") from None
    files = write_report(args.results, args.suite, out_dir=args.out, notes=notes,
                         tracking_uri=args.tracking_uri)
    print("report: " + ", ".join(str(p) for p in files.values()))
    return 0
