"""Every mixer and every forecasting model on each accelerator present, against the CPU in float64.

The kernels are device-agnostic, but a device takes other fast paths than the CPU does (SDPA's
fused kernels instead of the small-head batched matmuls, cuFFT, cuBLAS), and the CPU-only
shortcuts are switched off there. So each registered mixer, in each mode it supports, runs in
float32 on the device at an encoder's shape and is compared with the same weights in float64 on
the CPU, outputs and gradients; so is every registered forecasting model (each encoder with each
mixer); a Forecaster fitted on the device predicts what its weights do on the CPU, survives
save/load, and trains under bf16-mixed.

The CPU is always among the devices (there it checks the float32 fast paths at the encoders'
shapes against the float64 run, so CI's machines run every check), then each accelerator
present. ``TSMIX_TEST_DEVICES`` (a comma list such as ``cuda``) names the devices instead:
``benchmarks/gpu/check.sh`` runs the file on a GPU machine with ``TSMIX_TEST_DEVICES=cuda``, so a
GPU that torch cannot see fails there instead of being skipped.
"""

from __future__ import annotations

import copy
import os

import numpy as np
import pandas as pd
import pytest
import torch

import tsmix
from tsmix.forecasting import Forecaster, ForecasterConfig, available_models, build_model, model_spec
from tsmix.registry import mixer_spec


def _devices() -> list[str]:
    named = os.environ.get("TSMIX_TEST_DEVICES", "")
    if named.strip():
        return [d.strip() for d in named.split(",") if d.strip()]
    found = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    mps = getattr(torch.backends, "mps", None)
    return found + (["mps"] if mps is not None and mps.is_available() else [])


DEVICES = _devices()

# float32 against float64: relative error of a whole tensor (its norm), a few hundred ulps of
# float32 at most for one layer; the encoders stack a few layers and a RevIN.
OUT_TOL, GRAD_TOL = 1e-4, 1e-3
# (batch, tokens, width, heads): the patch encoder's ETTh shape (42 patches, D=16, 4 heads, head
# dim 4) and the variate encoder's (7 variates, wider heads)
SHAPES = {"patch": (6, 42, 16, 4), "variate": (4, 7, 64, 8)}


MIXER_CASES = [pytest.param(n, c, id=f"{n}-{'causal' if c else 'bidir'}")
               for n in tsmix.available_mixers() for c in mixer_spec(n).causal_modes]
ENCODER_MIXERS = [n for n in tsmix.available_mixers() if mixer_spec(n).supports_bidirectional]
MODEL_CASES = [pytest.param(m, x, id=f"{m}-{x}") for m in available_models()
               for x in (ENCODER_MIXERS if model_spec(m).uses_mixer else ["softmax"])]


@pytest.fixture(autouse=True)
def _exact_float32():
    """TF32 would round float32 matmuls to 10 mantissa bits on Ampere and later; compare real float32."""
    if not torch.cuda.is_available():
        yield
        return
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _compare(ref: torch.nn.Module, dev: torch.nn.Module, x: torch.Tensor, device: str, what: str) -> None:
    """``dev`` (float32 on ``device``) computes what ``ref`` (float64 on the CPU, same weights)
    does: outputs, and the gradients of a random projection by the input and every parameter."""
    xr = x.double().requires_grad_()
    xd = x.float().to(device).requires_grad_()
    yr, yd = ref(xr), dev(xd)
    assert yd.device.type == torch.device(device).type and yd.dtype == torch.float32, what
    assert yd.shape == yr.shape, what
    assert torch.isfinite(yd).all(), f"{what}: non-finite output on {device}"
    err = _rel(yd, yr)
    assert err <= OUT_TOL, f"{what}: output differs from the float64 CPU run by {err:.2e} (relative)"
    w = torch.randn(yr.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    names = ["input"] + [n for n, _ in ref.named_parameters()]
    gr = torch.autograd.grad((yr * w).sum(), [xr, *ref.parameters()], allow_unused=True)
    gd = torch.autograd.grad((yd * w.float().to(device)).sum(), [xd, *dev.parameters()], allow_unused=True)
    for name, a, b in zip(names, gd, gr):
        assert (a is None) == (b is None), f"{what}: gradient of {name} present on one device only"
        if b is None or b.norm() == 0:
            continue
        err = _rel(a, b)
        assert err <= GRAD_TOL, f"{what}: gradient of {name} differs by {err:.2e} (relative) on {device}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("name,causal", MIXER_CASES)
def test_mixer_on_device_matches_float64_cpu(name, causal, shape, device):
    b, n, d, h = SHAPES[shape]
    torch.manual_seed(0)
    ref = tsmix.build_mixer(name, d, heads=h, causal=causal).double().eval()
    dev = copy.deepcopy(ref).float().to(device)
    x = torch.randn(b, n, d, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    _compare(ref, dev, x, device, f"{name} ({'causal' if causal else 'bidirectional'}, {shape} shape)")


def _config(model: str, mixer: str) -> ForecasterConfig:
    return ForecasterConfig(model=model, mixer=mixer, lookback=48, horizon=12, d_model=16, heads=4, layers=2,
                            d_ff=32, patch_len=8, stride=4, dropout=0.0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("model,mixer", MODEL_CASES)
def test_model_on_device_matches_float64_cpu(model, mixer, device):
    torch.manual_seed(0)
    ref = build_model(_config(model, mixer), 3).double().eval()
    dev = copy.deepcopy(ref).float().to(device)
    x = torch.randn(4, 48, 3, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    _compare(ref, dev, x, device, f"{model}[{mixer}]")


def _frame(n: int = 400) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    t = np.arange(n)
    return pd.DataFrame({
        "date": pd.date_range("2024-01-01", periods=n, freq="h"),
        "a": np.sin(2 * np.pi * t / 24) + 0.1 * rng.standard_normal(n),
        "OT": 5 + np.cos(2 * np.pi * t / 12) + 0.1 * rng.standard_normal(n),
    })


def _tiny(device: str, **kw) -> Forecaster:
    return Forecaster("patchtst", mixer="fem-sm", lookback=48, horizon=12, epochs=2, d_model=16, heads=4,
                      layers=1, d_ff=32, patch_len=8, stride=4, batch_size=32, progress=False, seed=5,
                      device=device, **kw)


@pytest.mark.parametrize("device", DEVICES)
def test_forecaster_fitted_on_device_predicts_on_cpu_and_round_trips(device, tmp_path):
    f = _tiny(device).fit(_frame())
    assert f.metrics_["device"].startswith(torch.device(device).type)
    assert next(f.model_.parameters()).device.type == torch.device(device).type
    assert np.isfinite(f.metrics_["mse"])
    pred = f.predict()
    g = Forecaster.load(f.save(tmp_path / "run"))
    np.testing.assert_array_equal(g.predict().to_numpy(), pred.to_numpy())
    # the same weights on the CPU give the same forecast to float32 rounding
    model = f.model_.eval()
    cpu = copy.deepcopy(model).cpu()
    x = torch.randn(2, 48, 2, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert _rel(model(x.to(device)), cpu(x)) <= OUT_TOL


@pytest.mark.parametrize("device", DEVICES)
def test_bf16_mixed_trains_on_device(device):
    f = _tiny(device, precision="bf16-mixed").fit(_frame())
    losses = [h["train_loss"] for h in f.history]
    assert np.isfinite(losses).all() and np.isfinite(f.metrics_["mse"])
    assert all(p.dtype == torch.float32 for p in f.model_.parameters())  # weights stay fp32
