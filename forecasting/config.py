"""ForecasterConfig: every hyper-parameter of a forecasting run, flat and frozen.

One dataclass is the user-facing source of defaults: the Python API, the CLI flags (one per
field, help from the field's ``metadata``) and the presets all write onto it, ``asdict`` gives
MLflow params and ``config.json``. Fields whose sensible value depends on the model (width,
learning rate, schedule...) default to ``None`` and :meth:`ForecasterConfig.resolved` fills
them from the model's registration (its config dataclass and training defaults).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from tsmix.engine.config import PRECISIONS
from tsmix.errors import TsmixError
from tsmix.forecasting.probabilistic.spec import LOSSES, HeadConfig
from tsmix.forecasting.revin import CENTERS

FEATURES = ("M", "S", "MS")
OPTIMIZERS = ("adam", "adamw")
LR_SCHEDULES = ("type1", "type3", "onecycle", "constant")
PROTOCOLS = ("fair", "paper")
PADDINGS = ("end", "none")
TRAIN_ON = ("train", "train+val", "all")


def _models() -> list[str]:
    from tsmix.forecasting.registry import available_models

    return available_models()


def _fills() -> tuple[str, ...]:
    from tsmix.datasets import FILLS

    return tuple(FILLS)


def _date_units() -> tuple[str, ...]:
    from tsmix.datasets import DATE_UNITS

    return tuple(DATE_UNITS)


def _f(default: Any = None, help: str = "", *, factory: Any = None, choices: Any = None) -> Any:
    """A field whose ``metadata`` carries its CLI help and its choices (a tuple, or a function)."""
    meta = {"help": help, "choices": choices}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def choices_of(f: dataclasses.Field) -> tuple[str, ...] | None:
    """The allowed values of a field, or None when any value of its type goes."""
    c = f.metadata.get("choices")
    return None if c is None else tuple(c() if callable(c) else c)


@dataclass(frozen=True)
class ForecasterConfig:
    # --- what to fit
    model: str = _f("patchtst", "a registered model (tsmix.available_models())", choices=_models)
    mixer: str = _f("softmax", "any registered mixer name (tsmix.available_mixers())")
    mixer_options: dict = _f(factory=dict, help="passed to build_mixer; JSON-serializable")
    lookback: int = _f(336, "L: input window length")
    horizon: int = _f(96, "H: steps to forecast")
    features: str = _f("M", "M all->all, S target->target, MS all->target", choices=FEATURES)
    target: str | None = _f(None, "target column; None = \"OT\" if present else the last column")
    # --- reading the data (tsmix.datasets.load keywords; None = the strict default)
    fill: str | None = _f(None, "fill NaN/inf values and missing timestamps (ffill | interpolate | zero); "
                          "None = reject them", choices=_fills)
    date_format: str | None = _f(None, "strftime format of text dates; None = inferred from the whole column")
    date_unit: str | None = _f(None, "read an integer date column as epoch times in this unit (s | ms | us "
                               "| ns)", choices=_date_units)
    # --- architecture (None = the model's default: its config dataclass)
    d_model: int | None = _f(None, "token width")
    heads: int | None = _f(None, "mixer heads")
    layers: int | None = _f(None, "number of blocks")
    d_ff: int | None = _f(None, "FFN hidden width")
    dropout: float | None = _f(None, "embedding, residual-branch and FFN dropout")
    head_dropout: float = _f(0.0, "dropout before the linear head (PatchTST scripts: 0)")
    ffn: str = _f("gelu", "block FFN kind (tsmix.block.FFNS)")
    norm: str | None = _f(None, "block norm: PatchTST batch, iTransformer layer")
    prenorm: bool | None = _f(None, "False = post-norm as both official encoders")
    patch_len: int = _f(16, "PatchTST patch length")
    stride: int = _f(8, "PatchTST patch stride")
    padding_patch: str = _f(
        "end", "\"end\": replicate the last value `stride` times (official)", choices=PADDINGS
    )
    revin: bool = _f(True, "instance normalization of each window (RevIN / iTransformer use_norm)")
    revin_affine: bool = _f(False, "learnable RevIN scale/shift (official scripts: off)")
    revin_center: str = _f(
        "mean", "what RevIN subtracts from each window: its mean, or its last value (official "
        "PatchTST subtract_last)", choices=CENTERS
    )
    calendar: bool = _f(
        False, "calendar features of each step (Informer's timeF: minute/hour/day positions) as inputs: "
        "on wide data extra variate tokens over the lookback, the official iTransformer's timestamp "
        "tokens (models that mix variates only); on panels appended to the future covariates"
    )
    kernel_size: int = _f(25, "DLinear moving-average window (odd)")
    individual: bool = _f(False, "DLinear: one linear layer per channel instead of shared")
    # --- training
    epochs: int = _f(10, "maximum epochs")
    batch_size: int | None = _f(None, "training batch size")
    lr: float | None = _f(None, "peak learning rate")
    optimizer: str = _f("adam", "adam | adamw", choices=OPTIMIZERS)
    weight_decay: float = _f(0.0, "decoupled for adamw, L2 for adam")
    lr_schedule: str | None = _f(
        None, "type1 (x0.5/epoch) | type3 | onecycle (per batch) | constant", choices=LR_SCHEDULES
    )
    pct_start: float = _f(0.3, "onecycle warm-up fraction (official default 0.3; ETTm scripts 0.4)")
    first_epoch_lr_scale: float = _f(1.0, "lr factor in epoch 1 (official PatchTST: 1/25, see presets)")
    patience: int | None = _f(None, "early stopping on validation loss; best weights restored")
    grad_clip: float | None = _f(None, "max global grad norm; None = no clipping (official)")
    # engine knobs (tsmix.engine.EngineConfig); defaults are the plain loop every earlier run used
    precision: str = _f("32", "32 | bf16-mixed (autocast; weights and optimizer stay fp32); on CPU it "
                         "speeds up the patch encoder by 3% at most (benchmarks/bench_engine.txt)",
                         choices=PRECISIONS)
    compile: bool = _f(False, "torch.compile the network for training and validation; on CPU it is ~1.4x "
                       "slower per step than eager for the patch encoder (benchmarks/bench_engine.txt)")
    grad_accum: int = _f(1, "micro-batches per optimizer step (the batch is cut in this many; same update)")
    drop_last: bool = _f(True, "drop the last partial training batch (official loaders do)")
    train_on: str = _f(
        "train", "train: fit on the training windows, keep the best validation epoch; train+val: the final "
        "refit on training and validation windows for exactly `epochs` epochs (no validation, no early "
        "stopping); all: every window up to the last row, scaler fit on every row, nothing held out (the "
        "production refit)", choices=TRAIN_ON
    )
    # --- output head (tsmix.forecasting.probabilistic): what the network forecasts and is trained on
    loss: str = _f("mse", "mse | mae (point) | quantile (pinball) | normal | studentt (NLL); point "
                   "models get conformal intervals", choices=LOSSES)
    quantiles: tuple[float, ...] | None = _f(None, "quantile levels in (0, 1) a quantile model is trained "
                                             "on, e.g. 0.1,0.5,0.9 (loss=quantile only)")
    level: tuple[float, ...] | None = _f(None, "interval levels in %, e.g. 80 95: trained by loss=quantile, "
                                         "scored by evaluate (default 80 95)")
    conformal: bool = _f(True, "calibrate intervals on the validation windows (split conformal, scaled "
                         "by each window's spread): a point model's intervals, and the adjustment of a "
                         "quantile/distribution head's own bounds (CQR); off: a head's raw bounds, none for "
                         "point models")
    seed: int = _f(2021, "torch/numpy/python seeds and the shuffling generator")
    device: str = _f("auto", "auto (cuda if present else cpu) | cpu | cuda | cuda:N | mps")
    threads: int | None = _f(None, "torch.set_num_threads when given")
    # --- evaluation
    eval_protocol: str = _f(
        "fair", "fair: every test window; paper: drop last partial test batch", choices=PROTOCOLS
    )
    test_batch_size: int | None = _f(None, "paper protocol batch size; None = batch_size")
    progress: bool = _f(True, "tqdm progress bar")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            allowed = choices_of(f)
            value = getattr(self, f.name)
            if allowed is not None and value is not None:
                _choice(f.name, value, allowed)
        if not isinstance(self.mixer_options, dict):
            raise TsmixError(f"mixer_options must be a dict, got {type(self.mixer_options).__name__}")
        try:
            json.dumps(self.mixer_options)
        except (TypeError, ValueError) as exc:
            raise TsmixError(f"mixer_options must be JSON-serializable: {exc}") from exc
        for name in ("lookback", "horizon", "patch_len", "stride", "kernel_size", "epochs", "grad_accum"):
            _positive(name, getattr(self, name))
        for name in ("d_model", "heads", "layers", "d_ff", "batch_size", "test_batch_size", "threads"):
            if getattr(self, name) is not None:
                _positive(name, getattr(self, name))
        if self.patience is not None and (not isinstance(self.patience, int) or self.patience < 0):
            raise TsmixError(f"patience must be an int >= 0, got {self.patience!r}")
        if self.lr is not None and not self.lr > 0:
            raise TsmixError(f"lr must be > 0, got {self.lr!r}")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise TsmixError(f"grad_clip must be > 0 or None, got {self.grad_clip!r}")
        if not 0.0 < self.pct_start < 1.0:
            raise TsmixError(f"pct_start must be in (0, 1), got {self.pct_start!r}")
        if not self.first_epoch_lr_scale > 0:
            raise TsmixError(f"first_epoch_lr_scale must be > 0, got {self.first_epoch_lr_scale!r}")
        for name in ("dropout", "head_dropout"):
            v = getattr(self, name)
            if v is not None and not 0.0 <= v < 1.0:
                raise TsmixError(f"{name} must be in [0, 1), got {v!r}")
        if self.date_format is not None or self.date_unit is not None:
            from tsmix.datasets.dates import check_date_args

            check_date_args(self.date_format, self.date_unit)
        if self.kernel_size % 2 == 0:
            raise TsmixError(f"kernel_size must be odd (centred moving average), got {self.kernel_size}")
        head = HeadConfig(self.loss, self.quantiles, self.level)  # validated, sorted; JSON lists -> tuples
        object.__setattr__(self, "quantiles", head.quantiles)
        object.__setattr__(self, "level", head.level)
        spec = self.model_spec()
        spec.make_config(self._values(spec.fill(self._values())))  # the model's own checks

    def _values(self, fill: dict[str, Any] | None = None) -> dict[str, Any]:
        return {**{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}, **(fill or {})}

    def model_spec(self) -> Any:
        """The registration record of ``self.model`` (tsmix.forecasting.registry.ModelSpec)."""
        from tsmix.forecasting.registry import model_spec

        return model_spec(self.model)

    def resolved(self) -> ForecasterConfig:
        """A copy with every ``None`` model-dependent field set from the model's defaults."""
        fill = self.model_spec().fill(self._values())
        if self.test_batch_size is None:
            fill["test_batch_size"] = fill.get("batch_size", self.batch_size)
        return dataclasses.replace(self, **fill)

    def head(self) -> HeadConfig:
        """The output head this config trains (loss, quantiles, level)."""
        return HeadConfig(self.loss, self.quantiles, self.level)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ForecasterConfig:
        check_fields(d)
        return cls(**d)


def field_names() -> list[str]:
    return [f.name for f in dataclasses.fields(ForecasterConfig)]


def check_fields(d: dict[str, Any]) -> None:
    unknown = sorted(set(d) - set(field_names()))
    if unknown:
        raise TsmixError(
            f"unknown hyper-parameter(s) {', '.join(unknown)}; valid ones: {', '.join(field_names())}"
        )


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise TsmixError(f"{name} must be one of {', '.join(choices)}, got {value!r}")


def _positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise TsmixError(f"{name} must be a positive int, got {value!r}")
