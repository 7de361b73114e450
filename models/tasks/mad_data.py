"""The six MAD synthetic tasks (Poli et al. 2024, "Mechanistic Design and Scaling of Hybrid
Architectures"), generated as the MAD suite specifies; written from its task definitions.

Each generator returns ``(inputs, train_targets, test_targets)`` as int64 arrays of one length:
the training loss reads ``train_targets`` and the accuracy reads ``test_targets`` (``-100`` =
not scored). For the recall tasks training is next-token prediction on the whole sequence and
the score is the recalled values only; the copy, compression and memorization tasks train on
their scored positions.

Vocabulary layout (``V`` = vocab size): recall keys are ``[0, V'/2)``, values ``[V'/2, V')``
with ``V'`` the non-special tokens; special tokens sit at the top of the vocabulary.
"""

from __future__ import annotations

from itertools import permutations

import numpy as np

from tsmix.errors import TsmixError

IGNORE = -100
Instance = tuple[np.ndarray, np.ndarray, np.ndarray]  # inputs (L,), train targets (L,), test targets (L,)


def _shifted(tokens: list[int], scored: list[int]) -> Instance:
    """Next-token form: inputs tokens[:-1]; train targets tokens[1:]; test targets scored[1:]."""
    t = np.asarray(tokens, dtype=np.int64)
    s = np.asarray(scored, dtype=np.int64)
    return t[:-1], t[1:], s[1:]


def in_context_recall(rng: np.random.Generator, vocab: int = 16, seq_len: int = 128, noise_vocab: int = 0,
                      frac_noise: float = 0.0) -> Instance:
    """Key-value pairs with a per-sequence map; every repeated key's value is scored (multi-query)."""
    if seq_len % 2 or seq_len < 4:
        raise TsmixError(f"in-context recall needs an even seq_len >= 4, got {seq_len}")
    plain = vocab - noise_vocab  # key and value tokens
    if plain < 2:
        raise TsmixError(f"vocab {vocab} leaves no key/value tokens beside {noise_vocab} noise tokens")
    keys, values = np.arange(plain // 2), np.arange(plain // 2, plain)
    pairs = seq_len // 2
    keep = rng.integers(pairs)  # one pair is never noise, so a key always exists to probe
    kv: dict[int, int] = {}
    tokens: list[int] = []
    scored: list[int] = []
    for i in range(pairs - 1):
        if frac_noise > 0 and i != keep and rng.random() < frac_noise:
            tokens += [int(t) for t in rng.integers(plain, vocab, size=2)]
            scored += [IGNORE, IGNORE]
            continue
        k = int(rng.choice(keys))
        seen = k in kv
        v = kv.setdefault(k, int(rng.choice(values)))
        tokens += [k, v]
        scored += [IGNORE, v if seen else IGNORE]
    probe = int(rng.choice(list(kv)))
    tokens += [probe, kv[probe]]
    scored += [IGNORE, kv[probe]]
    return _shifted(tokens, scored)


def noisy_in_context_recall(rng: np.random.Generator, vocab: int = 32, seq_len: int = 128,
                            noise_vocab: int = 16, frac_noise: float = 0.2) -> Instance:
    """In-context recall with a fraction of the pairs replaced by tokens of a separate noise vocabulary."""
    if not 0 <= frac_noise < 1 or noise_vocab < 1:
        raise TsmixError(f"noisy recall needs 0 <= frac_noise < 1 and noise_vocab >= 1, got "
                         f"{frac_noise}, {noise_vocab}")
    return in_context_recall(rng, vocab, seq_len, noise_vocab, frac_noise)


def _motifs(tokens: np.ndarray, size: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """Every ordered ``size``-tuple of distinct tokens, shuffled."""
    out = [tuple(int(t) for t in m) for m in permutations(tokens.tolist(), size)]
    rng.shuffle(out)
    return out


def fuzzy_in_context_recall(rng: np.random.Generator, vocab: int = 16, seq_len: int = 128,
                            k_motif: int = 3, v_motif: int = 3, is_training: bool = True) -> Instance:
    """Recall where keys and values are motifs of 1..k_motif / 1..v_motif adjacent tokens.

    Test sequences use keys of exactly ``k_motif`` tokens; the left is padded to ``seq_len``.
    """
    pad = vocab - 1
    plain = vocab - 1
    keys_v, values_v = np.arange(plain // 2), np.arange(plain // 2, plain)
    k_sizes = list(range(1, k_motif + 1)) if is_training else [k_motif]
    keys = {s: _motifs(keys_v, s, rng) for s in k_sizes}
    values = {s: _motifs(values_v, s, rng) for s in range(1, v_motif + 1)}
    if any(not m for m in keys.values()) or any(not m for m in values.values()):
        raise TsmixError(f"vocab {vocab} is too small for motifs of {k_motif} key / {v_motif} value tokens")
    kp_size = int(rng.choice(k_sizes))
    k_probe = keys[kp_size][rng.integers(len(keys[kp_size]))]
    vs = int(rng.integers(1, v_motif + 1))
    v_probe = values[vs][rng.integers(len(values[vs]))]
    probe_len = len(k_probe) + len(v_probe)
    if seq_len <= 2 * probe_len + k_motif + v_motif:
        raise TsmixError(f"fuzzy recall seq_len {seq_len} is too short for motifs of {k_motif}/{v_motif}")
    probe_at = int(rng.integers(seq_len - 2 * probe_len))
    kv: dict[tuple[int, ...], tuple[int, ...]] = {k_probe: v_probe}  # the probe key keeps its value
    presented: set[tuple[int, ...]] = set()
    tokens: list[int] = []
    scored: list[int] = []
    placed = False  # the probe pair is in the sequence (on schedule or by chance)
    while len(tokens) < seq_len - probe_len - (k_motif + v_motif):
        if not placed and len(tokens) >= probe_at:
            k = k_probe
        else:
            ks = int(rng.choice(k_sizes))
            k = keys[ks][rng.integers(len(keys[ks]))]
        placed = placed or k == k_probe
        if k not in kv:
            vs = int(rng.integers(1, v_motif + 1))
            kv[k] = values[vs][rng.integers(len(values[vs]))]
        v = kv[k]
        tokens += list(k) + list(v)
        scored += [IGNORE] * len(k) + (list(v) if k in presented else [IGNORE] * len(v))
        presented.add(k)
    tokens += list(k_probe) + list(v_probe)
    scored += [IGNORE] * len(k_probe) + list(v_probe)
    n_pad = seq_len + 1 - len(tokens)
    tokens, scored = [pad] * n_pad + tokens, [IGNORE] * n_pad + scored
    return _shifted(tokens, scored)


def selective_copying(rng: np.random.Generator, vocab: int = 16, seq_len: int = 256,
                      n_copy: int = 16) -> Instance:
    """``n_copy`` tokens scattered among blanks; after the copy token, reproduce them in order."""
    blank, copy = vocab - 2, vocab - 1
    n_blank = seq_len - 2 * n_copy - 1
    if n_blank < 0 or vocab < 3:
        raise TsmixError(f"selective copying needs seq_len > 2 * n_copy and vocab >= 3, got {seq_len}, "
                         f"{n_copy}, {vocab}")
    to_copy = rng.integers(0, vocab - 2, size=n_copy)
    body = np.full(n_copy + n_blank, blank, dtype=np.int64)
    where = np.sort(rng.choice(n_copy + n_blank, size=n_copy, replace=False))
    body[where] = to_copy
    inputs = np.concatenate([body, [copy], np.full(n_copy, blank)]).astype(np.int64)
    targets = np.concatenate([np.full(n_copy + n_blank + 1, IGNORE), to_copy]).astype(np.int64)
    return inputs, targets, targets


def compression(rng: np.random.Generator, vocab: int = 16, seq_len: int = 32) -> Instance:
    """Random tokens then a compression token; the whole sequence is reconstructed from one vector."""
    tokens = np.concatenate([rng.integers(0, vocab - 1, size=seq_len - 1), [vocab - 1]]).astype(np.int64)
    return tokens, tokens, tokens


def memorization_map(vocab: int, seed: int) -> dict[int, int]:
    """The fixed key -> value map of the memorization task (keys [0, V'/2), values above)."""
    plain = vocab - 1  # the top token is the insert token
    rng = np.random.default_rng(seed)
    keys = rng.permutation(plain // 2)
    values = rng.permutation(np.arange(plain // 2, plain))
    return {int(k): int(v) for k, v in zip(keys, values)}


def memorization(rng: np.random.Generator, vocab: int = 256, seq_len: int = 32,
                 kv_map: dict[int, int] | None = None, map_seed: int = 12345) -> Instance:
    """(key, insert) pairs; at each insert token the model names the key's fixed value."""
    kv = kv_map if kv_map is not None else memorization_map(vocab, map_seed)
    keys = np.fromiter(kv, dtype=np.int64)
    k = rng.choice(keys, size=seq_len // 2)
    inputs = np.stack([k, np.full_like(k, vocab - 1)], axis=1).reshape(-1)
    targets = np.stack([np.full_like(k, IGNORE), np.array([kv[int(x)] for x in k])], axis=1).reshape(-1)
    return inputs, targets, targets
