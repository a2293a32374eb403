"""Where device activity comes from: one ``Source`` protocol, two implementations.

    src = EmulatorSource()            # the emulated runtime (neuron_profiler.emulator.runtime)
    src = LibnrtSource.load()         # the real runtime through libnrt's nrt_sys_trace_* (ctypes)
    src.start(max_events_per_nc=1_000_000); ...; payload = src.stop()   # system-trace JSON

Both hand out the same system-trace JSON, so one parser (runtime_trace.parser) serves both.
The emulator stamps the launching op's correlation id on its events; the real runtime does not,
and placement links its calls by thread and time containment instead.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np

from neuron_profiler.runtime_trace.format import EMULATED_EVENT_TYPES, TENSOR_EVENT_TYPES
from neuron_profiler.runtime_trace.memory_counters import DROPPED_OVER_CAP, MemorySamples
from neuron_profiler.trace import vocabulary as V

ENV_TENSOR_EVENTS = "NEURON_PROFILER_TENSOR_EVENTS"


def tensor_events_wanted() -> bool:
    """Tensor allocate/free instants are off unless $NEURON_PROFILER_TENSOR_EVENTS is 1/true/yes:
    the emulator tracks each tensor's lifetime in Python to emit them, which costs a training
    step a few percent, and nothing in the collector's trace needs them."""
    return os.environ.get(ENV_TENSOR_EVENTS, "").strip().lower() in ("1", "true", "yes", "on")


@runtime_checkable
class Source(Protocol):
    """A runtime event source for one profiling session at a time."""

    name: str

    def start(self, max_events_per_nc: int, correlation: Callable[[], int] | None) -> None:
        """Begin capture; ``correlation`` returns the launching op's id (emulator only)."""

    def stop(self) -> bytes:
        """End capture and return everything captured (system-trace JSON bytes)."""

    def device_properties(self) -> list[dict[str, Any]]:
        """One dict per NeuronCore: id, name, chip, hbm_bytes, peak_bf16_tflops, emulated..."""

    def memory_samples(self) -> MemorySamples | None:
        """The session's device memory per core and usage category (None: not reported)."""


class EmulatorSource:
    """The emulated runtime (interface A): capture between start and stop, fetch-once."""

    name = "emulator"

    def __init__(self) -> None:
        from neuron_profiler.emulator import runtime
        from neuron_profiler.emulator.memory import ALLOCATOR

        self._mod = runtime
        self._rt = runtime.get_runtime()
        self._allocator = ALLOCATOR
        self._samples: Any = None

    def start(self, max_events_per_nc: int, correlation: Callable[[], int] | None) -> None:
        if self._rt.capturing:  # a session that never stopped (crashed profiler): end it
            self._rt.sys_trace_stop()
        self._rt.sys_trace_fetch()  # discard leftovers so this session sees only its own window
        self._mod.set_correlation_provider(correlation)
        types = None if tensor_events_wanted() else set(EMULATED_EVENT_TYPES - TENSOR_EVENT_TYPES)
        self._rt.sys_trace_start(max_events_per_nc=max_events_per_nc, event_types=types)
        self._allocator.start_samples(max_events_per_nc * max(len(self._allocator.stats), 1))

    def stop(self) -> bytes:
        self._mod.set_correlation_provider(None)
        self._rt.sys_trace_stop()
        self._samples = self._allocator.stop_samples()
        return self._rt.sys_trace_fetch()

    def memory_samples(self) -> MemorySamples | None:
        """Per core: tensors = the allocator's live bytes at each change (counted), the other
        categories the chip's modelled runtime memory (costmodel.device_memory), constant."""
        from neuron_profiler.costmodel.device_memory import runtime_memory

        samples = self._samples
        if samples is None:
            return None
        reserved = runtime_memory(self._rt.chip)
        rows = np.asarray(samples.rows, dtype=np.int64).reshape(-1, 3)
        values = np.empty((len(rows), 1 + len(reserved)), dtype=np.int64)
        values[:, 0] = rows[:, 2]
        values[:, 1:] = np.asarray(list(reserved.values()), dtype=np.int64)
        categories = (V.HBM_TENSORS, *reserved)
        sources = {V.HBM_TENSORS: V.HBM_FROM_ALLOCATOR, **dict.fromkeys(reserved, V.HBM_FROM_MODEL)}
        dropped = {DROPPED_OVER_CAP: samples.dropped} if samples.dropped else {}
        return MemorySamples(rows[:, 0], rows[:, 1], values, categories, sources, dropped)

    def device_properties(self) -> list[dict[str, Any]]:
        return self._rt.device_properties()

    def provenance(self) -> dict[str, Any]:
        return {}  # the emulator is no libnrt: no runtime version


class LibnrtSource:
    """The real Neuron runtime via ctypes (see libnrt.py); links by containment.

    Not run on Trainium hardware by this project: tested against tests/fake_libnrt only.
    """

    name = "libnrt"

    _sync_memory: dict[str, Any] = {}  # per library: sync points outlive the session's source

    def __init__(self, lib: Any) -> None:
        from neuron_profiler.runtime_trace.parser import SyncPoints

        self._lib = lib  # a libnrt.SysTrace
        self._sync_points = self._sync_memory.setdefault(lib.path, SyncPoints())
        self._payload = b""

    @classmethod
    def load(cls, path: str | None = None) -> LibnrtSource:
        from neuron_profiler.collectors.libnrt import SysTrace

        return cls(SysTrace.load(path))

    def start(self, max_events_per_nc: int, correlation: Callable[[], int] | None) -> None:
        types = (
            None
            if tensor_events_wanted()
            else [t for t in self._lib.event_types() if t not in TENSOR_EVENT_TYPES]
        )
        self._lib.start(max_events_per_nc=max_events_per_nc, event_types=types)

    def stop(self) -> bytes:
        """This session's events, after the sync points kept from earlier fetches: the runtime
        hands each event out once, and a device stamp needs its core's sync points."""
        payload = self._lib.fetch()
        self._lib.stop()
        self._payload = payload
        earlier = self._sync_points.envelope()
        self._sync_points.keep(payload)
        return payload if earlier is None else b"[" + earlier + b"," + payload + b"]"

    def device_properties(self) -> list[dict[str, Any]]:
        return [
            {V.PROP_ID: c, V.PROP_NAME: V.core_process_name(c), V.PROP_EMULATED: False}
            for c in self._lib.cores()
        ]

    def memory_samples(self) -> MemorySamples | None:
        """What the runtime reported: after each ``nrt_dma_mem_alloc`` / ``_dealloc`` result,
        its core's bytes per usage type (MemorySamples.from_runtime); None without any."""
        from neuron_profiler.runtime_trace.parser import memory_events

        events, unusable = memory_events(self._payload)
        self._payload = b""  # read once per session: the payload need not outlive it
        if not events and not unusable:
            return None
        return MemorySamples.from_runtime(events, unusable)

    def provenance(self) -> dict[str, Any]:
        """What the trace says about where its device rows came from."""
        return {"runtime_version": self._lib.version(), "library": self._lib.path}
