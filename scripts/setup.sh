#!/usr/bin/env bash
# Creates .venv and installs the project with torch (pinned CPU build), test and bench extras.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
# torch is pinned (2.13.0, CPU build) in the "torch" extra, so pip never resolves a CUDA build.
.venv/bin/python -m pip install -q -e ".[torch,test]"
