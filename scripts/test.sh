#!/usr/bin/env bash
# The test command: set up (idempotent), Chromium for the browser test (installed with apt-get
# when missing and run as root: CI), lint and format checks (Python: ruff; the C++ bridge and
# the emulator's allocator: clang-format), the C++ extensions built into torch's extension cache
# two at a time (scripts/build_extensions.py; cached: a no-op once built), then the whole test
# suite, test files spread over up to 4 processes
# (pytest-xdist; a file's tests stay in one process, so its module fixtures run once), handed
# out longest file first (tests/conftest.py's LONGEST_FILES; xdist's own reorder off).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh torch,test,explorer
bash scripts/browser.sh
.venv/bin/ruff check neuron_profiler tests bench scripts
.venv/bin/ruff format --check neuron_profiler tests bench scripts
.venv/bin/clang-format --dry-run --Werror neuron_profiler/collectors/_kineto/*.h \
  neuron_profiler/collectors/_kineto/*.cpp neuron_profiler/emulator/_allocator/*.cpp
.venv/bin/python scripts/build_extensions.py --testing
workers=$(.venv/bin/python -c "import os; print(min(4, os.cpu_count() or 1))")
.venv/bin/python -m pytest -q -n "$workers" --dist loadfile --no-loadscope-reorder "$@"
