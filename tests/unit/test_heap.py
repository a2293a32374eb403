"""``gc_paused`` pauses the cyclic collector for the block only, nested or not, and never turns
on a collector its caller had turned off."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import pytest

from neuron_profiler.heap import gc_paused


def test_paused_inside_restored_after_even_on_error() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner block did not turn it back on
    assert gc.isenabled()
    with pytest.raises(KeyError), gc_paused():
        raise KeyError("x")
    assert gc.isenabled()


def test_a_collector_the_caller_turned_off_stays_off() -> None:
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


_OLDEST_GENERATION = """
import gc
from neuron_profiler.heap import gc_paused
frozen = gc.get_freeze_count() > 0
with gc_paused():
    kept = [(k, [k]) for k in range(1000)]  # tracked containers
    cycle = []
    cycle.append(cycle)
oldest = {id(o) for o in gc.get_objects(generation=2)}
young = {id(o) for g in (0, 1) for o in gc.get_objects(generation=g)}
ids = (id(kept), id(kept[500]), id(kept[500][1]))
print(frozen, all(i in oldest for i in ids), any(i in young for i in ids))
del cycle
print(gc.collect() >= 1)  # the cycle, unreachable now, is still found
gc.freeze()  # a process that froze objects itself: they stay frozen
with gc_paused():
    pass
print(gc.get_freeze_count() > 0)
"""


def test_what_a_paused_block_kept_is_in_the_oldest_generation() -> None:
    """The containers a block built and kept are not in the young generations after it (the
    first collection would walk them all) but in the oldest, where a full collection still
    collects their cycles; what the process froze itself stays frozen. (A fresh interpreter:
    this suite freezes what its collection left alive, see conftest.py.)"""
    out = subprocess.run(
        [sys.executable, "-c", _OLDEST_GENERATION], capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["False", "True", "False", "True", "True"]


def test_return_freed_heap_gives_pages_back() -> None:
    """Freed small objects between live ones leave pages glibc keeps; after the trim the
    process' RSS is lower (Linux with glibc, where the project's CI runs; elsewhere a no-op)."""
    import ctypes
    import sys

    from neuron_profiler.heap import return_freed_heap

    try:
        ctypes.CDLL(None).malloc_trim  # noqa: B018
    except (AttributeError, OSError, TypeError):
        if os.environ.get("CI") == "true" and sys.platform == "linux":
            raise
        pytest.skip("no malloc_trim in this C library: return_freed_heap is a no-op here")

    def rss_kb() -> int:
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS"))

    keep = []
    with gc_paused():
        chunks = [bytearray(2000) for _ in range(60_000)]  # ~120 MB of malloc'd blocks
        keep = chunks[::100]  # a live block now and then: the heap cannot shrink from its top
        del chunks
    before = rss_kb()
    return_freed_heap()
    assert rss_kb() < before - 50_000, (before, rss_kb())
    assert len(keep) == 600
