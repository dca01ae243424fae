#!/usr/bin/env bash
# GPU correctness in one command (issue 48): the CUDA tests of tests/cuda/ (fp32 against the CPU, bf16, torch.compile,
# static cache, checkpoint and resume, no host syncs in a training or decoding step), after a line that names the
# device and the versions.
#   bash scripts/gpu_check.sh [PYTEST ARGS]
# PYTHON picks the interpreter: by default .venv/bin/python where it exists (scripts/run.sh's environment), else
# python3 (a GPU machine's own, with a CUDA build of torch). Unlike scripts/run.sh this installs nothing: a GPU machine
# may reach no package index, and the tests need only torch, transformers and pytest.
# VANILLA_TRANSFORMER_TEST_DEVICE=cpu runs the same tests on the CPU, to check their logic without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
if ! "$PYTHON" -c "import torch, transformers, pytest" 2>/dev/null; then
    echo "error: $PYTHON cannot import torch, transformers and pytest: set PYTHON= to an interpreter that has them" \
        "(e.g. PYTHON=.venv/bin/python after 'bash scripts/run.sh test')" >&2
    exit 2
fi
export RUN_CUDA=1 RUN_SLOW=1 HF_HUB_OFFLINE=1
# cuBLAS reads it when torch first creates its handle; the checkpoint test runs with deterministic algorithms
export CUBLAS_WORKSPACE_CONFIG="${CUBLAS_WORKSPACE_CONFIG:-:4096:8}"

"$PYTHON" - <<'EOF'
import os
import sys

import torch
import transformers

device = os.environ.get("VANILLA_TRANSFORMER_TEST_DEVICE", "cuda")
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), transformers {transformers.__version__}, "
      f"Python {sys.version.split()[0]}")
if torch.cuda.is_available():
    properties = torch.cuda.get_device_properties(0)
    print(f"device: {torch.cuda.get_device_name(0)}, compute capability {properties.major}.{properties.minor}, "
          f"{properties.total_memory / 2**30:.0f} GiB; testing on {device}")
elif device.startswith("cuda"):
    sys.exit(f"no CUDA device is visible to torch {torch.__version__}: run this on a GPU machine, or set "
             f"VANILLA_TRANSFORMER_TEST_DEVICE=cpu to check the tests' logic on the CPU")
else:
    print(f"no CUDA device; testing on {device}")
EOF

exec "$PYTHON" -m pytest -q -p no:cacheprovider -m cuda tests/cuda "$@"
