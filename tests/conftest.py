"""Shared fixtures: the real traces in ../shared/traces, read in place (never copied)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO_ROOT.parent / "shared" / "traces"


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
