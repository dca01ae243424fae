#!/usr/bin/env bash
# One entry point that builds its own environment from nothing, then runs a job:
#   bash scripts/run.sh demo            the main job (see README)
#   bash scripts/run.sh test [ARGS]     the test suite (ARGS go to pytest)
# VENV (default .venv) picks the environment; TRANSFORMERS_VERSION pins transformers in it.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY="$VENV/bin/python"

setup() {
    [ -x "$PY" ] || python3 -m venv "$VENV"
    local stamp="$VENV/.setup-stamp"
    local want
    want="$(cat pyproject.toml) transformers=${TRANSFORMERS_VERSION:-latest}"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        return
    fi
    "$PY" -m pip install -q --upgrade pip
    if ! "$PY" -c "import torch" 2>/dev/null; then
        # A plain `pip install torch` pulls a multi-GB CUDA build: take the CPU wheel first, from PyTorch's CPU
        # index where it can be reached, else from the configured index (which holds the CPU wheel offline).
        if curl -s --max-time 10 -o /dev/null https://download.pytorch.org/whl/cpu/; then
            "$PY" -m pip install -q "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu
        else
            "$PY" -m pip install -q "torch==2.13.0"
        fi
    fi
    "$PY" -m pip install -q -e ".[test]"
    if [ -n "${TRANSFORMERS_VERSION:-}" ]; then
        "$PY" -m pip install -q "transformers==$TRANSFORMERS_VERSION"
    fi
    echo "$want" >"$stamp"
}

job=${1:-}
shift || true
case "$job" in
    demo)
        setup
        HF_HUB_OFFLINE=1 "$PY" -m vanilla_transformer demo "$@"
        ;;
    test)
        setup
        HF_HUB_OFFLINE=1 "$PY" -m pytest -n 2 "$@"
        ;;
    *)
        echo "usage: bash scripts/run.sh demo|test [ARGS...]" >&2
        exit 2
        ;;
esac
