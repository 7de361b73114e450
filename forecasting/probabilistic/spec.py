"""What a forecast's uncertainty is made of: the loss name, quantile levels and interval levels.

Levels follow the neuralforecast convention: ``level=80`` is the central 80% interval, i.e.
the quantiles 0.1 and 0.9. All checks raise a one-line :class:`TsmixError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tsmix.errors import TsmixError

LOSSES = ("mse", "mae", "quantile", "normal", "studentt")
POINT_LOSSES = frozenset({"mse", "mae"})
DEFAULT_LEVELS = (80.0, 95.0)  # loss="quantile" with neither quantiles nor level given
_DIGITS = 12  # rounding of derived quantiles: 0.5 - 80/200 is 0.09999999999999998 in floats


def _sorted_within(name: str, values: Iterable[float] | float, top: float, example: str) -> tuple[float, ...]:
    """Numbers strictly inside (0, top), none repeated, sorted; a one-line TsmixError otherwise."""
    if isinstance(values, (int, float)) and not isinstance(values, bool):
        values = (values,)
    try:
        out = tuple(float(v) for v in values)  # type: ignore[union-attr]
    except (TypeError, ValueError) as exc:
        raise TsmixError(f"{name} must be a list of numbers, got {values!r}") from exc
    if not out:
        raise TsmixError(f"{name} must not be empty; give at least one value or leave it unset")
    dup = sorted({v for v in out if out.count(v) > 1})
    if dup:
        raise TsmixError(f"{name} has duplicated values {dup}; give each once")
    bad = [v for v in out if not 0.0 < v < top]
    if bad:
        raise TsmixError(f"{name} must lie strictly between 0 and {top:g}, got {bad}; e.g. {name}={example}")
    return tuple(sorted(out))


def check_quantiles(quantiles: Iterable[float] | float) -> tuple[float, ...]:
    """Validated quantile levels, sorted: each strictly inside (0, 1), none repeated."""
    return _sorted_within("quantiles", quantiles, 1.0, "[0.1, 0.5, 0.9]")


def check_levels(level: Iterable[float] | float) -> tuple[float, ...]:
    """Validated interval levels in percent, sorted: each strictly inside (0, 100), none repeated."""
    return _sorted_within("level", level, 100.0, "[80, 95]")


def level_bounds(level: float) -> tuple[float, float]:
    """The (lower, upper) quantiles of the central ``level``% interval: 80 -> (0.1, 0.9)."""
    half = level / 200.0
    return round(0.5 - half, _DIGITS), round(0.5 + half, _DIGITS)


def resolve_quantiles(quantiles: Sequence[float] | None, level: Sequence[float] | None) -> tuple[float, ...]:
    """Sorted union of ``quantiles``, both bounds of every ``level`` and the median 0.5.

    ``level=[80, 95]`` -> (0.025, 0.1, 0.5, 0.9, 0.975). Neither given: DEFAULT_LEVELS.
    """
    qs = set(check_quantiles(quantiles)) if quantiles is not None else set()
    if level is None and quantiles is None:
        level = DEFAULT_LEVELS
    for lv in check_levels(level) if level is not None else ():
        qs.update(level_bounds(lv))
    qs.add(0.5)  # the point forecast of a quantile model is its median
    return tuple(sorted(qs))


def format_level(level: float) -> str:
    """Column label of a level: 80.0 -> '80', 97.5 -> '97.5'."""
    return f"{level:g}"


def format_quantile(q: float) -> str:
    """Column label of a quantile: 0.1 -> '0.1', 0.025 -> '0.025'."""
    return f"{q:g}"


def parse_floats(text: str) -> tuple[float, ...] | None:
    """CLI value ``"80,95"`` (or ``"80 95"``) -> (80.0, 95.0); ``none`` -> None."""
    if text.strip().lower() in ("none", "null", ""):
        return None
    try:
        return tuple(float(t) for t in text.replace(",", " ").split())
    except ValueError as exc:
        raise TsmixError(f"expected comma-separated numbers such as 80,95, got {text!r}") from exc


@dataclass(frozen=True)
class HeadConfig:
    """The output head of a forecasting network; validated on construction."""

    loss: str = "mse"  # mse | mae (point) | quantile (pinball) | normal | studentt (NLL)
    quantiles: tuple[float, ...] | None = None  # quantile levels in (0, 1); loss="quantile" only
    level: tuple[float, ...] | None = None  # interval levels in %, e.g. (80, 95); quantile loss trains them

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise TsmixError(f"unknown loss {self.loss!r}; choose one of {', '.join(LOSSES)}")
        if self.quantiles is not None:
            if self.loss != "quantile":
                raise TsmixError(
                    f"quantiles only apply to loss='quantile', not {self.loss!r}; "
                    "set loss='quantile' or drop quantiles"
                )
            object.__setattr__(self, "quantiles", check_quantiles(self.quantiles))
        if self.level is not None:
            object.__setattr__(self, "level", check_levels(self.level))

    @property
    def trained_quantiles(self) -> tuple[float, ...] | None:
        """The quantiles a quantile head outputs (None for other losses)."""
        return resolve_quantiles(self.quantiles, self.level) if self.loss == "quantile" else None
