"""Typed surface of the C++ Kineto bridge (neuron_kineto.cpp), as _build.load_bridge() returns it."""

from typing import Any, Protocol

import numpy as np

class Controller(Protocol):
    def start(self) -> None: ...
    def stop(self, start_ns: int, stop_ns: int, tid: np.ndarray, corr: np.ndarray,
             push: np.ndarray, pop: np.ndarray) -> dict[str, Any]: ...

def register_profiler(controller: Controller, keys: dict[str, str]) -> None:
    """Register the IActivityProfiler factory (once) and the Python controller it calls."""

def current_correlation_id() -> int:
    """Correlation id on top of this thread's Kineto stack (0 outside any op)."""

def convert_records(records: dict[str, Any], render: bool = True
                    ) -> tuple[float, int, list[tuple[Any, ...]]]:
    """Convert a record buffer without Kineto: (seconds, count, rendered rows if render)."""

def render_seconds(records: dict[str, Any]) -> float:
    """Seconds to render the args of every converted activity (what export costs)."""

def now_ns() -> int: ...
def _push_correlation(id: int) -> None: ...
def _pop_correlation() -> None: ...
