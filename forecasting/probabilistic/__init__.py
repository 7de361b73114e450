"""tsmix.forecasting.probabilistic: output heads, losses, conformal intervals and scores.

A forecasting network is ``ProbabilisticModel(base, head)``: RevIN, then any base network
built for ``horizon * head.k`` steps, then a weightless head (point, quantile, normal,
Student-t). Point models get intervals from split-conformal calibration on validation
residuals. ``output`` writes long / wide frames in the neuralforecast column convention.
"""

from tsmix.forecasting.probabilistic.conformal import (
    Calibration,
    collect_residuals,
    fit_conformal,
    window_scale,
)
from tsmix.forecasting.probabilistic.heads import (
    Head,
    NormalHead,
    PointHead,
    QuantileHead,
    StudentTHead,
    WindowScale,
    make_head,
)
from tsmix.forecasting.probabilistic.losses import pinball, pinball_loss
from tsmix.forecasting.probabilistic.metrics import (
    ScoreSums,
    coverage,
    crps_normal,
    crps_quantiles,
    crps_samples,
    interval_width,
    mean_pinball,
)
from tsmix.forecasting.probabilistic.model import (
    ProbabilisticModel,
    build_probabilistic,
    build_with_head,
    lift_state_dict,
)
from tsmix.forecasting.probabilistic.output import (
    forecast_bands,
    forecast_quantiles,
    long_frame,
    wide_frame,
)
from tsmix.forecasting.probabilistic.scoring import CRPS_GRID, SplitScores, scored_levels, split_scores
from tsmix.forecasting.probabilistic.spec import (
    LOSSES,
    HeadConfig,
    check_levels,
    check_quantiles,
    level_bounds,
    parse_floats,
    resolve_quantiles,
)

__all__ = [
    "CRPS_GRID",
    "LOSSES",
    "Calibration",
    "Head",
    "HeadConfig",
    "NormalHead",
    "PointHead",
    "ProbabilisticModel",
    "QuantileHead",
    "ScoreSums",
    "SplitScores",
    "StudentTHead",
    "WindowScale",
    "build_probabilistic",
    "build_with_head",
    "check_levels",
    "check_quantiles",
    "collect_residuals",
    "coverage",
    "crps_normal",
    "crps_quantiles",
    "crps_samples",
    "fit_conformal",
    "forecast_bands",
    "forecast_quantiles",
    "interval_width",
    "level_bounds",
    "lift_state_dict",
    "long_frame",
    "make_head",
    "mean_pinball",
    "parse_floats",
    "pinball",
    "pinball_loss",
    "resolve_quantiles",
    "scored_levels",
    "split_scores",
    "wide_frame",
    "window_scale",
]
