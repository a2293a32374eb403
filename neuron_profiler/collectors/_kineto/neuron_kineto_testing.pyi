"""Typed surface of the bridge's test and bench module (neuron_kineto_testing.cpp), as
_build.load_testing_bridge() returns it: the core of neuron_kineto.h without Kineto."""

from typing import Any

import numpy as np

def set_keys(keys: dict[str, str]) -> None:
    """The keys the conversion writes (load_testing_bridge sets session.ARG_KEYS)."""

def record_dtype() -> np.dtype:
    """``struct Record`` as a numpy dtype (fields, offsets, size): runtime_trace.records.RECORD."""

def convert_records(
    records: dict[str, Any], render: bool = True
) -> tuple[float, int, list[tuple[Any, ...]]]:
    """Convert a record buffer (RecordBuffer.to_dict()) without Kineto: (seconds, count,
    rendered rows (type, name, pid, tid, ts, dur, id, flow id, flow start, args JSON) if
    render)."""

def render_seconds(records: dict[str, Any]) -> float:
    """Seconds to render the args of every converted activity (what export costs)."""

def current_correlation_id() -> int:
    """Correlation id on top of this thread's stack in this module (0 when empty)."""

def _push_correlation(id: int) -> None: ...
def _pop_correlation() -> None: ...
