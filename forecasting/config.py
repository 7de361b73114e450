"""ForecasterConfig: every hyper-parameter of a forecasting run, flat and frozen.

One dataclass is the single source of defaults: the Python API, the CLI flags and the
presets all write onto it, ``asdict`` gives MLflow params and ``config.json``. Fields whose
sensible value depends on the model (width, learning rate, schedule...) default to ``None``
and :meth:`ForecasterConfig.resolved` fills them from :data:`MODEL_DEFAULTS`.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from tsmix.errors import TsmixError

MODEL_NAMES = ("patchtst", "itransformer", "dlinear")
FEATURES = ("M", "S", "MS")
OPTIMIZERS = ("adam", "adamw")
LR_SCHEDULES = ("type1", "type3", "onecycle", "constant")
PROTOCOLS = ("fair", "paper")
PADDINGS = ("end", "none")

# Model-dependent defaults filled in by ``resolved()`` where a field is None. PatchTST's are
# the official ETTh recipe (small and fast); iTransformer's the official ETT scripts' (2 layers,
# width 128); DLinear's the ETTh1 script's. Architecture fields DLinear does not use stay None.
MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "patchtst": dict(
        d_model=16, heads=4, layers=3, d_ff=128, dropout=0.3, norm="batch", prenorm=False,
        batch_size=128, lr=1e-4, lr_schedule="type3", patience=10,
    ),
    "itransformer": dict(
        d_model=128, heads=8, layers=2, d_ff=128, dropout=0.1, norm="layer", prenorm=False,
        batch_size=32, lr=1e-4, lr_schedule="type1", patience=3,
    ),
    "dlinear": dict(batch_size=32, lr=0.005, lr_schedule="type1", patience=3),
}


@dataclass(frozen=True)
class ForecasterConfig:
    # --- what to fit
    model: str = "patchtst"  # patchtst | itransformer | dlinear
    mixer: str = "softmax"  # any registered mixer name (tsmix.available_mixers())
    mixer_options: dict = field(default_factory=dict)  # passed to build_mixer; JSON-serializable
    lookback: int = 336  # L: input window length
    horizon: int = 96  # H: steps to forecast
    features: str = "M"  # M all->all, S target->target, MS all->target
    target: str | None = None  # target column; None = "OT" if present else the last column
    # --- encoder architecture (None = the model's default, see MODEL_DEFAULTS)
    d_model: int | None = None  # token width
    heads: int | None = None  # mixer heads
    layers: int | None = None  # number of blocks
    d_ff: int | None = None  # FFN hidden width
    dropout: float | None = None  # embedding, residual-branch and FFN dropout
    head_dropout: float = 0.0  # dropout before the linear head (PatchTST scripts: 0)
    ffn: str = "gelu"  # block FFN kind (tsmix.block.FFNS)
    norm: str | None = None  # block norm: PatchTST batch, iTransformer layer
    prenorm: bool | None = None  # False = post-norm as both official encoders
    patch_len: int = 16  # PatchTST patch length
    stride: int = 8  # PatchTST patch stride
    padding_patch: str = "end"  # "end": replicate the last value `stride` times (official)
    revin: bool = True  # instance normalization of each window (RevIN / iTransformer use_norm)
    revin_affine: bool = False  # learnable RevIN scale/shift (official scripts: off)
    kernel_size: int = 25  # DLinear moving-average window (odd)
    individual: bool = False  # DLinear: one linear layer per channel instead of shared
    # --- training
    epochs: int = 10  # maximum epochs
    batch_size: int | None = None  # training batch size
    lr: float | None = None  # peak learning rate
    optimizer: str = "adam"  # adam | adamw
    weight_decay: float = 0.0  # decoupled for adamw, L2 for adam
    lr_schedule: str | None = None  # type1 (x0.5/epoch) | type3 | onecycle (per batch) | constant
    pct_start: float = 0.3  # onecycle warm-up fraction (official default 0.3; ETTm scripts 0.4)
    first_epoch_lr_scale: float = 1.0  # lr factor in epoch 1 (official PatchTST: 1/25, see presets)
    patience: int | None = None  # early stopping on validation loss; best weights restored
    grad_clip: float | None = None  # max global grad norm; None = no clipping (official)
    drop_last: bool = True  # drop the last partial training batch (official loaders do)
    seed: int = 2021  # torch/numpy/python seeds and the shuffling generator
    device: str = "auto"  # auto (cuda if present else cpu) | cpu | cuda | cuda:N | mps
    threads: int | None = None  # torch.set_num_threads when given
    # --- evaluation
    eval_protocol: str = "fair"  # fair: every test window; paper: drop last partial test batch
    test_batch_size: int | None = None  # paper protocol batch size; None = batch_size
    progress: bool = True  # tqdm progress bar

    def __post_init__(self) -> None:
        _choice("model", self.model, MODEL_NAMES)
        _choice("features", self.features, FEATURES)
        _choice("optimizer", self.optimizer, OPTIMIZERS)
        _choice("eval_protocol", self.eval_protocol, PROTOCOLS)
        _choice("padding_patch", self.padding_patch, PADDINGS)
        if self.lr_schedule is not None:
            _choice("lr_schedule", self.lr_schedule, LR_SCHEDULES)
        if not isinstance(self.mixer_options, dict):
            raise TsmixError(f"mixer_options must be a dict, got {type(self.mixer_options).__name__}")
        try:
            json.dumps(self.mixer_options)
        except (TypeError, ValueError) as exc:
            raise TsmixError(f"mixer_options must be JSON-serializable: {exc}") from exc
        for name in ("lookback", "horizon", "patch_len", "stride", "kernel_size", "epochs"):
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
        if self.kernel_size % 2 == 0:
            raise TsmixError(f"kernel_size must be odd (centred moving average), got {self.kernel_size}")
        if self.model == "patchtst" and self.patch_len > self.lookback:
            raise TsmixError(
                f"patch_len {self.patch_len} is longer than lookback {self.lookback}; lower --patch-len"
            )

    def resolved(self) -> ForecasterConfig:
        """A copy with every ``None`` model-dependent field set from MODEL_DEFAULTS."""
        fill = {k: v for k, v in MODEL_DEFAULTS[self.model].items() if getattr(self, k) is None}
        if self.test_batch_size is None:
            fill["test_batch_size"] = fill.get("batch_size", self.batch_size)
        return dataclasses.replace(self, **fill)

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
