"""The task pipelines: the shared loop, capabilities, MAD / ListOps / induction generators and runs,
the result file and the ``tsmix task`` command's bad-input catalogue."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tsmix.cli import main as tsmix
from tsmix.errors import TsmixError
from tsmix.models.capabilities import capabilities, parse_options, require, routes_by_position
from tsmix.models.fit import IGNORE, FitConfig
from tsmix.models.loop import train_steps, warmup_cosine
from tsmix.models.nets import NetConfig
from tsmix.models.results import ResultFile
from tsmix.models.synthetic.transport import TransportConfig, TransportNet
from tsmix.models.tasks import mad_data as D
from tsmix.models.tasks.induction import InductionConfig, make_batch, run_induction
from tsmix.models.tasks.listops import ListOpsConfig, evaluate_tree, sample, tokens
from tsmix.models.tasks.mad import run_mad

TINY = NetConfig(dim=16, heads=2, layers=1)


def test_loop_steps_callbacks_schedule_and_nonfinite():
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    seen, lrs = [], []
    batches = [torch.ones(3, 2)] * 4
    done = train_steps(model, opt, batches, lambda b: model(b).pow(2).mean(),
                       lr_at=lambda s: warmup_cosine(s, 4, 0.1, 2, 0.0),
                       callbacks=[lambda s, loss: (seen.append(s), lrs.append(opt.param_groups[0]["lr"]))])
    assert done.steps == 4 and seen == [1, 2, 3, 4]
    assert lrs == [0.05, 0.1, 0.1, pytest.approx(0.05)]  # warmup, then cosine from lr down to 0
    with pytest.raises(TsmixError, match="non-finite training loss at step 0"):
        train_steps(model, opt, [torch.full((1, 2), float("nan"))], lambda b: model(b).sum())


def test_capabilities_decide_positions_and_modes():
    assert not capabilities("yb-spectral").causal and capabilities("yb-spectral").position_aware
    assert capabilities("softmax").causal and not capabilities("softmax").position_aware
    with pytest.raises(TsmixError, match="bidirectional only; pick one of: .*softmax"):
        require("yb-spectral", causal=True, what="MAD")
    assert TransportNet(TransportConfig(mixer="yb-spectral")).pos is None
    assert TransportNet(TransportConfig(mixer="softmax")).pos is not None
    # gla / fem-* are position-aware (a decayed scan orders tokens) but cannot route by position
    # alone: transport keeps giving them learned positions, as before the registry declared it
    for name in ("gla", "fem-sm", "fem-ssm"):
        assert capabilities(name).position_aware and not routes_by_position(name)
        assert TransportNet(TransportConfig(mixer=name, dim=8, heads=2)).pos is not None
    assert routes_by_position("yb-brickwall") and not routes_by_position("softmax")
    assert parse_options("fem-sm", ["lse=false", "beta_init=3"]) == {"lse": False, "beta_init": 3.0}


def test_mad_generators_follow_the_spec():
    rng = np.random.default_rng(0)
    x, y_train, y_test = D.in_context_recall(rng, vocab=16, seq_len=32)
    assert len(x) == 31 and np.array_equal(y_train[:-1], x[1:])  # next-token targets
    for i in np.flatnonzero(y_test != IGNORE):  # every scored value repeats the key's earlier value
        key = x[i]
        earlier = [x[j + 1] for j in range(0, i - 1) if x[j] == key and j % 2 == 0]
        assert earlier and all(v == y_test[i] for v in earlier) and key < 8 <= y_test[i]
    x, _, _ = D.noisy_in_context_recall(rng, vocab=32, seq_len=64)
    assert (x >= 16).any()  # noise tokens present
    x, _, y = D.fuzzy_in_context_recall(rng, vocab=16, seq_len=48, is_training=False)
    assert len(x) == 48 and (y != IGNORE).any()
    x, _, y = D.selective_copying(rng, vocab=16, seq_len=40, n_copy=8)
    assert np.array_equal(x[(x < 14)][:8], y[-8:]) and x[31] == 15
    x, _, y = D.compression(rng, vocab=16, seq_len=16)
    assert x[-1] == 15 and np.array_equal(x, y)
    kv = D.memorization_map(32, 1)
    x, _, y = D.memorization(rng, vocab=32, seq_len=16, kv_map=kv)
    assert all(y[i + 1] == kv[int(x[i])] for i in range(0, 16, 2)) and (x[1::2] == 31).all()


def test_mad_memorization_learns_and_compression_runs():
    net = NetConfig(dim=32, heads=2, layers=1)
    r = run_mad("memorization", net, FitConfig(steps=60, batch_size=32, lr=1e-2))
    assert r["accuracy"] > 0.5, r  # 127 facts, chance 1/256
    r = run_mad("compression", TINY, FitConfig(steps=3, batch_size=8))
    assert 0 <= r["accuracy"] <= 1 and r["steps"] == 3
    with pytest.raises(TsmixError, match="unknown MAD task"):
        run_mad("copying", TINY, FitConfig(steps=1))


def test_listops_generator():
    assert evaluate_tree(("MAX", [3, ("MIN", [7, 2]), 5])) == 5
    assert evaluate_tree(("MED", [1, 9, 4, 8])) == 6 and evaluate_tree(("SM", [7, 8, 9])) == 4
    assert evaluate_tree(("SM", [7, 8, 9]), modulus=20) == 4
    assert tokens(("MAX", [1, ("SM", [2, 3])])) == ["[MAX", "1", "[SM", "2", "3", "]", "]"]
    cfg = ListOpsConfig(min_length=10, max_length=30)
    ids, y = sample(cfg, 50, 0)
    lengths = (ids != 0).sum(1)
    assert ((lengths >= 10) & (lengths <= 30)).all() and (ids[:, -1] == 1).all() and y.max() <= 9
    with pytest.raises(TsmixError, match="unknown ListOps operator"):
        ListOpsConfig(ops=("MAX", "PROD"))


def test_induction_answers_and_length_generalization_run():
    cfg = InductionConfig(train_length=16, test_lengths=(16, 64))
    x, y = make_batch(cfg, 32, 16, torch.Generator().manual_seed(0))
    trig = (x[:, :-1] == cfg.vocab).int().argmax(1)
    assert torch.equal(x[torch.arange(32), trig + 1], y) and (x[:, -1] == cfg.vocab).all()
    rec = InductionConfig(kind="recall", train_length=16)
    x, y = make_batch(rec, 8, 16, torch.Generator().manual_seed(0))
    for row, ans in zip(x, y):
        pos = [j for j in range(0, 14, 2) if row[j] == row[-1]]
        assert pos and all(row[j + 1] == ans for j in pos)
    r = run_induction(cfg, NetConfig(mixer="yb-spectral", causal=False, dim=16, layers=1),
                      FitConfig(steps=3, batch_size=8))
    assert set(r) >= {"acc_L16", "acc_L64"} and r["acc_L64"] is not None
    r = run_induction(cfg, NetConfig(mixer="softmax", causal=False, dim=16, layers=1, positions="learned",
                                     max_len=16), FitConfig(steps=2, batch_size=8))
    assert r["acc_L64"] is None  # learned positions cannot run longer: no score instead of a crash


def test_result_file_resumes_and_refuses_foreign_csv(tmp_path):
    f = ResultFile(tmp_path / "r.csv")
    f.put({"task": "t", "variant": "v", "mixer": "m", "seed": 0, "accuracy": 0.5, "config": {"a": 1}})
    f.put({"task": "t", "variant": "v", "mixer": "m", "seed": 1, "accuracy": 0.7})
    f.put({"task": "t", "variant": "v", "mixer": "m", "seed": 0, "accuracy": 0.6})  # replaces seed 0
    rows = f.rows()
    assert len(rows) == 2 and f.done("t", "v", "m", 1) and not f.done("t", "v", "m", 2)
    assert {r["accuracy"] for r in rows} == {"0.6", "0.7"}
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    with pytest.raises(TsmixError, match="not a tsmix result file"):
        ResultFile(tmp_path / "x.csv").rows()


def test_task_cli_writes_rows_resumes_and_rejects_bad_input(tmp_path, capsys):
    out = tmp_path / "rows.csv"
    args = ["task", "induction", "--mixers", "linear", "--steps", "2", "--dim", "16", "--layers", "1",
            "--train-length", "16", "--test-lengths", "16,32", "--out", str(out),
            "--table", str(tmp_path / "t.md")]
    assert tsmix(args) == 0
    assert tsmix(args) == 0  # resumed: the finished run is skipped
    assert "done, skipped" in capsys.readouterr().out and len(ResultFile(out).rows()) == 1
    assert "| linear | induction-train16 |" in (tmp_path / "t.md").read_text()
    assert tsmix(args + ["-o", "bias=false"]) == 0  # an ablation is its own row, labelled by its options
    assert sorted(r["mixer"] for r in ResultFile(out).rows()) == ["linear", "linear[bias=false]"]
    for bad, msg in ((["task", "nope"], "unknown task 'nope'"),
                     (["task", "mad", "--mixers", "yb-spectral"], "bidirectional only"),
                     (["task", "mad", "--tasks", "copying"], "unknown MAD task"),
                     (["task", "listops", "--mixers", "softmax", "-o", "bias=maybe"], "must be bool"),
                     (["task", "lm-overfit", "--mixers", "yb-brickwall"], "bidirectional only")):
        assert tsmix(bad) == 2
        err = capsys.readouterr().err.strip()
        assert msg in err and len(err.splitlines()) == 1, err
