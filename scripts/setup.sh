#!/usr/bin/env bash
# Creates .venv and installs the project with the given extras (default: torch,test).
#   bash scripts/setup.sh torch        # what the demo needs: torch (pinned CPU build)
#   bash scripts/setup.sh torch,test   # and what the tests need (HTA, tb-profiler, ...)
#   bash scripts/setup.sh torch,test,explorer   # and pyarrow (Explorer Parquet; scripts/test.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS=${1:-torch,test}
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
# torch is pinned (2.13.0, CPU build) in the "torch" extra, so pip never resolves a CUDA build.
.venv/bin/python -m pip install -q -e ".[$EXTRAS]"
