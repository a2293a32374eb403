"""Memory snapshots of the emulated allocator in the CUDA caching allocator's pickle schema
(``torch.cuda.memory._snapshot``' docstring), which ``torch.cuda._memory_viz`` and
pytorch.org/memory_viz read:

- ``segments``: one per live buffer (no caching allocator: a buffer is its own segment, with one
  ``active_allocated`` block), with its allocation's Python frames when stacks are recorded;
- ``device_traces``: one list per core of ``alloc`` / ``free_requested`` / ``free_completed``
  entries (addr, size, stream 0, time_us, frames), frees requested and completed at once;
- ``external_annotations``: START/END of each ``ProfilerStep#N`` while torch.profiler steps,
  noted by a record-function callback in the memory extension (``record_steps``), as CUDA's
  allocator notes them.
"""

from __future__ import annotations

import sys
from typing import Any

from neuron_profiler.emulator.memory import ALLOCATOR, LARGE_SEGMENT_BYTES, History

DEFAULT_MAX_ENTRIES = 2**63 - 1  # torch.cuda.memory._record_memory_history's default
_STAGE = {True: "START", False: "END"}
NO_STEP_ANNOTATIONS = "neuron-profiler: memory snapshots carry no ProfilerStep annotations"
_said: list[str] = []  # the extension's problem, once said


def record_history(enabled: str | None, stacks: bool, max_entries: int) -> None:
    """Start ("all": trace and stacks, "state": stacks of live buffers only) or stop (None)."""
    if enabled not in (None, "all", "state"):
        raise ValueError(f"enabled must be None, 'state' or 'all', got {enabled!r}")
    native = _steps_native()
    if enabled is None:
        if ALLOCATOR.history is not None:
            _collect_steps(ALLOCATOR.history)
        ALLOCATOR.history = None
        if native is not None:
            native.record_steps(False)
        return
    ALLOCATOR.history = History(max_entries, stacks, trace=enabled == "all")
    if native is not None:
        native.take_steps()  # marks from before this recording
        native.record_steps(True)


def _steps_native() -> Any:
    """The memory extension, or None (said once per process on stderr: the snapshots then
    carry no step annotations and are complete otherwise)."""
    from neuron_profiler.emulator.native import load_native
    from neuron_profiler.errors import CollectorUnavailableError

    try:
        return load_native()
    except CollectorUnavailableError as err:
        if not _said:
            _said.append(str(err))
            print(f"{NO_STEP_ANNOTATIONS}: {err}", file=sys.stderr, flush=True)
        return None


def _collect_steps(history: History) -> None:
    native = _steps_native()
    if native is None:
        return
    for name, start, time_us in native.take_steps():
        history.annotations.append(
            {"device": 0, "name": name, "stage": _STAGE[start], "time_us": time_us}
        )


def take() -> dict[str, Any]:
    """The snapshot dict (see the module docstring)."""
    history = ALLOCATOR.history
    cores = len(ALLOCATOR.stats)
    traces: list[list[dict[str, Any]]] = [[] for _ in range(cores)]
    annotations: list[dict[str, Any]] = []
    if history is not None:
        _collect_steps(history)
        for core, entries in history.entries.items():
            if core < cores:
                traces[core] = list(entries)
        annotations = list(history.annotations)
    return {
        "segments": [_segment(b) for b in ALLOCATOR.live_buffers()],
        "device_traces": traces,
        "external_annotations": annotations,
        "allocator_settings": {},
    }


def _segment(buf: Any) -> dict[str, Any]:
    frames = buf.frames or []
    block = {
        "address": buf.addr,
        "size": buf.nbytes,
        "requested_size": buf.nbytes,
        "state": "active_allocated",
        "frames": frames,
    }
    return {
        "device": buf.core,
        "address": buf.addr,
        "total_size": buf.nbytes,
        "allocated_size": buf.nbytes,
        "active_size": buf.nbytes,
        "requested_size": buf.nbytes,
        "stream": 0,
        "segment_type": "large" if buf.nbytes >= LARGE_SEGMENT_BYTES else "small",
        "segment_pool_id": (0, 0),
        "is_expandable": False,
        "frames": frames,
        "blocks": [block],
    }
