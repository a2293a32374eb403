#!/usr/bin/env bash
# Chromium and chromedriver for the TensorBoard plugin's browser test
# (tests/integration/test_tb_plugin_browser.py, docs/tensorboard.md). When they are missing and
# this runs as root with apt-get (CI: a clean Debian machine), installs Debian's chromium and
# chromium-driver (one quiet apt-get update); otherwise says so and succeeds: the test then
# skips, or fails under CI=true.
set -euo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "note: /usr/bin/chromium or /usr/bin/chromedriver missing: the browser test will skip" \
       "(as root: apt-get install chromium chromium-driver)" >&2
  exit 0
fi
echo "installing chromium + chromium-driver (apt-get) for the browser test" >&2
log=$(mktemp)
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq chromium chromium-driver; } >"$log" 2>&1; then
  tail -n 20 "$log" >&2
  rm -f "$log"
  echo "error: apt-get could not install chromium chromium-driver" >&2
  exit 1
fi
rm -f "$log"
