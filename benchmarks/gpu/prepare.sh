#!/usr/bin/env bash
# Here, before a GPU run: what benchmarks/gpu/check.sh needs that the device image lacks.
#   .whl/       polars and its runtime for the image's Python 3.12 (the image has torch, numpy,
#               pandas, pyarrow, scikit-learn, matplotlib, safetensors, filelock, tqdm, pytest, but
#               no polars; optuna and mlflow are not needed by the checks)
#   .gpu-data/  the benchmark CSVs of $TSMIX_DATA_DIR, xz-compressed, for the paper-recipe runs
#               (the ../shared/data beside a checkout does not travel), and the commit the travelling
#               copy is (it has no .git; result rows name it). Both folders are ignored
#               by git; never commit them.
# Then: the device call at the top of benchmarks/gpu/check.sh (carry=[".whl", ".gpu-data"])
# The two folders and the tracked tree must stay under the tool's 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python}  # the environment tsmix is installed in (its polars version is the one fetched)
if ! VERSION=$($PY -c "import importlib.metadata as m; print(m.version('polars'))" 2>/dev/null); then
    echo "prepare.sh: '$PY' has no polars; run it with the Python tsmix is installed in," \
         "e.g. PYTHON=.venv/bin/python bash benchmarks/gpu/prepare.sh" >&2
    exit 2
fi
DATA=${TSMIX_DATA_DIR:-../shared/data}
if [ ! -d "$DATA/ETT-small" ]; then
    echo "prepare.sh: no ETT-small/ under '$DATA'; set TSMIX_DATA_DIR to the benchmark data folder" >&2
    exit 2
fi
rm -rf .whl && mkdir .whl
# polars >= 1.3x is a pure-Python package plus a compiled runtime of the same version (abi3)
for pkg in "polars==$VERSION" "polars-runtime-32==$VERSION"; do
    $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .whl "$pkg"
done
rm -rf .gpu-data && mkdir .gpu-data
tar -C "$DATA" -cJf .gpu-data/data.tar.xz ETT-small weather/weather.csv
# The copy that travels has no .git: the commit its result rows name comes from here
DIRTY=$(git status --porcelain --untracked-files=no | grep -q . && echo "+dirty" || true)
echo "$(git rev-parse HEAD)$DIRTY $(git rev-parse --short HEAD)$DIRTY" > .gpu-data/COMMIT
du -sh .whl .gpu-data
git ls-files -z | du -ch --files0-from=- | tail -1 | sed 's/total/tracked files/'
