"""``gc_paused`` pauses the cyclic collector for the block only, nested or not, and never turns
on a collector its caller had turned off."""

from __future__ import annotations

import gc
import os

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
