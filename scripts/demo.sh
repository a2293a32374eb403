#!/usr/bin/env bash
# The main job: set up (idempotent), then profile a small transformer on the emulated device.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh torch  # the demo needs torch, not the test tools
.venv/bin/neuron-prof demo "$@"
