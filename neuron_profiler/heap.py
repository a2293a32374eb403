"""How bulk work (loading, parsing, analysing a trace, building the ``--json`` document) treats
the Python heap, in one place:

- ``with gc_paused():`` around work that builds millions of short-lived containers and no
  reference cycles worth collecting: CPython's cyclic collector would otherwise run full passes
  over the growing heap for nothing (on a trace of 60,000 devices, the JSON document took 1.1 s
  with it, 0.34 s without). Reference counting still frees everything as usual. What the work
  kept goes to the oldest generation unscanned, so the first collection after it is short.
- ``return_freed_heap()`` after such work on a large trace: glibc keeps the pages of freed
  small objects that sit between live ones, which numpy (mapping large arrays afresh) never
  reuses: ~0.5 GB per 5M loaded events; ~170 MB after analysing 60,000 devices, which the
  ``--json`` document would otherwise add to.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

TRIM_ROWS = 200_000  # traces this large return their freed heap after bulk work (~ms to do)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector inside the block (nesting is fine: only the
    outermost block that paused it turns it back on).

    What the block built and kept is long-lived (a trace, a report): it is moved to the oldest
    generation unscanned (``gc.freeze`` then ``gc.unfreeze``, the documented way there) before
    the collector resumes. Otherwise the first collection after the block walks every container
    it kept: the 120,000 (pid, tid) keys of a 60,000-queue trace's thread names, 17 ms. Cycles
    among them are still collected, by the next full collection. Not when the process froze
    objects itself (``gc.freeze``, e.g. before forking): unfreezing would thaw those too."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
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
