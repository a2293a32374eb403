#!/usr/bin/env bash
# The test command: set up (idempotent), lint, run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check neuron_profiler tests bench
.venv/bin/python -m pytest -q "$@"
