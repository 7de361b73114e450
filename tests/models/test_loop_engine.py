"""models/loop.train_steps runs on tsmix.engine: checkpoints, bit-exact resume, finiteness checks."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from tsmix.errors import TsmixError
from tsmix.models.loop import train_steps, warmup_cosine

STEPS = 10


class Stop(Exception):
    """Raised by a callback to kill a run after some step."""


def _setup():
    """A fresh model (with dropout: the global RNG matters), optimizer, scheduler and stream."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.3), torch.nn.Linear(8, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)
    gen = torch.Generator().manual_seed(7)
    batches = ((torch.randn(6, 4, generator=gen), torch.randn(6, 1, generator=gen)) for _ in range(STEPS))
    return model, opt, sched, batches


def _run(folder, stop_after: int | None = None, seen: list | None = None, **kw):
    model, opt, sched, batches = _setup()

    def callback(step: int, loss: float) -> None:
        if seen is not None:
            seen.append((step, loss))
        if step == stop_after:
            raise Stop

    done = train_steps(model, opt, batches, lambda b: (model(b[0]) - b[1]).pow(2).mean(),
                       lr_at=lambda s: warmup_cosine(s, STEPS, 0.05, 3, 0.1), scheduler=sched, grad_clip=0.5,
                       callbacks=[callback], checkpoint_dir=folder, checkpoint_every=3, **kw)
    return model, opt, done


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    pairs = zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    return all(torch.equal(x, y) for x, y in pairs)


def test_checkpoint_written_and_run_unchanged_by_it(tmp_path):
    plain_seen, ckpt_seen = [], []
    plain, _, plain_done = _run(None, seen=plain_seen)
    model, _, done = _run(tmp_path / "run", seen=ckpt_seen)
    assert _same(plain, model) and plain_seen == ckpt_seen and done.last_loss == plain_done.last_loss
    assert done.steps == STEPS and model.training  # the loop leaves the model training, as it always did
    with safe_open(str(tmp_path / "run" / "last.safetensors"), framework="pt") as f:
        meta = json.loads(f.metadata()["tsmix"])
    assert meta["loop"]["steps"] == STEPS and meta["loop"]["finished"]


def test_resumed_run_equals_uninterrupted_bitwise(tmp_path):
    full_seen, seen = [], []
    full, full_opt, full_done = _run(tmp_path / "full", seen=full_seen)
    with pytest.raises(Stop):
        _run(tmp_path / "cut", stop_after=8, seen=seen)  # last checkpoint: after step 6
    model, opt, done = _run(tmp_path / "cut", seen=seen)
    assert _same(full, model)
    assert opt.param_groups[0]["lr"] == full_opt.param_groups[0]["lr"]
    assert [s for s, _ in seen] == [1, 2, 3, 4, 5, 6, 7, 8, 7, 8, 9, 10]  # steps 7-8 ran again
    assert seen[-4:] == full_seen[-4:] and done.steps == STEPS and done.last_loss == full_done.last_loss


def test_resume_refuses_another_fingerprint(tmp_path):
    _run(tmp_path / "run", fingerprint={"lr": 0.05})
    with pytest.raises(TsmixError, match="belongs to another run"):
        _run(tmp_path / "run", fingerprint={"lr": 0.1})


def test_nonfinite_loss_raises_before_the_update_or_trains_on_when_unchecked():
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    after_step: list[torch.Tensor] = []

    def snapshot(step: int, loss: float) -> None:
        after_step[:] = [p.detach().clone() for p in model.parameters()]

    nan = [torch.ones(1, 2), torch.full((1, 2), float("nan"))]
    with pytest.raises(TsmixError, match="non-finite training loss at step 1"):
        train_steps(model, opt, [nan[0], nan[1], nan[0]], lambda b: model(b).sum(), callbacks=[snapshot])
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), after_step, strict=True))  # not updated
    done = train_steps(model, opt, nan, lambda b: model(b).sum(), check_finite=False)
    assert done.steps == 2 and done.last_loss != done.last_loss  # nan: trained on, as asked
