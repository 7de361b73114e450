"""Character-level text data for the LM pipeline: Tiny Shakespeare (or any text file).

The file is found by a path join on the data folder: the ``data_dir`` argument, else
``$TSMIX_DATA_DIR``; nothing is downloaded or copied. Train/val is a contiguous split.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from tsmix.errors import TsmixError

ENV_DATA_DIR = "TSMIX_DATA_DIR"  # the shared data folder (holds tinyshakespeare/input.txt)
SHAKESPEARE = Path("tinyshakespeare") / "input.txt"


def text_path(data_dir: str | Path | None = None, name: str | Path = SHAKESPEARE) -> Path:
    """``data_dir / name`` (``data_dir`` defaults to ``$TSMIX_DATA_DIR``); a clear error if absent."""
    folder = data_dir if data_dir is not None else os.environ.get(ENV_DATA_DIR)
    if not folder:
        raise TsmixError(f"no data folder: pass data_dir (--data-dir) or set {ENV_DATA_DIR} to the folder "
                         f"holding {name}")
    path = Path(folder).expanduser() / name
    if not path.is_file():
        raise TsmixError(f"text file {path} not found: point data_dir / {ENV_DATA_DIR} at the folder "
                         f"holding {name}, or pass a text file path")
    return path


@dataclass(frozen=True)
class CharVocab:
    chars: str  # the sorted distinct characters of the corpus; index = token id

    @classmethod
    def from_text(cls, text: str) -> CharVocab:
        return cls("".join(sorted(set(text))))

    @property
    def size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> torch.Tensor:  # (L,) int64
        index = {c: i for i, c in enumerate(self.chars)}
        unknown = sorted(set(text) - index.keys())
        if unknown:
            raise TsmixError(f"characters {''.join(unknown)!r} are not in the vocabulary; "
                             f"use text made of the corpus characters")
        return torch.tensor([index[c] for c in text], dtype=torch.long)

    def decode(self, ids: torch.Tensor | list[int]) -> str:
        return "".join(self.chars[int(i)] for i in ids)


@dataclass(frozen=True)
class CharCorpus:
    vocab: CharVocab
    train: torch.Tensor  # (L_train,) int64 token ids
    val: torch.Tensor  # (L_val,) int64, the text's last val_fraction


def load_corpus(
    data_dir: str | Path | None = None, *, path: str | Path | None = None, val_fraction: float = 0.1
) -> CharCorpus:
    """Read a text (``path``, else Tiny Shakespeare under the data folder) into a char corpus."""
    if not 0.0 < val_fraction < 1.0:
        raise TsmixError(f"val_fraction must be in (0, 1), got {val_fraction}")
    file = Path(path).expanduser() if path is not None else text_path(data_dir)
    if not file.is_file():
        raise TsmixError(f"text file {file} not found: pass an existing file")
    text = file.read_text(encoding="utf-8")
    vocab = CharVocab.from_text(text)
    ids = vocab.encode(text)
    cut = int(len(ids) * (1.0 - val_fraction))
    return CharCorpus(vocab, ids[:cut], ids[cut:])


def sample_batch(
    ids: torch.Tensor, block_size: int, batch_size: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows: inputs (B, block) and next-char targets (B, block), one gather each."""
    if len(ids) <= block_size:
        raise TsmixError(f"text of {len(ids)} tokens is too short for block_size {block_size}; "
                         f"use a smaller block_size or a longer text")
    start = torch.randint(len(ids) - block_size, (batch_size,), generator=generator)  # (B,)
    offsets = torch.arange(block_size + 1)  # (block+1,)
    window = ids[start[:, None] + offsets]  # (B, block+1)
    return window[:, :-1], window[:, 1:]
