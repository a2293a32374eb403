"""Paired device activities: what the system-trace parser produces and the collector consumes.

One row per activity (a start/stop pair, or an instant), as numpy columns, so the Kineto bridge
can convert a million of them without touching Python objects per row::

    acts = parse_system_trace(json_bytes)      # runtime_trace.parser
    acts.start_ns[acts.kind == ActivityKind.KERNEL]
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


class ActivityKind(enum.IntEnum):
    GENERIC = 0  # unknown event type: kept, never dropped
    KERNEL = 1  # nc_exec_running
    DMA = 2  # dmem_buf_copyin / copyout / d2d
    COLLECTIVE = 3  # cc_running
    RUNTIME_CALL = 4  # host runtime call launching device work (nrt_model_submit, nrt_execute...)
    HOST_SYNC = 5  # host blocked on device
    FALLBACK = 6  # op run on the host
    INSTANT = 7  # tensor alloc/free and other instants (sync points are consumed, not emitted)
    EXEC_STAGE = 8  # host execution stages kbl_exec_pre / _core / _wait / _post (carry exec_id)
    COLLECTIVE_WAIT = 9  # cc_exec_barrier: the device waiting for its replica group
    OVERHEAD = 10  # the emulator's own host work (neuron_profiler.emulator_overhead)
    GRAPH_OP = 11  # an op inside a compiled graph's execution (placement makes these rows)


class Queue(enum.IntEnum):
    """Which timeline an activity belongs on (the collector's thread per queue)."""

    COMPUTE = 0
    DMA = 1
    COLLECTIVE = 2
    HOST = 3  # host-side runtime calls, syncs, fallbacks (placed on the launching thread)
    OTHER = 4


@dataclass(frozen=True)
class DeviceActivities:
    """Columnar activities; all arrays have one entry per activity.

    Args:
        start_ns / end_ns: host-clock Unix-epoch ns (device stamps already mapped via sync points).
        kind: ActivityKind codes. queue: Queue codes. core: nc_idx. thread_id: issuing host thread.
        correlation_id: torch.profiler correlation id of the launching op; 0 when the source has none
            (then the collector links by thread/time containment).
        exec_id: runtime exec id shared by a runtime call and its device work; -1 unknown.
        seq_id: nrta_seq_id; -1 unknown.
        name_id: index into ``names``. data: the event's ``data`` object as JSON bytes, per row.
        modelled: True where the duration is the emulator's model, not hardware.
        malformed: events that could not be used (bad types, missing keys): counted, not silent.
        unpaired: starts without stop or stops without start.
        dropped: events the source reported dropped (ring-buffer overflow), per core.
        drops_known: the source reports drops (our envelope extension); the real runtime's
            envelope has no drop count, so for it they are unknown (never 0).
        unmapped: device events left out because no sync point of their core maps their clock.
        host_timed: per row, True where a device-side activity (a copy) carries host time
            only (the real runtime's ``dmem_buf_copy*`` spans); empty means none.
        truncated: envelopes that were cut off (their complete events are kept).
        hidden_types: per event type, the capture's events that became no row (sync points,
            which are consumed; device events that could not be mapped).
    """

    start_ns: np.ndarray
    end_ns: np.ndarray
    kind: np.ndarray
    queue: np.ndarray
    core: np.ndarray
    thread_id: np.ndarray
    correlation_id: np.ndarray
    exec_id: np.ndarray
    seq_id: np.ndarray
    name_id: np.ndarray
    modelled: np.ndarray
    names: list[str]
    data: Sequence[bytes]  # the parser's RowData reads it from the payload on first use
    malformed: int = 0
    unpaired: int = 0
    dropped: dict[int, int] = field(default_factory=dict)
    drops_known: bool = True
    unmapped: int = 0
    host_timed: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    hidden_types: dict[str, int] = field(default_factory=dict)
    truncated: int = 0

    def __len__(self) -> int:
        return len(self.start_ns)
