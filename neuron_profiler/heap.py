"""How bulk work (loading, parsing, analysing a trace, building the ``--json`` document) treats
the Python heap, in one place:

- ``with gc_paused():`` around work that builds millions of short-lived containers and no
  reference cycles worth collecting: CPython's cyclic collector would otherwise run full passes
  over the growing heap for nothing (on a trace of 60,000 devices, the JSON document took 1.1 s
  with it, 0.34 s without). Reference counting still frees everything as usual.
- ``return_freed_heap()`` after such work on a large trace: glibc keeps the pages of freed
  small objects that sit between live ones, which numpy (mapping large arrays afresh) never
  reuses: ~0.5 GB per 5M loaded events; ~170 MB after analysing 60,000 devices, which the
  ``--json`` document would otherwise add to.
- ``reuse_transient_buffers()`` before a load streams a file: a piece's transient buffers (the
  block, the text joined for msgspec, the args joined) are then kept by the C heap and reused
  instead of unmapped and faulted in afresh for the next piece.
- ``warm_heap()`` at the start of a load in a fresh process: the pages the load will touch
  first are faulted in on the other core meanwhile.

A fresh process pays for every page it touches for the first time (the kernel zeroes it: ~2 µs
per 4 KB page on a VM); a load of a 4 MB trace touches ~9 MB, ~4 ms of its ~28 ms.
"""

from __future__ import annotations

import _thread
import gc
import mmap
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

TRIM_ROWS = 200_000  # traces this large return their freed heap after bulk work (~ms to do)
# glibc maps buffers above its mmap threshold afresh (128 KB at first) and returns free heap
# above its trim threshold to the OS; freeing one mapped buffer of this size raises them to
# 8 / 16 MB (its dynamic thresholds), above a piece's transient buffers (~3 MB)
HEAP_REUSE_BYTES = 8 << 20
# heap faulted in ahead of a load: below the raised mmap threshold (so it is heap that later
# allocations reuse, not a mapping that goes back to the OS). 6 MB took 2 ms off a 28 ms
# load of a 4 MB trace; 12 MB (a mapping) took less.
WARM_BYTES = 6 << 20
# ... for a trace of this much JSON or more: a smaller load touches fewer fresh pages than the
# warm-up faults in, and the two compete (a 1.2 MB trace loaded 0.8 ms slower with it, 4-5 MB
# ones 1.5-2 ms faster)
WARM_MIN_TEXT_BYTES = 3 << 20
WARM_STEP_BYTES = 512 << 10
_MADV_POPULATE_WRITE = 23  # <linux/mman.h>; Python's mmap module names it from 3.13 only
_threshold_raised = False
_heap_warmed = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector inside the block (nesting is fine: only the
    outermost block that paused it turns it back on)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def return_freed_heap() -> None:
    """Hand the freed heap pages back to the OS (glibc's ``malloc_trim``); a no-op where the
    C library has none (macOS, musl, Windows)."""
    import ctypes  # (only large traces get here: not at startup)

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError, TypeError):  # (Windows: no CDLL(None))
        return
    trim(0)


def reuse_transient_buffers() -> None:
    """Let the C heap keep and reuse the few MB each piece of a load allocates and frees,
    instead of unmapping them and faulting fresh pages in for the next piece (~10% of a
    load). Once per process; the buffer is mapped and freed without being touched. Elsewhere
    than glibc nothing changes."""
    global _threshold_raised
    if not _threshold_raised:
        import numpy as np

        np.empty(HEAP_REUSE_BYTES, dtype=np.uint8)
        _threshold_raised = True


def warm_heap(cores: int, text_bytes: int | None) -> Warming | None:
    """Once per process, given a second core (``cores``: those usable) and a trace of at
    least ``WARM_MIN_TEXT_BYTES`` of JSON (``text_bytes``, None: unknown): ``WARM_BYTES`` of
    the C heap freed at once and faulted in by a thread meanwhile (``Warming``), so that the
    buffers and columns the load allocates next land on pages already zeroed. The caller
    joins it before anything may fork (``forked.fork_is_safe`` wants one thread: this one,
    started with ``_thread`` so that the load does not wait for it to start, is not counted
    there). None: nothing started, also where the block was not heap (glibc mapped it on its
    own, when its thresholds stayed low: it went back to the OS when freed, and whatever is
    mapped there next is none of this)."""
    global _heap_warmed
    if _heap_warmed or cores < 2 or text_bytes is None or text_bytes < WARM_MIN_TEXT_BYTES:
        return None
    _heap_warmed = True
    libc = _libc()
    if libc is None:
        return None
    import numpy as np

    reuse_transient_buffers()  # (first: WARM_BYTES then come from the heap, not a mapping)
    # (numpy asks for huge pages on a block this large: the pages then come in 2 MB at a
    # time, and the load's own first touches of them cost nothing; plain malloc'd pages were
    # slower to warm than to fault in, 27.8 against 27.3 ms a load)
    buffer = np.empty(WARM_BYTES, dtype=np.uint8)
    start = buffer.__array_interface__["data"][0]
    del buffer  # (free heap now: the load's next allocations take it as the pages come in)
    # in the heap, between its start and the program break (after the free: a block that was
    # a mapping of its own, or heap trimmed at once, is gone)
    heap_start = _heap_start()
    if heap_start is None or not heap_start <= start < start + WARM_BYTES <= libc.sbrk(0):
        return None
    return Warming(libc, start, WARM_BYTES)


def _heap_start() -> int | None:
    """Where the program break's heap starts (``[heap]`` in ``/proc/self/maps``; the heap
    past a part numpy asked huge pages for is listed apart, unnamed: the break ends it)."""
    try:
        with open("/proc/self/maps", "rb") as maps:
            for line in maps:
                if line.rstrip().endswith(b"[heap]"):
                    return int(line.split(b"-", 1)[0], 16)
    except OSError:
        pass
    return None


class Warming:
    """The pages of ``[start, start + size)`` faulted in by a thread with Linux's
    ``MADV_POPULATE_WRITE`` (5.14+): as if written, but nothing is, so the heap's free memory
    (its allocator's bookkeeping included) reads the same and may be handed out meanwhile.
    The call releases the GIL. ``join()`` waits for it."""

    def __init__(self, libc: Any, start: int, size: int) -> None:
        self._done = _thread.allocate_lock()
        self._done.acquire()
        page = mmap.PAGESIZE
        low, high = -(-start // page) * page, (start + size) // page * page
        self.pages = (low, high)  # the whole pages of the range
        self.error = 0  # errno of a madvise that failed (the pages then fault in as usual)
        if high <= low:
            self._done.release()
            return
        _thread.start_new_thread(self._populate, (libc, low, high - low))

    def _populate(self, libc: Any, start: int, size: int) -> None:
        try:  # (in steps: the load's own faults and heap growth wait for one step at most)
            for at in range(start, start + size, WARM_STEP_BYTES):
                step = min(WARM_STEP_BYTES, start + size - at)
                if libc.madvise(at, step, _MADV_POPULATE_WRITE):
                    self.error = libc.errno()
                    break
        finally:
            self._done.release()

    def join(self) -> None:
        with self._done:
            pass


class _Libc:
    """The C library calls the warm-up makes (``madvise`` releases the GIL while it runs)."""

    def __init__(self, ctypes: Any) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.madvise = libc.madvise
        self.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        self.madvise.restype = ctypes.c_int
        self.sbrk = libc.sbrk  # (sbrk(0): the program break, where the heap ends)
        self.sbrk.argtypes = (ctypes.c_ssize_t,)
        self.sbrk.restype = ctypes.c_void_p
        self.errno = ctypes.get_errno


def _libc() -> _Libc | None:
    """glibc's calls on Linux, or None (another system, or a C library without them)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # (numpy has imported it already)

    try:
        return _Libc(ctypes)
    except (AttributeError, OSError, TypeError):
        return None
