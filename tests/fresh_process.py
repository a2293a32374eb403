"""Run a Python script in a fresh interpreter for tests whose subject is process-wide: an abort
or a segfault (which must fail the test, not end pytest), c10's once-per-process warnings, or
PyTorch state set up once (the PrivateUse1 name, device modules)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import neuron_profiler


def run_fresh(script: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python -c script args...`` with this checkout's package first on the path and the
    caller's emulator switch left out; the run must exit 0 (its stderr's tail says why not)."""
    from neuron_profiler.emulator import ENV_EMULATE

    root = str(Path(neuron_profiler.__file__).resolve().parents[1])
    env = {k: v for k, v in os.environ.items() if k != ENV_EMULATE}
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    return proc
