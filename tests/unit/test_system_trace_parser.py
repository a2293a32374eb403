"""System-trace parsing: pairing, clock mapping, unknown types kept, malformed counted."""

from __future__ import annotations

import json

from neuron_profiler.runtime_trace import format as F
from neuron_profiler.runtime_trace.activities import ActivityKind, Queue
from neuron_profiler.runtime_trace.parser import parse_system_trace

HOST0 = 1_700_000_000_000_000_000


def _ev(event_type: str, phase: str, ts: int, tracking: int | None = None, **data) -> dict:
    ev = {"event_type": event_type, "phase": phase, "timestamp_ns": ts, "nc_idx": 1,
          "thread_id": 77, "data": data}
    if tracking is not None:
        ev["tracking_id"] = tracking
    return ev


def _payload(events: list) -> bytes:
    return json.dumps({"events": events, "data_version": 2}).encode()


def test_pairs_maps_device_clock_and_keeps_extension() -> None:
    ext = {F.EXT_KEY: {F.X_OP: "aten::mm", F.X_FLOPS: 10, F.X_CORRELATION_ID: 5,
                       F.X_MODELLED: True}}
    events = [
        _ev(F.TIMESTAMP_SYNC_POINT, F.INSTANT, HOST0, exec_id=1, nc_timestamp_ns=1000,
            cpu_timestamp_ns=HOST0),
        _ev(F.NC_EXEC_RUNNING, F.STOP, HOST0 + 999, 9, nc_timestamp_ns=1600, exec_id=1),
        _ev(F.NC_EXEC_RUNNING, F.START, HOST0 + 1, 9, nc_timestamp_ns=1500, exec_id=1, **ext),
    ]
    acts = parse_system_trace(_payload(events))
    assert len(acts) == 1 and acts.unpaired == 0 and acts.malformed == 0
    assert acts.start_ns[0] == HOST0 + 500 and acts.end_ns[0] == HOST0 + 600
    assert acts.kind[0] == ActivityKind.KERNEL and acts.queue[0] == Queue.COMPUTE
    assert acts.names[acts.name_id[0]] == "aten::mm"
    assert acts.correlation_id[0] == 5 and acts.modelled[0] and acts.exec_id[0] == 1
    assert json.loads(acts.data[0])[F.EXT_KEY][F.X_FLOPS] == 10


def test_unknown_types_kept_malformed_and_unpaired_counted() -> None:
    events = [
        _ev("hw_notify", F.INSTANT, HOST0 + 5, foo=1),
        _ev("some_future_event", F.START, HOST0 + 6, 3),
        _ev("some_future_event", F.STOP, HOST0 + 16, 3),
        _ev(F.CC_RUNNING, F.START, HOST0 + 20, 4),  # stop never comes
        _ev(F.DMEM_BUF_COPYIN, F.STOP, HOST0 + 30, 8),  # start lost
        {"event_type": F.NC_EXEC_RUNNING, "timestamp_ns": "soon"},  # mistyped
        {"phase": "start"},  # missing keys
    ]
    acts = parse_system_trace(_payload(events))
    assert acts.malformed == 2 and acts.unpaired == 2
    assert len(acts) == 4  # nothing usable dropped: instant, generic pair, two halves
    kinds = sorted(int(k) for k in acts.kind)
    assert kinds == sorted([ActivityKind.INSTANT, ActivityKind.GENERIC, ActivityKind.COLLECTIVE,
                            ActivityKind.DMA])
    generic = list(acts.kind).index(ActivityKind.GENERIC)
    assert acts.end_ns[generic] - acts.start_ns[generic] == 10
