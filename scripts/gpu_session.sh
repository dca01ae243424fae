#!/usr/bin/env bash
# The GPU work of issue 48, prepared for a session that is lent a GPU (about 15 minutes of device time in all; see
# docs/speed.md, "The GPU check"). Two calls, each one command:
#   bash scripts/gpu_session.sh check   # ≤ 4 min: the correctness tests, then the speed table, into $OUT
#   bash scripts/gpu_session.sh grid    # ≤ 9 min: Table 3 rows until the time is up; finished rows' records in $OUT
# The device machine gets the working tree and nothing beside it, and its image lacks datasets and sacremoses.
# Before the calls, on this machine (the folders are ignored by git, so name them in the call's `carry`):
#   mkdir -p gpu-data wheels && cp ../shared/data/wmt14_en_de/newstest2014.en gpu-data/ \
#     && cp -r ../shared/data/multi30k gpu-data/ && pip download datasets sacremoses -d wheels --no-deps
#   echo gpu-data/ >> .git/info/exclude; echo wheels/ >> .git/info/exclude
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-outputs/gpu-session}"
mkdir -p "$OUT"
PYTHON="${PYTHON:-python3}"
if [ -d wheels ]; then "$PYTHON" -m pip install -q --no-index --find-links wheels datasets sacremoses || true; fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
"$PYTHON" -c "import torch, transformers, vanilla_transformer; print(torch.__version__, transformers.__version__)"
case "${1:-check}" in
check)
    PYTHON="$PYTHON" bash scripts/gpu_check.sh 2>&1 | tee "$OUT/gpu_check.log"
    nvidia-cuda-mps-control -d || true  # the grid's processes share the GPU
    "$PYTHON" scripts/gpu_speed.py --device cuda --sources gpu-data/newstest2014.en \
        --output-dir "$OUT/speed" --docs docs/speed.md 2>&1 | tee "$OUT/gpu_speed.log"
    cp docs/speed.md "$OUT/speed.md"
    ;;
grid)
    nvidia-cuda-mps-control -d || true
    export VANILLA_TRANSFORMER_MULTI30K="$PWD/gpu-data/multi30k"
    # the records of rows finished in earlier GPU runs are in docs/table3/records: only the rest trains
    timeout "${GRID_SECONDS:-480}" "$PYTHON" scripts/table3.py --preset multi30k --lr-factors 1.265,2.53 \
        --seeds 3 --jobs 11 --threads 1 --test-split test2016 --records docs/table3/records \
        --output-dir "$OUT/grid" 2>&1 | tail -n 200 > "$OUT/grid.log" || true
    tar -czf "$OUT/records.tgz" docs/table3/records 2>/dev/null || true
    ;;
*)
    echo "usage: bash scripts/gpu_session.sh check|grid" >&2
    exit 2
    ;;
esac
