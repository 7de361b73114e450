"""Engine units: schedules, accumulation, bf16, step-based checkpoints, codec, folder lock."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from tsmix.engine import EngineConfig, SampledBatches, Task, WindowBatches, epoch_rule, fit, one_cycle
from tsmix.engine import checkpoint as ckpt
from tsmix.errors import TsmixError
from tsmix.forecasting.trainer import epoch_lr


class Pairs:
    """A toy dataset: y = x @ w + noise, with the WindowSet ``gather`` interface."""

    def __init__(self, n: int = 96, dtype: torch.dtype = torch.float64) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 6, generator=g, dtype=dtype)  # (n, 6)
        self.y = self.x @ torch.randn(6, 2, generator=g, dtype=dtype) + 0.1 * torch.randn(n, 2, generator=g,
                                                                                           dtype=dtype)

    def __len__(self) -> int:
        return len(self.x)

    def gather(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[idx], self.y[idx]


def mse(model: nn.Module, batch) -> torch.Tensor:
    x, y = batch
    return nn.functional.mse_loss(model(x), y)


def val_of(ds: Pairs):
    def validate(model: nn.Module, rank: int, world: int) -> tuple[torch.Tensor, int]:
        with torch.no_grad():
            return nn.functional.mse_loss(model(ds.x), ds.y, reduction="sum"), ds.y.numel()
    return validate


def linear_task(dtype=torch.float64, batch_size=32, dropout=0.0, lr=0.05) -> Task:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Dropout(dropout), nn.Linear(6, 2)).to(dtype)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    ds = Pairs(dtype=dtype)
    return Task(model, opt, WindowBatches(ds, batch_size, shuffle=True), mse, val_of(ds),
                epoch_rule(opt, "type1"), {"toy": 1})


# ---------------------------------------------------------------------------------------- schedules
@pytest.mark.parametrize("rule,scale", [("type1", 1.0), ("type3", 1 / 25), ("constant", 1.0), ("type3", 1.0)])
def test_epoch_rules_as_lambdalr_equal_the_official_values(rule, scale):
    lr = 1e-2
    official = {  # the official loops' adjust_learning_rate, 1-based epoch e, after the first-epoch quirk
        "type1": lambda e: lr * 0.5 ** (e - 1),
        "type3": lambda e: lr if e < 3 else lr * 0.9 ** (e - 3),
        "constant": lambda e: lr,
    }[rule]
    opt = torch.optim.Adam([nn.Parameter(torch.zeros(1))], lr=lr)
    sched = epoch_rule(opt, rule, scale).scheduler
    got = []
    for _ in range(8):
        got.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    want = [lr * scale] + [official(k) for k in range(1, 8)]
    assert got == want  # exact: base_lr * factor is the official expression
    assert got == [epoch_lr(rule, lr, k, scale) for k in range(8)]


def test_one_cycle_is_torchs():
    opt = torch.optim.Adam([nn.Parameter(torch.zeros(1))], lr=1e-3)
    s = one_cycle(opt, 1e-3, epochs=2, steps_per_epoch=5, pct_start=0.4)
    assert s.interval == "step" and isinstance(s.scheduler, torch.optim.lr_scheduler.OneCycleLR)
    assert s.scheduler.total_steps == 10 and opt.param_groups[0]["lr"] == pytest.approx(1e-3 / 25)


def test_unknown_rule_is_a_tsmix_error():
    with pytest.raises(TsmixError, match="no per-epoch lr rule 'cosine'"):
        epoch_rule(torch.optim.Adam([nn.Parameter(torch.zeros(1))]), "cosine")


# ---------------------------------------------------------------------------------------- numerics
def test_accumulating_k_micro_batches_equals_one_big_batch():
    results = []
    for accum in (1, 4):
        task = linear_task(batch_size=30)  # 96 windows: three batches of 30 and a last one of 6
        fit(task, EngineConfig(epochs=3, seed=5, grad_accum=accum, progress=False, grad_clip=0.5))
        results.append([p.detach().clone() for p in task.model.parameters()])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
        assert not torch.equal(a, torch.zeros_like(a))


def test_bf16_mixed_trains_with_finite_loss():
    task32, task16 = linear_task(torch.float32), linear_task(torch.float32)
    r32 = fit(task32, EngineConfig(epochs=3, progress=False))
    r16 = fit(task16, EngineConfig(epochs=3, progress=False, precision="bf16-mixed"))
    losses = [h["train_loss"] for h in r16.history] + [h["val_loss"] for h in r16.history]
    assert all(math.isfinite(v) for v in losses)
    assert r16.history[-1]["train_loss"] < r16.history[0]["train_loss"]  # it learns
    assert r16.history[0]["train_loss"] != r32.history[0]["train_loss"]  # autocast really ran in bf16
    assert abs(r16.best_val - r32.best_val) < 0.05 * r32.best_val
    assert all(p.dtype == torch.float32 for p in task16.model.parameters())  # master weights stay fp32


def test_non_finite_loss_names_the_epoch():
    task = linear_task(lr=1e30)
    with pytest.raises(TsmixError, match="epoch 1"):
        fit(task, EngineConfig(epochs=2, progress=False, nan_check_every=1))


# ---------------------------------------------------------------------------------------- checkpoints
class Crash(Exception):
    pass


def sampled_task(crash_at: int | None = None) -> Task:
    """A step-based pipeline (like the LM's): fresh samples each step, dropout, OneCycleLR per step."""
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(4, 16), nn.Dropout(0.2), nn.Linear(16, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    w = torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    calls = {"n": 0}

    def sample(n: int, g: torch.Generator):
        x = torch.randn(n, 4, generator=g)
        return x, x @ w

    def loss(m: nn.Module, batch) -> torch.Tensor:
        calls["n"] += 1
        if calls["n"] == crash_at:
            raise Crash  # stands in for a kill in the middle of an epoch
        return mse(m, batch)

    xv = torch.randn(64, 4, generator=torch.Generator().manual_seed(9))

    def validate(m: nn.Module, rank: int, world: int):
        with torch.no_grad():
            return nn.functional.mse_loss(m(xv), xv @ w, reduction="sum"), 64

    data = SampledBatches(sample, batch_size=16, steps=50, steps_per_epoch=20)  # epochs of 20, 20, 10
    return Task(model, opt, data, loss, validate, one_cycle(opt, 1e-2, 1, 50), {"sampled": 1})


def test_step_checkpoints_resume_inside_an_epoch_bitwise(tmp_path):
    cfg = EngineConfig(epochs=3, seed=3, progress=False, checkpoint_dir=tmp_path / "ck", checkpoint_every=7,
                       resume=True, restore_best=False)
    ref_task = sampled_task()
    ref = fit(ref_task, EngineConfig(epochs=3, seed=3, progress=False, restore_best=False))
    with pytest.raises(Crash):
        fit(sampled_task(crash_at=31), cfg)  # step 31 of 50: checkpoint at step 28, inside epoch 2
    _, meta = ckpt.read(tmp_path / "ck" / ckpt.FILENAME)
    assert (meta["loop"]["epoch"], meta["loop"]["batch"], meta["loop"]["steps"]) == (1, 8, 28)
    task = sampled_task()
    res = fit(task, cfg)
    assert res.steps == ref.steps == 50 and res.resumed_from == 2
    # CPU time: the crashed process's share up to its checkpoint is carried over, then this one's added
    assert ref.resumed_cpu_seconds == 0 < ref.cpu_seconds
    assert 0 < res.resumed_cpu_seconds < res.cpu_seconds
    assert [(h["train_loss"], h["val_loss"], h["lr"]) for h in res.history] == \
        [(h["train_loss"], h["val_loss"], h["lr"]) for h in ref.history]
    for (k, a), b in zip(task.model.state_dict().items(), ref_task.model.state_dict().values()):
        assert torch.equal(a, b), k


def test_codec_round_trip_is_exact():
    opt = torch.optim.Adam(nn.Linear(3, 2).parameters(), betas=(0.8, 0.9))
    opt.zero_grad()
    sum(p.sum() for group in opt.param_groups for p in group["params"]).backward()
    opt.step()
    obj = {"opt": opt.state_dict(), "np": np.random.get_state(), "inf": math.inf, "t": (1, None, "a"),
           "g": torch.Generator().manual_seed(4).get_state()}
    tensors: dict = {}
    enc = ckpt.encode(obj, tensors, "x")
    back = ckpt.decode(__import__("json").loads(__import__("json").dumps(enc)), tensors)
    assert back["opt"]["state"].keys() == {0, 1} and back["opt"]["param_groups"][0]["betas"] == (0.8, 0.9)
    assert torch.equal(back["opt"]["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])
    assert back["np"][0] == "MT19937" and back["np"][1].dtype == np.uint32
    assert np.array_equal(back["np"][1], obj["np"][1])
    assert back["inf"] == math.inf and back["t"] == (1, None, "a")
    assert torch.equal(back["g"], obj["g"])
    with pytest.raises(TsmixError, match="cannot store a object"):
        ckpt.encode(object(), {}, "x")


def test_folder_in_use_is_refused_and_stale_temp_files_removed(tmp_path):
    (tmp_path / f"{ckpt.TMP_PREFIX}123-abc").write_bytes(b"half")
    with ckpt.CheckpointDir(tmp_path):
        assert not list(tmp_path.glob(f"{ckpt.TMP_PREFIX}*"))
        with pytest.raises(TsmixError, match="in use by another training run"):
            ckpt.CheckpointDir(tmp_path).__enter__()


def test_unreadable_checkpoint_is_a_tsmix_error(tmp_path):
    (tmp_path / ckpt.FILENAME).write_bytes(b"not a safetensors file")
    with pytest.raises(TsmixError, match="unreadable"):
        ckpt.read(tmp_path / ckpt.FILENAME)
    with pytest.raises(TsmixError, match="resume needs a checkpoint folder"):
        EngineConfig(epochs=1, resume=True)
