"""``torch.neuron``'s memory functions: ``torch.accelerator.memory``'s names and meanings on the
emulated allocator (memory.py), and ``torch.neuron.memory`` with the CUDA snapshot entry points.

    torch.neuron.memory_allocated(); torch.neuron.max_memory_allocated(); torch.neuron.memory_stats()
    torch.neuron.memory._record_memory_history(); ...; torch.neuron.memory._dump_snapshot("s.pickle")

``torch.accelerator.memory`` reaches them through the emulator's C++ ``c10::DeviceAllocator``
(device_allocator.py), which calls ``memory_stats``, ``reset_peak_memory_stats``,
``reset_accumulated_memory_stats`` and ``get_memory_info`` here.
"""

from __future__ import annotations

import pickle
import types
from collections import OrderedDict
from typing import Any

from neuron_profiler.emulator import dispatch as D
from neuron_profiler.emulator import snapshot
from neuron_profiler.emulator.memory import ALLOCATOR
from neuron_profiler.emulator.runtime import get_runtime


def _core(device: Any) -> int:
    """The core a reader asks about, the allocator's pending frees settled first (read after
    ``w.grad = None``, the statistics no longer count the gradient)."""
    if ALLOCATOR.kept:
        ALLOCATOR.settle()
    if device is None:
        return D.STATE.current_core
    if isinstance(device, int):
        idx = device
    else:
        idx = D.core_of(device)
        idx = D.STATE.current_core if idx is None else idx
    if not 0 <= idx < len(ALLOCATOR.stats):
        raise RuntimeError(f"neuron:{idx} is not an emulated device")
    return idx


def memory_allocated(device: Any = None) -> int:
    """Bytes held by live device tensors on this core."""
    return ALLOCATOR.stats[_core(device)].allocated


def max_memory_allocated(device: Any = None) -> int:
    """Peak of ``memory_allocated`` since enable or the last ``reset_peak_memory_stats``."""
    return ALLOCATOR.stats[_core(device)].peak


def memory_reserved(device: Any = None) -> int:
    """No caching allocator: every buffer is returned when freed, reserved == allocated."""
    return memory_allocated(device)


def max_memory_reserved(device: Any = None) -> int:
    return max_memory_allocated(device)


def reset_peak_memory_stats(device: Any = None) -> None:
    ALLOCATOR.reset_peak(_core(device))


def reset_accumulated_memory_stats(device: Any = None) -> None:
    ALLOCATOR.reset_accumulated(_core(device))


def get_memory_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes as ``torch.accelerator.get_memory_info``: total is the core's share of
    the chip's HBM (costmodel/chips.py), free what ``memory_reserved`` leaves of it (0 past it:
    the emulator does not refuse an allocation beyond the chip's capacity)."""
    total = get_runtime().chip.hbm_bytes_per_core()
    return max(total - memory_reserved(device), 0), total


def empty_cache() -> None:
    """Nothing is cached (see ``memory_reserved``)."""


def memory_stats(device: Any = None) -> OrderedDict[str, int]:
    """``torch.accelerator.memory.memory_stats``' keys for the ``all`` pool: allocated_bytes,
    reserved_bytes and active_bytes (equal here), allocation, segment and active counts
    (current, peak, allocated, freed), and the allocator call counters."""
    s = ALLOCATOR.stats[_core(device)]
    bytes_ = {"current": s.allocated, "peak": s.peak, "allocated": s.bytes_in}
    bytes_["freed"] = s.bytes_out
    counts = {"current": s.count, "peak": s.peak_count, "allocated": s.allocs, "freed": s.frees}
    flat: dict[str, int] = {}
    for name in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes"):
        flat.update({f"{name}.all.{k}": v for k, v in bytes_.items()})
    for name in ("allocation", "segment", "active"):
        flat.update({f"{name}.all.{k}": v for k, v in counts.items()})
    flat.update(
        {
            "num_alloc_retries": 0,
            "num_ooms": 0,
            "num_device_alloc": s.allocs,
            "num_device_free": s.frees,
        }
    )
    return OrderedDict(sorted(flat.items()))


def _record_memory_history(
    enabled: str | None = "all",
    context: str | None = "all",
    stacks: str = "all",
    max_entries: int = snapshot.DEFAULT_MAX_ENTRIES,
    **_: Any,
) -> None:
    """As ``torch.cuda.memory._record_memory_history``: ``enabled`` "all" keeps a trace of every
    alloc/free, "state" only the live buffers' stacks, None stops; ``context`` None records no
    stacks (``stacks`` "python"/"all": Python frames, the emulator has no C++ allocator frames)."""
    snapshot.record_history(enabled, context is not None, max_entries)


def _snapshot(device: Any = None) -> dict[str, Any]:
    """The allocator state and history in ``torch.cuda.memory._snapshot()``'s schema."""
    return snapshot.take()


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Write ``_snapshot()`` as a pickle (what pytorch.org/memory_viz opens)."""
    data = _snapshot()
    with open(filename, "wb") as f:
        pickle.dump(data, f)


PUBLIC = {
    "memory_allocated": memory_allocated,
    "max_memory_allocated": max_memory_allocated,
    "memory_reserved": memory_reserved,
    "max_memory_reserved": max_memory_reserved,
    "reset_peak_memory_stats": reset_peak_memory_stats,
    "reset_accumulated_memory_stats": reset_accumulated_memory_stats,
    "memory_stats": memory_stats,
    "get_memory_info": get_memory_info,
    "empty_cache": empty_cache,
}
PRIVATE = {
    "_record_memory_history": _record_memory_history,
    "_snapshot": _snapshot,
    "_dump_snapshot": _dump_snapshot,
}


def install(mod: types.ModuleType) -> None:
    """Put the functions on ``torch.neuron`` and its ``memory`` submodule (as torch.cuda has)."""
    sub = types.ModuleType("torch.neuron.memory", "Emulated device memory (neuron_profiler).")
    for name, fn in {**PUBLIC, **PRIVATE}.items():
        setattr(sub, name, fn)
    for name, fn in PUBLIC.items():
        setattr(mod, name, fn)
    mod.memory = sub
