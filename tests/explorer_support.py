"""pyarrow for the Explorer tests: skip with a reason without it, fail under CI=true (where
scripts/test.sh installs the explorer extra)."""

from __future__ import annotations

import importlib.util
import os

import pytest


def require_pyarrow() -> None:
    if importlib.util.find_spec("pyarrow") is not None:
        return
    reason = "pyarrow not installed (pip install 'neuron-profiler[explorer]')"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)
