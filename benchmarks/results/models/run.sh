#!/usr/bin/env bash
# The exact commands behind the tables in this folder (one CPU thread each; rows resume if re-run).
set -euo pipefail
cd "$(dirname "$0")"
T="--threads 1"
BIDIR=$(tsmix mixers --json | python -c "import json,sys; print(','.join(r['name'] for r in json.load(sys.stdin) if r['bidirectional']))")
# vision: digits, patch tokens, every bidirectional mixer; sequential pixels (64 tokens) for a few causal ones
tsmix vision --dataset digits --mixers "$BIDIR" --epochs 2 --out vision.csv $T
tsmix vision --dataset digits --mode pixel --causal --mixers softmax,linear,gla,fem-sm --epochs 2 --out vision.csv $T
tsmix vision --dataset digits --mode pixel --mixers yb-spectral --epochs 2 --out vision.csv --table vision.md $T
# induction heads, trained at 64 tokens, tested at 64 / 256 / 1024 (bidirectional, sinusoidal positions)
tsmix task induction --mixers yb-spectral,softmax,linear --out induction.csv --table induction.md $T
# ListOps: the recurrent energy mixers as one bare block (their own MLP), softmax as 2 GPT blocks
tsmix task listops --mixers nrgpt,gpt-rec-parallel --layers 1 --ffn none --out listops.csv $T
tsmix task listops --mixers softmax --out listops.csv --table listops.md $T
# MAD, six tasks, causal mixers
tsmix task mad --mixers softmax,fem-sm,gla --out mad.csv --table mad.md $T
