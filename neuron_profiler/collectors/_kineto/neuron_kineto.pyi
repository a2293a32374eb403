"""Typed surface of the C++ Kineto bridge (neuron_kineto.cpp), as _build.load_bridge() returns it."""

from typing import Any, Protocol

import numpy as np

class Controller(Protocol):
    def prepare(self, now_ns: int) -> None:
        """Kineto configured a session (a schedule's warm-up, or just before start)."""
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
