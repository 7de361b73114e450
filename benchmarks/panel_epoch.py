"""Seconds per training epoch of the panel estimator on a generated 2,000-series panel.

    python benchmarks/panel_epoch.py [--series 2000] [--lookback 72] [--horizon 24] [--steps 200]
                                     [--batch-size 256] [--models dlinear,patchtst] [--full] [--threads 1]

The panel is ``panel_memory.py``'s (``synthetic_panel``: hourly, lengths 200..2,000, ragged starts, one
past-only and one future-known covariate, static attributes), read and prepared as
``PanelForecaster.fit`` does (val/test = the last horizon of each series). Each model is trained through
the real pipeline (``train_panel`` on the engine: gather, forward with the covariate paths, backward,
Adam) for ``--steps`` optimizer steps over a fixed random subset of the training windows, and the time
is scaled up to one epoch of all training windows; ``--full`` runs one whole epoch instead. Printed:
rows, windows, build seconds, per-model step time, seconds per epoch, parameters, peak RSS.
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import torch

from tsmix.forecasting.covariate_models import CovariateLayout, build_covariate_model
from tsmix.forecasting.panel_fit import PanelForecaster
from tsmix.forecasting.panel_fit_train import train_panel
from tsmix.forecasting.registry import count_params

TINY_PATCH = dict(d_model=16, heads=4, layers=3, d_ff=128, patch_len=16, stride=8, dropout=0.3)


class Subset:
    """The first ``n`` windows of a fixed random order: a short epoch of the same per-step cost."""

    def __init__(self, windows, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.windows, self.idx = windows, torch.randperm(len(windows), generator=g)[:n]
        self.horizon, self.lookback = windows.horizon, windows.lookback

    def __len__(self) -> int:
        return len(self.idx)

    def gather(self, idx):
        return self.windows.gather(self.idx[idx])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--series", type=int, default=2000)
    ap.add_argument("--lookback", type=int, default=72)
    ap.add_argument("--horizon", type=int, default=24)
    ap.add_argument("--steps", type=int, default=200, help="optimizer steps timed per model")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--models", default="dlinear,patchtst")
    ap.add_argument("--full", action="store_true", help="time one whole epoch instead of --steps")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1: on a shared CPU more threads spend their time waiting)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    from panel_memory import generate  # the same generated panel as the memory benchmark

    long, static = generate(a.series, a.seed)
    t0 = time.perf_counter()
    base = PanelForecaster("dlinear", lookback=a.lookback, horizon=a.horizon, hist_exog=["load"],
                           futr_exog=["promo"])
    prep = base.prepare(base.read(long, static))
    build = time.perf_counter() - t0
    p = prep.panel
    print(f"panel: {p.n_series} series, lengths {p.lengths.min()}..{p.lengths.max()}, {p.n_rows} rows; "
          f"windows L={a.lookback} H={a.horizon}: train {len(prep.train)}, val {len(prep.val)}, "
          f"test {len(prep.test)}; read + prepare {build:.2f} s")
    for name in a.models.split(","):
        extra = TINY_PATCH if name == "patchtst" else {}
        est = PanelForecaster(name, lookback=a.lookback, horizon=a.horizon, epochs=1, batch_size=a.batch_size,
                              lr=1e-3, lr_schedule="constant", progress=False, hist_exog=["load"],
                              futr_exog=["promo"], **extra)
        cfg = est.config.resolved()
        torch.manual_seed(a.seed)
        model = build_covariate_model(cfg, CovariateLayout.of(prep.schema, cfg.model_spec()))
        n = len(prep.train) if a.full else min(len(prep.train), a.steps * a.batch_size)
        windows = prep.train if a.full else Subset(prep.train, n, a.seed)
        t0 = time.perf_counter()
        res = train_panel(model, windows, None, cfg, torch.device("cpu"))
        wall = time.perf_counter() - t0
        per_step = res.train_seconds / max(res.steps, 1)
        epoch_steps = len(prep.train) // a.batch_size
        print(f"{name}: {count_params(model)} params, {res.steps} steps of {a.batch_size} windows in "
              f"{res.train_seconds:.2f} s ({1e3 * per_step:.1f} ms/step, wall {wall:.2f} s) -> one epoch of "
              f"{len(prep.train)} windows = {epoch_steps} steps: "
              f"{'measured' if a.full else 'scaled'} {per_step * epoch_steps:.1f} s; "
              f"train loss {res.history[-1]['train_loss']:.4f}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {rss:.0f} MiB; training windows hold {prep.train.held_bytes() / 2**20:.1f} MiB "
          f"(views of the buffers); torch threads {torch.get_num_threads()}; numpy {np.__version__}")


if __name__ == "__main__":
    main()
