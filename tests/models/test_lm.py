"""The causal char-LM pipeline: data lookup, causality over every causal mixer, training on
Tiny Shakespeare (the loss falls for nrgpt, gpt-rec-parallel and softmax), generation, CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from tsmix.errors import TsmixError
from tsmix.models.capabilities import parse_options
from tsmix.models.lm import (
    CharLM,
    CharVocab,
    LMConfig,
    TrainConfig,
    evaluate,
    load_corpus,
    sample_batch,
    text_path,
    train_lm,
)
from tsmix.models.lm.cli import main
from tsmix.registry import available_mixers, mixer_spec

CAUSAL_MIXERS = [n for n in available_mixers() if mixer_spec(n).supports_causal]
# The recurrent mixers carry their own MLP and recurrence: one bare Block (no FFN, no norm).
RECURRENT = dict(layers=1, ffn="none", norm="none")


@pytest.fixture(scope="module")
def shakespeare_dir() -> Path:
    env = os.environ.get("TSMIX_DATA_DIR")
    shared = Path(__file__).resolve().parents[2].parent / "shared" / "data"
    for folder in ([Path(env)] if env else []) + [shared]:
        if (folder / "tinyshakespeare" / "input.txt").is_file():
            return folder
    pytest.skip("tinyshakespeare not found: set TSMIX_DATA_DIR to the shared data folder")


@pytest.fixture(scope="module")
def corpus(shakespeare_dir):
    return load_corpus(shakespeare_dir)


def test_vocab_round_trip_and_unknown_characters():
    vocab = CharVocab.from_text("hello world")
    assert vocab.chars == " dehlorw" and vocab.size == 8
    assert vocab.decode(vocab.encode("low door")) == "low door"
    with pytest.raises(TsmixError, match="not in the vocabulary"):
        vocab.encode("xyz")


def test_text_path_lookup(tmp_path, monkeypatch):
    (tmp_path / "tinyshakespeare").mkdir()
    (tmp_path / "tinyshakespeare" / "input.txt").write_text("abc")
    assert text_path(tmp_path) == tmp_path / "tinyshakespeare" / "input.txt"
    monkeypatch.setenv("TSMIX_DATA_DIR", str(tmp_path))
    assert text_path() == tmp_path / "tinyshakespeare" / "input.txt"
    with pytest.raises(TsmixError, match="TSMIX_DATA_DIR"):
        text_path(tmp_path / "nowhere")
    monkeypatch.delenv("TSMIX_DATA_DIR")
    with pytest.raises(TsmixError, match="TSMIX_DATA_DIR"):
        text_path()


def test_corpus_split_and_batches(corpus):
    assert corpus.vocab.size == 65  # Tiny Shakespeare's characters
    n = len(corpus.train) + len(corpus.val)
    assert abs(len(corpus.val) / n - 0.1) < 1e-3
    x, y = sample_batch(corpus.train, 16, 4, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 16)
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one
    with pytest.raises(TsmixError, match="too short"):
        sample_batch(corpus.train[:10], 16, 4, torch.Generator())


@pytest.mark.parametrize("mixer", CAUSAL_MIXERS)
def test_lm_is_causal_for_every_causal_mixer(mixer):
    torch.manual_seed(0)
    config = LMConfig(mixer=mixer, vocab_size=11, block_size=12, dim=16, heads=2, layers=2)
    lm = CharLM(config).double().eval()
    idx = torch.randint(0, 11, (2, 12))
    idx2 = idx.clone()
    idx2[:, 7:] = (idx2[:, 7:] + 1) % 11
    with torch.no_grad():
        a, b = lm(idx)[0], lm(idx2)[0]
    torch.testing.assert_close(a[:, :7], b[:, :7], rtol=1e-10, atol=1e-10)
    assert not torch.allclose(a[:, 7:], b[:, 7:])


@pytest.mark.parametrize(
    "mixer,layout",
    [("nrgpt", RECURRENT), ("gpt-rec-parallel", RECURRENT), ("softmax", dict(layers=2))],
)
def test_loss_falls_on_tinyshakespeare(corpus, mixer, layout):
    torch.manual_seed(0)
    lm = CharLM(LMConfig(mixer=mixer, vocab_size=corpus.vocab.size, block_size=32, dim=32, heads=2, **layout))
    cfg = TrainConfig(steps=60, batch_size=16, lr=1e-2, warmup=5, eval_every=60, eval_batches=4)
    before = evaluate(lm, corpus.val, cfg.eval_batches, cfg.batch_size)
    history = train_lm(lm, corpus, cfg)
    assert before > 3.8  # ~ln 65 at init
    # below the unigram entropy of the text (3.31 nats): the model reads its context
    assert history[-1]["val_loss"] < 3.2, history
    assert history[-1]["step"] == 60 and history[-1]["seconds"] > 0
    if mixer == "nrgpt":
        # the trained recurrent block still descends on real hidden states (causal cascade)
        block_in = lm.hidden_states(sample_batch(corpus.val, 32, 4, torch.Generator().manual_seed(1))[0])[0]
        with torch.no_grad():
            trace = lm.mixers()[0].energy_trace(block_in)  # (T+1, B, N)
        assert (trace[1:, :, 0] < trace[:-1, :, 0]).all()
        assert (trace[-1].sum(-1) < trace[0].sum(-1)).all()
        assert lm.mixers()[0].diagnostics()["energy_rise_fraction"] == 0.0


def test_generate(corpus):
    torch.manual_seed(0)
    lm = CharLM(LMConfig(vocab_size=corpus.vocab.size, block_size=8, dim=16, heads=2, layers=1)).eval()
    prompt = corpus.vocab.encode("ROMEO:").unsqueeze(0)
    out = lm.generate(prompt, 20, generator=torch.Generator().manual_seed(0), top_k=5)
    assert out.shape == (1, 26) and torch.equal(out[:, :6], prompt)  # context longer than block_size
    greedy = [lm.generate(prompt, 10, temperature=0.0) for _ in range(2)]
    assert torch.equal(*greedy)
    assert len(corpus.vocab.decode(out[0])) == 26
    with pytest.raises(TsmixError, match="block_size"):
        lm(torch.zeros(1, 9, dtype=torch.long))


def test_cli_trains_and_writes_json(tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("to be or not to be, that is the question. " * 40)
    out = tmp_path / "run.json"
    rc = main(["--text", str(text), "--mixer", "nrgpt", "--layers", "1", "--ffn", "none", "--norm", "none",
               "-o", "steps=2", "-o", "ff=ff2w", "--dim", "16", "--heads", "2", "--block-size", "16",
               "--steps", "4", "--eval-every", "2", "--eval-batches", "1", "--batch-size", "4",
               "--sample", "10", "--json", str(out)])
    assert rc == 0
    result = json.loads(out.read_text())
    assert result["lm"]["mixer_options"] == {"steps": 2, "ff": "ff2w"}
    assert [r["step"] for r in result["history"]] == [2, 4]
    assert "layer0.energy_end" in result["diagnostics"] and len(result["sample"]) == 11
    assert "step     4" in capsys.readouterr().out
    assert main(["--text", str(tmp_path / "missing.txt")]) == 2
    assert parse_options("nrgpt", ["steps=3", "eta=free"]) == {"steps": 3, "eta": "free"}
    with pytest.raises(TsmixError, match="KEY=VALUE"):
        parse_options("nrgpt", ["steps"])
    with pytest.raises(TsmixError, match="must be int"):
        parse_options("nrgpt", ["steps=four"])
    assert main(["--text", str(text), "--mixer", "yb-spectral"]) == 2  # bidirectional only: one line


def test_overfit_run_scores_train_and_val_alike():
    from tsmix.models.lm.data import CharCorpus
    from tsmix.models.lm.overfit import prefix_corpus, run_overfit

    vocab = CharVocab.from_text("abcd")
    gen = torch.Generator().manual_seed(0)
    train = torch.arange(400) % 4  # periodic: learnable, so the training loss falls under ln 4
    corpus = CharCorpus(vocab, train, torch.randint(0, 4, (200,), generator=gen))
    with pytest.raises(TsmixError, match="train_chars 8 must exceed block_size 16"):
        prefix_corpus(corpus, 8, 16)
    assert len(prefix_corpus(corpus, 100, 16).train) == 100 and len(prefix_corpus(corpus, 100, 16).val) == 200
    lm = LMConfig(vocab_size=4, block_size=16, dim=16, heads=2, layers=1)
    res = run_overfit(lm, TrainConfig(steps=40, batch_size=8, eval_every=20, eval_batches=2), corpus, 100)
    assert res["gap"] == pytest.approx(res["val_loss"] - res["train_loss"])
    assert res["train_loss"] < 1.0 < res["val_loss"]  # learns the periodic prefix; random val stays ~ln 4
    assert res["best_val"] <= res["val_loss"] + 1e-12 and res["steps"] == 40
