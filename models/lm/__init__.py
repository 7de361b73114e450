"""Causal character language model over any registered mixer (Tiny Shakespeare by default).

``CharLM(LMConfig(mixer=...))`` stacks :class:`tsmix.Block` around ``build_mixer(name,
causal=True)``; ``train_lm`` trains it; ``python -m tsmix.models.lm`` runs both and samples.
"""

from .data import CharCorpus, CharVocab, load_corpus, sample_batch, text_path
from .model import CharLM, LMConfig
from .train import TrainConfig, evaluate, train_lm

__all__ = [
    "CharCorpus",
    "CharLM",
    "CharVocab",
    "LMConfig",
    "TrainConfig",
    "evaluate",
    "load_corpus",
    "sample_batch",
    "text_path",
    "train_lm",
]
