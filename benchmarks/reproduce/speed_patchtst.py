"""Training speed of the PatchTST paper preset on ETTh1 (L=336, H=96, batch 128) and where it goes.

Measures, in one process and on the same batches:
  * seconds per training step (process CPU time and wall clock) of tsmix's model as built, and of
    the same model with the blocks' FastDropout put back to ``nn.Dropout`` (the ratio is printed);
  * the split of a step into forward / backward / optimizer;
  * optionally (``--epoch``) one real ``Forecaster.fit`` epoch (training + validation);
  * a torch.profiler table of the top operators.

CPU time is the stable number on a shared machine; wall clock includes other jobs' contention.

    OMP_NUM_THREADS=1 python benchmarks/reproduce/speed_patchtst.py --threads 1 --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import copy
import os
import time

import torch
import torch.nn.functional as F
from torch import nn


def _steps(model, batches, opt):
    fwd = bwd = stp = 0.0
    for x, y in batches:
        t0 = time.process_time()
        loss = F.mse_loss(model(x), y)
        t1 = time.process_time()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t2 = time.process_time()
        opt.step()
        t3 = time.process_time()
        fwd, bwd, stp = fwd + t1 - t0, bwd + t2 - t1, stp + t3 - t2
    n = len(batches)
    return fwd / n, bwd / n, stp / n


def time_model(model, batches, warmup: int = 2) -> dict:
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    model.train()
    _steps(model, batches[:warmup], opt)
    w0, c0 = time.perf_counter(), time.process_time()
    fwd, bwd, stp = _steps(model, batches[warmup:], opt)
    n = len(batches) - warmup
    return {"wall": (time.perf_counter() - w0) / n, "cpu": (time.process_time() - c0) / n,
            "forward": fwd, "backward": bwd, "optimizer": stp}


def native_dropout(model: nn.Module) -> nn.Module:
    """A copy with every FastDropout replaced by torch's nn.Dropout (the 'before' model)."""
    from tsmix.forecasting.dropout import FastDropout

    m = copy.deepcopy(model)
    for parent in m.modules():
        for name, child in parent.named_children():
            if isinstance(child, FastDropout):
                setattr(parent, name, nn.Dropout(child.p))
    return m


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=os.environ.get("TSMIX_DATA_DIR"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batches", type=int, default=12, help="timed batches (+2 warm-up)")
    ap.add_argument("--epoch", action="store_true", help="also time one full Forecaster.fit epoch")
    ap.add_argument("--profile-steps", type=int, default=3)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    from tsmix.datasets import prepare
    from tsmix.forecasting import Forecaster, ForecasterConfig, build_model
    from tsmix.forecasting.presets import paper_preset

    preset = paper_preset("patchtst", "ETTh1", 96)
    cfg = ForecasterConfig(model="patchtst", **preset).resolved()
    data = prepare("ETTh1", cfg.lookback, cfg.horizon, data_dir=args.data_dir)
    steps_per_epoch = len(data.train) // cfg.batch_size
    gen = torch.Generator().manual_seed(0)
    it = data.train.batches(cfg.batch_size, shuffle=True, generator=gen, drop_last=True)
    batches = [next(it) for _ in range(args.batches + 2)]
    torch.manual_seed(0)
    model = build_model(cfg, data.x_channels)
    print(f"PatchTST paper preset, ETTh1 L={cfg.lookback} H={cfg.horizon}: {steps_per_epoch} steps/epoch of "
          f"{cfg.batch_size} windows, {sum(p.numel() for p in model.parameters())} params, "
          f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    ours = time_model(model, batches)
    before = time_model(native_dropout(model), batches)
    for name, r in (("tsmix (FastDropout)", ours), ("same model, nn.Dropout", before)):
        print(f"  {name:24s} step cpu {r['cpu']:.3f}s wall {r['wall']:.3f}s -> epoch cpu "
              f"{r['cpu'] * steps_per_epoch:5.1f}s wall {r['wall'] * steps_per_epoch:5.1f}s | forward "
              f"{r['forward']:.3f} backward {r['backward']:.3f} optimizer {r['optimizer']:.3f} (cpu s/step)")
    print(f"  speed-up of the step from FastDropout (cpu): {before['cpu'] / ours['cpu']:.2f}x")

    with torch.no_grad():
        model.eval()
        x = data.val.gather(torch.arange(128))[0]
        c0 = time.process_time()
        for _ in range(3):
            model(x)
        val_cpu = (time.process_time() - c0) / 3 * -(-len(data.val) // 128)
    print(f"  validation pass ({len(data.val)} windows, forward only): cpu {val_cpu:.1f}s")

    if args.epoch:
        f = Forecaster.from_preset("paper", "patchtst", "ETTh1", 96, epochs=1, progress=False,
                                   threads=args.threads)
        c0, w0 = time.process_time(), time.perf_counter()
        f.fit("ETTh1", data_dir=args.data_dir)
        h = f.history[0]
        print(f"  Forecaster.fit, 1 epoch: train {h['train_seconds']:.1f}s wall, epoch incl. validation "
              f"{h['seconds']:.1f}s wall; whole fit incl. test eval cpu {time.process_time() - c0:.1f}s "
              f"wall {time.perf_counter() - w0:.1f}s")

    from torch.profiler import ProfilerActivity, profile

    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    model.train()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _steps(model, batches[: args.profile_steps], opt)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=55))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
