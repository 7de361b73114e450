"""A generated ragged panel in long format: for benchmarks, tests and trying the panel path without data.

Series k: level 1000 * k (so a value in the wrong series is visible), a per-series trend, daily and
weekly seasonality from the timestamps, noise; ``load`` (past-only covariate) = y + noise, ``promo``
(future-known) = 1 on weekends; static ``region`` (categorical) and ``size`` (numeric).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd


def synthetic_panel(lengths: Sequence[int], starts: Sequence[int] | None = None, *, freq: str = "h",
                    seed: int = 0, origin: str = "2020-01-01") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(long frame ``unique_id, ds, y, load, promo``, static frame ``unique_id, region, size``).

    Series k has ``lengths[k]`` rows starting ``starts[k]`` steps of ``freq`` after ``origin``.
    """
    rng = np.random.default_rng(seed)
    n = np.asarray(lengths, dtype=np.int64)
    s0 = np.zeros_like(n) if starts is None else np.asarray(starts, dtype=np.int64)
    grid = pd.date_range(origin, periods=int((s0 + n).max()), freq=freq)  # one shared calendar
    k = np.repeat(np.arange(len(n)), n)  # (N,) series of each row
    t = np.concatenate([np.arange(a, a + m) for a, m in zip(s0, n)]) if len(n) else np.zeros(0, np.int64)
    ds = grid[t]
    hour = (ds.hour + ds.minute / 60).to_numpy()
    dow = (ds.day_of_week + hour / 24).to_numpy()
    slope, amp_d, amp_w = (rng.uniform(a, b, len(n))[k] for a, b in ((-0.01, 0.01), (0.5, 2.0), (0.2, 1.0)))
    y = (1000.0 * k + slope * t + amp_d * np.sin(2 * np.pi * hour / 24) + amp_w * np.sin(2 * np.pi * dow / 7)
         + 0.1 * rng.standard_normal(len(t)))
    ids = np.array([f"s{i:05d}" for i in range(len(n))])
    long = pd.DataFrame({"unique_id": ids[k], "ds": ds, "y": y, "load": y + rng.standard_normal(len(t)),
                         "promo": (ds.day_of_week >= 5).astype(np.float64)})
    static = pd.DataFrame({"unique_id": ids, "region": rng.choice(["east", "north", "south", "west"], len(n)),
                           "size": rng.lognormal(0.0, 1.0, len(n))})
    return long, static
