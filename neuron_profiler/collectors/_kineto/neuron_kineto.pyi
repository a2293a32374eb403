"""Typed surface of the C++ Kineto bridge (neuron_kineto.cpp), as _build.load_bridge() returns it."""

from typing import Any, Protocol

import numpy as np

class Controller(Protocol):
    def start(self) -> None: ...
    def stop(self, start_ns: int, stop_ns: int, stack: np.ndarray) -> dict[str, Any]:
        """``stack``: the correlation intervals, an (n, 5) int64 array whose columns are
        session.STACK_COLUMNS."""

def register_profiler(controller: Controller, keys: dict[str, str]) -> None:
    """Register the IActivityProfiler factory (once), the Python controller it calls and the
    keys it writes (session.ARG_KEYS)."""

REGISTRATION: str
"""How the factory reaches Kineto: torch's PrivateUse1ProfilerRegistry (torch >= 2.12) or, where
torch has no registry header, libkineto's registerProfilerFactory."""

def current_correlation_id() -> int:
    """Correlation id on top of this thread's Kineto stack (0 outside any op)."""

def record_dtype() -> np.dtype:
    """``struct Record`` as a numpy dtype (fields, offsets, size): runtime_trace.records.RECORD."""

def report_memory_usage(
    ptr: int, alloc_size: int, total_allocated: int, total_reserved: int, device_index: int
) -> None:
    """c10::reportMemoryUsageToProfiler for neuron:``device_index`` (``alloc_size`` < 0: a free)."""

def host_reports_off() -> bool:
    """While this thread's profiler records memory: stop the CPU allocator's reports here until
    ``host_reports_on`` (device reports still go through); False: nothing to stop."""

def host_reports_on() -> None:
    """Undo one ``host_reports_off`` that returned True."""

def memory_profiling_enabled() -> bool:
    """c10::memoryProfilingEnabled(): a profiler with profile_memory=True records this thread."""

def record_steps(enabled: bool) -> None:
    """Start/stop noting torch.profiler's ProfilerStep# record functions (memory snapshots)."""

def take_steps() -> list[tuple[str, bool, int]]:
    """The step marks noted since the last call: (name, is start, host epoch us)."""
