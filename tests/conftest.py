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


# The longest test files, longest first (seconds of their tests summed, `pytest --durations=0`
# on the 2-core development machine). scripts/test.sh runs xdist with --no-loadscope-reorder,
# so files go to the workers in collection order, one at a time as each worker runs short: the
# longest first leaves the short files to even out the end (longest-processing-time
# scheduling). By xdist's default order (most tests first) a long file of few tests came last
# and ran alone while the other worker idled. A stale entry costs only order, never a test.
LONGEST_FILES = (
    "tests/integration/test_collector_unavailable.py",  # 35 s
    "tests/integration/test_tb_plugin_browser.py",  # 33 s
    "tests/integration/test_on_demand_capture.py",  # 21 s
    "tests/integration/test_chrome_roundtrip.py",  # 20 s
    "tests/integration/test_collector_fsdp.py",  # 19 s
    "tests/unit/test_emulator_device.py",  # 17 s
    "tests/integration/test_emulator_compile.py",  # 16 s
    "tests/integration/test_emulator_fsdp.py",  # 16 s
    "tests/unit/test_fuzz_cli.py",  # 16 s
    "tests/integration/test_analysis_tb_profiler.py",  # 11 s
    "tests/integration/test_kineto_on_demand.py",  # 11 s
    "tests/integration/test_emulator_timing_hybrid.py",  # 9 s
    "tests/integration/test_tb_frontend_browser.py",  # 9 s
    "tests/integration/test_analysis_hta.py",  # 8 s
    "tests/integration/test_analysis_memory_shared.py",  # 8 s
    "tests/integration/test_perfetto_shared.py",  # 8 s
    "tests/integration/test_emulator_ddp.py",  # 8 s
    "tests/integration/test_diff_modules_emulator.py",  # 7 s
    "tests/integration/test_html_browser.py",  # 7 s
    "tests/unit/test_collector_build.py",  # 7 s
    "tests/integration/test_analysis_multirank_emulator.py",  # 7 s
    "tests/integration/test_compiled_graph_trace.py",  # 6 s
    "tests/integration/test_projection_compiled_modules_emulator.py",  # 6 s
    "tests/integration/test_emulator_collective_coupling.py",  # 6 s
    "tests/integration/test_load_shared_traces.py",  # 6 s
    "tests/unit/test_cli_safety.py",  # 6 s
    "tests/integration/test_emulator_memory.py",  # 5 s
    "tests/integration/test_emulator_timing_opinfo.py",  # 5 s
    "tests/integration/test_analysis_multirank_shared.py",  # 5 s
    "tests/integration/test_diff_shared.py",  # 4 s
    "tests/integration/test_placement_parity.py",  # 4 s
    "tests/integration/test_fallback_native.py",  # 4 s
    "tests/integration/test_hta_compat.py",  # 4 s
    "tests/integration/test_tb_plugin_emulator.py",  # 4 s
    "tests/integration/test_collector_emulator.py",  # 4 s
    "tests/integration/test_diff_emulator.py",  # 4 s
    "tests/integration/test_analysis_shared.py",  # 4 s
    "tests/integration/test_tb_memory_browser.py",  # 4 s
    "tests/unit/test_emulator_fallback.py",  # 4 s
    "tests/integration/test_analysis_emulator.py",  # 4 s
    "tests/integration/test_tb_projection_browser.py",  # 3 s
)


# Files whose assertions compare the emulator's modelled time with the host's wall clock (within
# tolerances that a preempted process can leave): last, when the other worker runs short files,
# not beside the multi-rank and browser tests of the first minutes.
WALL_CLOCK_FILES = (
    "tests/integration/test_collector_demo.py",  # device-bound demo: busy >= half a step
    "tests/integration/test_analysis_emulator_host_cost.py",
    "tests/integration/test_analysis_injected.py",
    "tests/integration/test_emulator_timing_mode.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of LONGEST_FILES first, in its order; WALL_CLOCK_FILES last; the rest as
    collected between them (a stable sort: each file's tests stay together and in order)."""
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    rank.update((name, len(LONGEST_FILES) + 1 + i) for i, name in enumerate(WALL_CLOCK_FILES))
    middle = len(LONGEST_FILES)
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], middle))


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
