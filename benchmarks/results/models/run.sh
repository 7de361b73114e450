#!/usr/bin/env bash
# The exact commands behind the tables in this folder (one CPU thread each; rows resume if re-run).
set -euo pipefail
cd "$(dirname "$0")"
T="--threads 1"
BIDIR=$(tsmix mixers --json | python -c "import json,sys; print(','.join(r['name'] for r in json.load(sys.stdin) if r['bidirectional']))")
CAUSAL=$(tsmix mixers --json | python -c "import json,sys; print(','.join(r['name'] for r in json.load(sys.stdin) if r['causal']))")
# vision: digits, patch tokens, every bidirectional mixer; sequential pixels (64 tokens): every causal mixer
# causally, the bidirectional-only YB mixers bidirectionally
tsmix vision --dataset digits --mixers "$BIDIR" --epochs 2 --out vision.csv $T
tsmix vision --dataset digits --mode pixel --causal --mixers "$CAUSAL" --epochs 2 --out vision.csv $T
tsmix vision --dataset digits --mode pixel --mixers yb-spectral,yb-brickwall --epochs 2 --out vision.csv --table vision.md $T
# induction heads, trained at 64 tokens, tested at 64 / 256 / 1024 (bidirectional, sinusoidal positions)
tsmix task induction --mixers yb-spectral,softmax,linear --out induction.csv --table induction.md $T
# ListOps: the recurrent energy mixers as one bare block (their own MLP), softmax as 2 GPT blocks
tsmix task listops --mixers nrgpt,gpt-rec-parallel --layers 1 --ffn none --out listops.csv $T
tsmix task listops --mixers softmax --out listops.csv --table listops.md $T
# MAD, six tasks, every causal mixer, seeds 0 and 1 (positions by capability)
tsmix task mad --mixers "$CAUSAL" --seeds 0,1 --out mad.csv --table mad.md $T
# FEM C/L/T/G leave-one-out ablation on all six tasks, learned positions for every row
A="--positions learned --out mad_ablation.csv"
tsmix task mad --mixers fem-sm $A $T
for O in cond=false lse=false temperature=false outer_gate=false; do
  tsmix task mad --mixers fem-sm -o "$O" $A --table mad_ablation.md $T
done
# Shakespeare over-fitting: first 20,000 train characters, 400 steps, two sizes at equal parameters
for D in 64 128; do
  tsmix task lm-overfit --mixers nrgpt --dim $D --layers 1 --ffn none --norm none -o ff_mult=10 --out lm_overfit.csv $T
  tsmix task lm-overfit --mixers gpt-rec-parallel --dim $D --layers 1 --ffn none --norm none --out lm_overfit.csv $T
  tsmix task lm-overfit --mixers softmax --dim $D --layers 1 --out lm_overfit.csv --table lm_overfit.md $T
done
# curvature re-run off the Bayes ceiling (harder boundary sin(5 theta), noise 0.05, 3 seeds): see
# ../../curvature/README.md
python ../../curvature/run.py --seeds 3 --tasks curved --noise 0.05 --frequency 5 --out ../../curvature/hard \
  --variants "ungated,silu,mult a=0.25,mult a=0.5,mult a=0.75,sigmoid (mult a=1)"
