"""Shared fixtures: the real traces in ../shared/traces, read in place (never copied)."""

from __future__ import annotations

import contextlib
import gc
import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO_ROOT.parent / "shared" / "traces"

# The cyclic collector in a test process: with torch, transformers and the suite's modules
# loaded, every full pass walks millions of long-lived objects; at CPython's default (a pass
# per 700 net allocations) that was ~20% of the CPU time of torch- and JSON-heavy test files
# (test_emulator_compile.py + test_analysis_tb_profiler.py: 40.5 s -> 31.6 s user time).
# Rarer passes, and the objects alive after collection frozen out of them, change no result:
# tests that need garbage gone call gc.collect() themselves, and the product's own pauses
# (neuron_profiler/heap.py) nest as before. Subprocesses the tests start keep the defaults.
GC_THRESHOLDS = (50_000, 10, 10)  # net allocations per young pass; older ones as by default
gc.set_threshold(*GC_THRESHOLDS)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what collection left alive (modules, parametrisations): no pass rescans it.
    Hypothesis is imported first: its import runs plugins' ``register_random`` (trio's), which
    looks for the registered object's referrers with ``gc.get_referrers``, blind to frozen ones."""
    with contextlib.suppress(ImportError):  # (the test extra has it; a bare install may not)
        import hypothesis  # noqa: F401
    gc.collect()
    gc.freeze()


def shared_traces_dir() -> Path:
    """../shared/traces, or skip (fail under CI=true, where it must exist)."""
    if SHARED_TRACES.is_dir():
        return SHARED_TRACES
    reason = f"shared traces not found at {SHARED_TRACES} (a fresh clone has no ../shared)"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    return shared_traces_dir()


def all_shared_trace_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.name.endswith((".json", ".json.gz")))
