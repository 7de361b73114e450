#!/usr/bin/env bash
# The GPU checks of issues #21 and #22, prepared to run on a lent GPU machine (the `device` tool).
# Here first: `bash benchmarks/gpu/prepare.sh` (wheels and data into ignored folders), then one call
# that fits the session's 15 device-minutes (a machine start takes one or two of them):
#   run(command="PAPER_SECONDS=420 SPEED_UNTIL=560 bash benchmarks/gpu/check.sh paper tests speed",
#       carry=[".whl", ".gpu-data"], timeout_s=595)
# or, for the rest of issue #22's Weather variate grid (the runs that cost CPU-hours here):
#   run(command="GRID='--datasets Weather --models itransformer --mixers gated fem-sm fem-aft nrgpt
#       yb-brickwall --seeds 2021 2022' PAPER_SECONDS=540 bash benchmarks/gpu/check.sh grid", ...)
# Parts (arguments; default "tests speed"):
#   paper  the paper recipe, one process per PAPER_CELLS entry (DATASET:HORIZON[:MODEL[:MIXER]],
#          default "ETTm1:96 ETTm2:96 Weather:96"; MODEL patchtst, MIXER PAPER_MIXER or softmax,
#          e.g. "Weather:96:itransformer:nrgpt"; seed 2021), all started at once and each stopped
#          after PAPER_SECONDS; a row per finished run, a line per epoch
#   grid   a slice of the paper suite, GRID (tsmix benchmark selection flags, e.g. GRID="--datasets
#          Weather --models itransformer --mixers gated fem-sm --seeds 2021 2022"), split round robin
#          over GRID_PROCS processes (default 8, --part k/N), each stopped after PAPER_SECONDS
#   paper and grid runs skip what the travelling copy's benchmarks/results already holds, add their
#   rows to its *.gpu.csv shards (which come back whole), and checkpoint every epoch into .gpu-ckpt/
#   (ignored, kept on the machine while it stays warm): a later call continues a stopped run
#   tests  tests/test_devices.py beside the paper runs: every mixer and model on the GPU vs float64
#          on the CPU (outputs, gradients), a Forecaster fitted there, bf16-mixed          (150 s)
#   speed  tsmix benchmark-speed, CUDA wall time, after the paper runs (an idle GPU) and only
#          until SPEED_UNTIL seconds from the start: the patch/variate shapes with batch as an axis
#          (<= 90 s), then the N x D sweep (<= 120 s)
# Everything lands in $OUT/gpu.tar.gz plus $OUT/check.log. Back here, unpack it in the repository
# root: rows go to benchmarks/results/paper/rows/*.gpu.csv (the shard "gpu"), the speed files to
# benchmarks/speed/cuda/, logs to benchmarks/gpu/; then `tsmix benchmark-report --suite paper`.
# CHECK_DEVICE=cpu runs it without a GPU (try it in a scratch clone: rows land in that clone).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
OUT=${OUT:-/tmp/tsmix-gpu-out}
mkdir -p "$OUT"
STAGE=$(mktemp -d)
mkdir -p "$STAGE/benchmarks/gpu" "$STAGE/benchmarks/speed/cuda" "$STAGE/benchmarks/results"
LOG="$STAGE/benchmarks/gpu/check.log"
exec > >(tee "$LOG") 2>&1
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
PY=${PYTHON:-python3}
DEV=${CHECK_DEVICE:-cuda}  # CHECK_DEVICE=cpu tries the script on a machine without a GPU
PARTS=("$@")
[ ${#PARTS[@]} -eq 0 ] && PARTS=(tests speed)
wants() { [[ " ${PARTS[*]} " == *" $1 "* ]]; }
for part in "${PARTS[@]}"; do
    case $part in paper|grid|tests|speed) ;; *) echo "unknown part '$part': use paper, grid, tests, speed"; exit 2;; esac
done
if wants grid && [ -z "${GRID:-}" ]; then  # before anything is installed or started
    echo "grid: set GRID to the slice's selection flags, e.g. GRID='--datasets Weather --models" \
         "itransformer --mixers gated --seeds 2021 2022'"; exit 2
fi

RESULTS="$ROOT/benchmarks/results"  # the travelling copy's rows: stored runs are skipped
pack() {  # whatever state the parts reached comes back
    mkdir -p "$STAGE/benchmarks/results/paper/rows"
    cp "$RESULTS"/paper/rows/*.gpu.csv "$STAGE/benchmarks/results/paper/rows/" 2>/dev/null
    cp "$LOG" "$OUT/check.log" 2>/dev/null
    tar -C "$STAGE" -czf "$OUT/gpu.tar.gz" benchmarks
    echo "packed: $(tar -tzf "$OUT/gpu.tar.gz" | grep -v '/$' | tr '\n' ' ')"
}
trap pack EXIT

echo "# tsmix GPU check, $(date -u +%FT%TZ), parts: ${PARTS[*]}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -4

# -- install: the carried wheels, then tsmix itself (root folders map to tsmix.* in setup.py)
SITE=/tmp/tsmix-site
if ! ls .whl/*.whl >/dev/null 2>&1; then
    echo "no .whl/: run benchmarks/gpu/prepare.sh here and carry .whl"; exit 2
fi
$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
    || { echo "installing the carried wheels failed"; exit 2; }
if ! $PY -m pip install -q --no-deps --no-build-isolation --no-compile --no-cache-dir --upgrade \
        --target "$SITE" "$ROOT"; then  # an image whose setuptools cannot build it: the same layout by hand
    echo "pip could not build tsmix here; laying out the package as setup.py maps it"
    rm -rf "$SITE/tsmix" && cp -r tsmix "$SITE/tsmix"
    for f in datasets forecasting models tuning; do cp -r "$f" "$SITE/tsmix/$f"; done
fi
if [ -f .gpu-data/COMMIT ]; then  # what git archive would have written: rows name the commit
    read -r FULL SHORT < .gpu-data/COMMIT
    printf 'FULL = "%s"\nSHORT = "%s"\n' "$FULL" "$SHORT" > "$SITE/tsmix/_archive.py"
fi
export PYTHONPATH="$SITE"
# Python puts the working directory first on its path, and the repository root holds a bare
# tsmix/ (the core alone): every Python command runs from outside it.
WORK=$(mktemp -d)
cd "$WORK"
$PY - <<'PYEOF'
import torch, tsmix
from tsmix.provenance import git_commit
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, device "
      f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'NONE'}; tsmix {git_commit()} "
      f"from {tsmix.__file__}")
PYEOF

# -- paper and grid first: their runs are the long part, one process per cell or grid part, all at
# once (each is a small model that leaves most of the GPU idle); the tests run beside them, speed
# only after them. A row is written only when its run finishes.
RUN_PIDS=()
start() {  # start NAME FLAGS...: one `tsmix benchmark --suite paper` process, stopped after PAPER_SECONDS
    local name=$1; shift
    timeout "${PAPER_SECONDS:-480}" $PY -m tsmix benchmark --suite paper "$@" --threads 2 --shard gpu \
        --data-dir "$DATA" --results "$RESULTS" --no-report --progress --checkpoints "$ROOT/.gpu-ckpt" \
        > "$STAGE/benchmarks/gpu/$name.log" 2>&1 &
    RUN_PIDS+=($!)
}
if wants paper || wants grid; then
    if [ ! -f "$ROOT/.gpu-data/data.tar.xz" ]; then
        echo "no .gpu-data/data.tar.xz: run benchmarks/gpu/prepare.sh here and carry .gpu-data"; exit 2
    fi
    DATA=$(mktemp -d)
    tar -C "$DATA" -xJf "$ROOT/.gpu-data/data.tar.xz"
fi
if wants paper; then
    echo "## paper recipe on the GPU: ${PAPER_CELLS:=ETTm1:96 ETTm2:96 Weather:96}"
    for cell in $PAPER_CELLS; do
        IFS=: read -r ds h model mixer <<< "$cell"
        model=${model:-patchtst} mixer=${mixer:-${PAPER_MIXER:-softmax}}
        start "paper-$ds-$h$([ "$model" = patchtst ] || echo "-$model-$mixer")" --models "$model" \
            --mixers "$mixer" --datasets "$ds" --horizons "$h" --seeds 2021
    done
fi
if wants grid; then
    N=${GRID_PROCS:-8}
    echo "## paper suite slice on the GPU, $N processes: $GRID"
    # shellcheck disable=SC2086  # GRID is a list of flags
    for k in $(seq 1 "$N"); do start "grid-$k" $GRID --part "$k/$N"; done
fi

if wants tests; then
    echo "## tests/test_devices.py"
    # the device is named, so a GPU the test cannot see fails here instead of skipping
    TSMIX_TEST_DEVICES=$DEV timeout 150 $PY -m pytest -q -p no:cacheprovider -o addopts="--import-mode=importlib -ra" \
        "$ROOT/tests/test_devices.py" 2>&1 | tee "$STAGE/benchmarks/gpu/test_devices.txt" | tail -25
fi

if [ ${#RUN_PIDS[@]} -gt 0 ]; then
    wait "${RUN_PIDS[@]}"
    for f in "$STAGE"/benchmarks/gpu/paper-*.log "$STAGE"/benchmarks/gpu/grid-*.log; do
        [ -f "$f" ] || continue
        echo "-- $(basename "$f"): $(grep -c '^epoch' "$f") epochs logged"; grep -v '^epoch' "$f" | tail -4
        grep '^epoch' "$f" | tail -2
    done
fi

# speed wants an idle GPU: after the paper runs, within SPEED_UNTIL seconds of the script's start
# (the device call's own limit), the encoder shapes first
left() { echo $(( ${SPEED_UNTIL:-100000} - SECONDS )); }
if wants speed; then
    if [ "$(left)" -gt 40 ]; then
        T=$(( $(left) < 90 ? $(left) - 10 : 90 ))
        echo "## speed: encoder shapes (${T}s)"
        timeout "$T" $PY -m tsmix benchmark-speed --device "$DEV" --shapes patch variate --rounds 7 \
            --out "$STAGE/benchmarks/speed/cuda" | tail -45
    fi
    if [ "$(left)" -gt 40 ]; then
        T=$(( $(left) < 120 ? $(left) - 10 : 120 ))
        echo "## speed: N x D sweep (${T}s)"
        timeout "$T" $PY -m tsmix benchmark-speed --device "$DEV" --time-budget 1 --mem-budget 60000 \
            --out "$STAGE/benchmarks/speed/cuda" | tail -30
    fi
fi
