"""``gc_paused`` pauses the cyclic collector for the block only, nested or not, and never turns
on a collector its caller had turned off."""

from __future__ import annotations

import gc
import os

import pytest

from neuron_profiler.heap import WARM_BYTES, gc_paused


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


# glibc's heap pinned for the warm-up's tests: it warms only a block that lies in the program
# break's heap, which glibc's dynamic thresholds give unless a MALLOC_* setting turns them off.
# A test process can inherit one: Dask's Nanny sets MALLOC_TRIM_THRESHOLD_=65536 in the
# process that starts it (its pre-spawn environment, os.environ.update), so every later child
# of that pytest worker had the block mapped on its own. These tests check the mechanism;
# test_no_warm_up_where_the_block_is_not_heap checks the other case.
PINNED_HEAP = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(64 << 20)}


def _fresh(code: str, tmp_path, malloc_env: dict[str, str] = PINNED_HEAP) -> str:  # noqa: ANN001
    """Run ``code`` in a fresh interpreter (the warm-up is once per process) with glibc's
    settings ``malloc_env`` (pinned unless said otherwise); its output."""
    import subprocess
    import sys
    import textwrap

    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env=dict(os.environ, **malloc_env),
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_heap_is_warmed_once_and_only_beside_a_free_core(tmp_path) -> None:  # noqa: ANN001
    _fresh(
        """
        from neuron_profiler import heap
        big = heap.WARM_MIN_TEXT_BYTES
        assert heap.warm_heap(1, big) is None  # one core: the load itself would wait for it
        assert heap.warm_heap(2, big - 1) is None  # a small trace: it would cost more
        assert heap.warm_heap(2, None) is None  # (a size not known)
        warming = heap.warm_heap(2, big)
        assert warming is not None
        warming.join()
        assert heap.warm_heap(2, big) is None  # once per process
        """,
        tmp_path,
    )


def test_a_load_leaves_no_thread_behind(tmp_path) -> None:  # noqa: ANN001
    """The warm-up thread is joined before the load returns: a fork afterwards (analyze's
    child, a split load) needs a single-threaded process."""
    (tmp_path / "t.json").write_text(
        '{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]}'
    )
    _fresh(
        """
        import sys, threading
        from unittest import mock
        from neuron_profiler import forked, heap
        from neuron_profiler.trace import load_trace
        started = []
        real = heap.warm_heap
        def warm(cores, text_bytes):
            thread = real(2, heap.WARM_MIN_TEXT_BYTES)
            started.append(thread)
            return thread
        with mock.patch("neuron_profiler.trace.loader.warm_heap", warm):
            trace = load_trace("t.json")
        assert len(trace) == 1 and started and started[0] is not None
        assert started[0]._done.acquire(blocking=False)  # it is done, not just started
        assert threading.active_count() == 1
        assert forked.fork_is_safe() or not sys.platform.startswith("linux")
        """,
        tmp_path,
    )


def test_the_warmed_heap_is_faulted_in(tmp_path) -> None:  # noqa: ANN001
    """After the warm-up every page of its range is resident (``mincore``: the kernel's own
    account), without a byte of it written: the heap's allocator may hand it out meanwhile
    (Linux 5.14+; elsewhere the warm-up does nothing). The kernel may take idle pages back
    under memory pressure (this VM runs a reclaimer), so a fresh process tries up to three
    times; a warm-up that does not work (a wrong advice, a thread that never runs) fails all."""
    import platform
    import sys

    release = tuple(int(p) for p in platform.release().split(".")[:2] if p.isdigit())
    if not sys.platform.startswith("linux") or release < (5, 14):
        pytest.skip("MADV_POPULATE_WRITE needs Linux 5.14+: the warm-up does nothing here")
    code = """
import ctypes, mmap
from neuron_profiler import heap
warming = heap.warm_heap(2, heap.WARM_MIN_TEXT_BYTES)
warming.join()
low, high = warming.pages
pages = (high - low) // mmap.PAGESIZE
vec = ctypes.create_string_buffer(pages)
libc = ctypes.CDLL(None, use_errno=True)
libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)
assert libc.mincore(low, high - low, vec) == 0, ctypes.get_errno()
print(warming.error, sum(b & 1 for b in vec.raw), pages)
"""
    tries = []
    for _ in range(3):
        error, resident, pages = map(int, _fresh(code, tmp_path).split())
        tries.append((error, resident, pages))
        if error == 0 and resident == pages >= (WARM_BYTES >> 12) - 2:
            return
    raise AssertionError(f"(madvise errno, resident pages, pages) per try: {tries}")


def test_no_warm_up_where_the_block_is_not_heap(tmp_path) -> None:  # noqa: ANN001
    """With glibc's thresholds fixed low (``MALLOC_MMAP_THRESHOLD_`` turns its dynamic raise
    off), the block is a mapping of its own, returned to the OS when freed: nothing is warmed
    then (what is mapped at that address next is none of the warm-up's business)."""
    import sys

    if not sys.platform.startswith("linux"):
        pytest.skip("glibc's malloc settings: Linux only")
    code = """
        from neuron_profiler import heap
        print(heap.warm_heap(2, heap.WARM_MIN_TEXT_BYTES) is None)
        """
    out = _fresh(code, tmp_path, malloc_env={"MALLOC_MMAP_THRESHOLD_": "131072"})
    assert out.split() == ["True"]
