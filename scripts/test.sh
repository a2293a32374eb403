#!/usr/bin/env bash
# The test command: set up (idempotent), Chromium for the browser test (installed with apt-get
# when missing and run as root: CI), lint, run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh torch,test
bash scripts/browser.sh
.venv/bin/ruff check neuron_profiler tests bench
.venv/bin/python -m pytest -q "$@"
