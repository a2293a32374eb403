"""System-trace JSON (real runtime or emulator) -> paired ``DeviceActivities``.

    acts = parse_system_trace(fetch_output_bytes)

Start/stop events pair by ``tracking_id``; device stamps map to host time through the core's
``timestamp_sync_point`` when present; unknown event types become GENERIC activities (kept, never
dropped); events with mistyped fields are counted in ``malformed``, unmatched halves in
``unpaired``.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from neuron_profiler.runtime_trace import format as F
from neuron_profiler.runtime_trace.activities import ActivityKind, DeviceActivities, Queue


class _Event(msgspec.Struct):
    event_type: str
    timestamp_ns: int
    phase: str = F.UNKNOWN
    tracking_id: int | None = None
    nc_idx: int = 0
    thread_id: int = 0
    nrta_seq_id: int | None = None
    data: dict[str, Any] = {}


class _Envelope(msgspec.Struct):
    events: list[msgspec.Raw]
    data_version: int = F.DATA_VERSION


_decode_envelope = msgspec.json.Decoder(_Envelope).decode
_decode_event = msgspec.json.Decoder(_Event).decode

_KIND_BY_TYPE = {
    **{t: ActivityKind.KERNEL for t in F.DEVICE_EXEC_TYPES},
    **{t: ActivityKind.DMA for t in F.DMA_TYPES},
    **{t: ActivityKind.COLLECTIVE for t in F.COLLECTIVE_TYPES},
    **{t: ActivityKind.RUNTIME_CALL for t in F.HOST_CALL_TYPES},
    F.EXT_HOST_SYNC: ActivityKind.HOST_SYNC, F.EXT_FALLBACK: ActivityKind.FALLBACK,
}
_QUEUE_BY_KIND = {ActivityKind.KERNEL: Queue.COMPUTE, ActivityKind.DMA: Queue.DMA,
                  ActivityKind.COLLECTIVE: Queue.COLLECTIVE}
_HOST_KINDS = {ActivityKind.RUNTIME_CALL, ActivityKind.HOST_SYNC, ActivityKind.FALLBACK}


def _host_ns(ev: _Event, sync: dict[int, tuple[int, int]]) -> int:
    """Host-clock time of an event: device stamps go through the core's latest sync point."""
    nc_ts = ev.data.get("nc_timestamp_ns")
    offset = sync.get(ev.nc_idx)
    if isinstance(nc_ts, int) and offset is not None:
        return offset[1] + (nc_ts - offset[0])
    return ev.timestamp_ns


class _Rows:
    def __init__(self) -> None:
        self.cols: dict[str, list[int]] = {k: [] for k in (
            "start_ns", "end_ns", "kind", "queue", "core", "thread_id", "correlation_id",
            "exec_id", "seq_id", "name_id", "modelled")}
        self.names: dict[str, int] = {}
        self.data: list[bytes] = []

    def add(self, start: _Event, end_ns: int, start_ns: int) -> None:
        kind = _KIND_BY_TYPE.get(start.event_type,
                                 ActivityKind.INSTANT if start.phase == F.INSTANT
                                 else ActivityKind.GENERIC)
        ext = start.data.get(F.EXT_KEY) or {}
        queue = _QUEUE_BY_KIND.get(kind, Queue.HOST if kind in _HOST_KINDS else Queue.OTHER)
        name = str(ext.get(F.X_OP) or ext.get(F.X_COLLECTIVE_OP) or start.event_type)
        c = self.cols
        c["start_ns"].append(start_ns)
        c["end_ns"].append(max(end_ns, start_ns))
        c["kind"].append(int(kind))
        c["queue"].append(int(queue))
        c["core"].append(start.nc_idx)
        c["thread_id"].append(start.thread_id)
        c["correlation_id"].append(int(ext.get(F.X_CORRELATION_ID) or 0))
        c["exec_id"].append(int(start.data.get("exec_id", -1)))
        c["seq_id"].append(start.nrta_seq_id if start.nrta_seq_id is not None else -1)
        c["name_id"].append(self.names.setdefault(name, len(self.names)))
        c["modelled"].append(bool(ext.get(F.X_MODELLED, False)))
        self.data.append(msgspec.json.encode(start.data))


def parse_system_trace(payload: bytes | str, dropped: dict[int, int] | None = None
                       ) -> DeviceActivities:
    """Parse one fetch output; raises ``msgspec.DecodeError`` if it is not JSON at all."""
    envelope = _decode_envelope(payload)
    events, malformed = [], 0
    for raw in envelope.events:
        try:
            events.append(_decode_event(raw))
        except (msgspec.ValidationError, msgspec.DecodeError):
            malformed += 1
    events.sort(key=lambda e: e.timestamp_ns)
    rows, sync, open_starts = _Rows(), {}, {}
    lone_stops = 0
    for ev in events:
        if ev.event_type == F.TIMESTAMP_SYNC_POINT:
            nc_ts, cpu_ts = ev.data.get("nc_timestamp_ns"), ev.data.get("cpu_timestamp_ns")
            if isinstance(nc_ts, int) and isinstance(cpu_ts, int):
                sync[ev.nc_idx] = (nc_ts, cpu_ts)
            continue
        ts = _host_ns(ev, sync)
        if ev.phase == F.START and ev.tracking_id is not None:
            open_starts[(ev.event_type, ev.tracking_id)] = (ev, ts)
        elif ev.phase == F.STOP and ev.tracking_id is not None:
            start = open_starts.pop((ev.event_type, ev.tracking_id), None)
            if start is None:
                lone_stops += 1
                rows.add(ev, ts, ts)  # keep the lone stop as a zero-length activity
            else:
                rows.add(start[0], ts, start[1])
        else:
            rows.add(ev, ts, ts)
    for start_event, start_ns in open_starts.values():  # stop never came: keep, zero length
        rows.add(start_event, start_ns, start_ns)
    return _build(rows, malformed, lone_stops + len(open_starts), dropped or {})


def _build(rows: _Rows, malformed: int, unpaired: int, dropped: dict[int, int]
           ) -> DeviceActivities:
    c = rows.cols
    as64 = {k: np.asarray(v, dtype=np.int64) for k, v in c.items()
            if k not in ("kind", "queue", "name_id", "modelled")}
    return DeviceActivities(
        **as64, kind=np.asarray(c["kind"], dtype=np.uint8),
        queue=np.asarray(c["queue"], dtype=np.uint8),
        name_id=np.asarray(c["name_id"], dtype=np.int32),
        modelled=np.asarray(c["modelled"], dtype=bool), names=list(rows.names), data=rows.data,
        malformed=malformed, unpaired=unpaired, dropped=dict(dropped))
