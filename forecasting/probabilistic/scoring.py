"""Probabilistic scores of a split, batch by batch: what ``Forecaster.evaluate`` adds to MSE/MAE.

Intervals come from the head itself or from a point model's conformal :class:`Calibration`
(:func:`forecast_bands`); the CRPS from the head's own formula, or, for a calibrated point
model, from its conformal quantiles on :data:`CRPS_GRID` (a point mass alone would only give the
MAE). Scores are on the scaled data, like MSE/MAE.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from tsmix.forecasting.probabilistic.conformal import Calibration
from tsmix.forecasting.probabilistic.heads import Head, NormalHead, QuantileHead, StudentTHead
from tsmix.forecasting.probabilistic.metrics import ScoreSums, crps_quantiles
from tsmix.forecasting.probabilistic.output import forecast_bands, interval_method
from tsmix.forecasting.probabilistic.spec import DEFAULT_LEVELS, format_level

CRPS_GRID = tuple(round(0.05 * i, 2) for i in range(1, 20))  # 0.05 .. 0.95: conformal CRPS quantiles


def scored_levels(head: Head, calibration: Calibration | None,
                  levels: Sequence[float] | None) -> tuple[float, ...]:
    """The interval levels a split is scored at: a quantile head's symmetric trained pairs
    (q, 1 - q); otherwise ``levels`` (default 80, 95), for a calibrated point model those it covers."""
    if isinstance(head, QuantileHead):
        trained = head.levels
        pairs = {round(100.0 * (1.0 - 2.0 * q), 9) for q in trained if q < 0.5
                 and any(abs(t - (1.0 - q)) < 1e-9 for t in trained)}
        return tuple(sorted(pairs))
    wanted = tuple(levels or DEFAULT_LEVELS)
    if head.has_intervals:
        return wanted
    return tuple(lv for lv in wanted if calibration is not None and calibration.covers(lv))


class SplitScores:
    """Coverage, width, pinball per level and the CRPS over a split's batches (:class:`ScoreSums`)."""

    def __init__(self, head: Head, calibration: Calibration | None, levels: Sequence[float]) -> None:
        self.head, self.calibration = head, calibration
        self.levels = tuple(levels)
        self.sums = ScoreSums(self.levels)
        self.method = interval_method(head, calibration, self.levels)
        self.grid = () if head.has_intervals or calibration is None else tuple(
            q for q in CRPS_GRID if q == 0.5 or calibration.covers(round(abs(200.0 * q - 100.0), 9)))

    def update(self, out: torch.Tensor, y: torch.Tensor, scale: torch.Tensor | None = None) -> None:
        """One batch: the head output ``out``, targets y (B, H, C) and the windows' input scale (B, C)
        (:func:`window_scale`, needed by a scaled conformal calibration)."""
        point = self.head.point(out)
        _, bands = forecast_bands(self.head, out, self.levels, self.calibration, scale) \
            if self.levels else ("", {})
        if self.head.has_intervals:
            crps = self.head.crps(out, y)
        else:
            qs = self.calibration.quantiles(point, self.grid, scale)  # (B, H, Q, C)
            crps = crps_quantiles(qs, y, self.grid)
        self.sums.update(y, point, bands, crps)

    def metrics(self) -> dict[str, Any]:
        """``{"interval_method", "levels", "crps", "crps_method", "pinball", "coverage", "width"}``."""
        return {"interval_method": self.method, "levels": [format_level(lv) for lv in self.levels],
                "crps_method": self.crps_method(), **self.sums.metrics()}

    def crps_method(self) -> str:
        """How the CRPS was computed (approximations differ, so tables name it)."""
        if isinstance(self.head, NormalHead):
            return "closed-form normal"
        if isinstance(self.head, StudentTHead):
            return "student-t samples"
        if isinstance(self.head, QuantileHead):
            return f"quantile grid ({len(self.head.levels)} trained quantiles)"
        return f"conformal quantile grid ({len(self.grid)} quantiles)"


def split_scores(head: Head, calibration: Calibration | None,
                 levels: Sequence[float] | None = None) -> SplitScores | None:
    """A :class:`SplitScores` when the model has intervals (its head's or a calibration), else None."""
    if not head.has_intervals and calibration is None:
        return None
    return SplitScores(head, calibration, scored_levels(head, calibration, levels))
