"""Neuron Explorer's legacy JSON export (``--output-format json``, ``system_profile.json``) ->
the same ``EventColumns`` the Parquet reader produces.

Each event is an object ``{name, timestamp, duration, group, id, parent_id, instance_id,
process_id, thread_id, lnc_idx, type}`` (type 99999: framework), in a top-level list or under
``"events"``. ASSUMPTIONS (docs/explorer.md): times are nanoseconds on the host clock; an event
whose ``parent_id`` names a framework event was dispatched by it (read as a flow, like the
Parquet ``flow_id``); other keys are attributes.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np

from neuron_profiler.errors import TraceLoadError
from neuron_profiler.explorer import schema as X
from neuron_profiler.explorer.columns import EventColumns, ExplorerProfile
from neuron_profiler.runtime_trace import format as F
from neuron_profiler.runtime_trace._pylists import codes
from neuron_profiler.trace.repair import EMPTY_FILE, cannot_read

# Event types AWS groups as hardware (docs/runtime-events.md): the legacy export has no source
# column, so these names say neuron_hw, the framework type says framework, the rest neuron_rt.
HARDWARE_TYPES = frozenset(
    {
        F.NC_EXEC_RUNNING,
        F.CC_RUNNING,
        F.CC_EXEC_BARRIER,
        F.TIMESTAMP_SYNC_POINT,
        "numerical_err",
        "nrt_model_switch",
        "hw_notify",
    }
)


class _Event(msgspec.Struct, gc=False):
    name: str
    timestamp: int
    duration: int = 0
    id: int = -1
    parent_id: int | None = None
    instance_id: str | None = None
    process_id: int = -1
    thread_id: int = -1
    lnc_idx: int | None = None
    type: int | None = None


class _Wrapped(msgspec.Struct, gc=False):
    events: list[msgspec.Raw]


_decode_list = msgspec.json.Decoder(list[msgspec.Raw]).decode
_decode_wrapped = msgspec.json.Decoder(_Wrapped).decode
_decode_events = msgspec.json.Decoder(list[_Event]).decode
_decode_event = msgspec.json.Decoder(_Event).decode


def read_legacy(path: Path) -> ExplorerProfile:
    """Read one legacy JSON export; not JSON, or no list of events: ``TraceLoadError``."""
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise TraceLoadError(path, cannot_read(err)) from None
    if not raw.strip():
        raise TraceLoadError(path, EMPTY_FILE)
    items = _items(raw, path)
    try:
        events, bad = _decode_events(b"[" + b",".join(items) + b"]"), 0
    except msgspec.ValidationError:
        events, bad = [], 0
        for item in items:
            try:
                events.append(_decode_event(item))
            except msgspec.ValidationError:
                bad += 1
    if items and not events:
        raise TraceLoadError(path, "no event has a name and an integer timestamp")
    return ExplorerProfile(
        source=str(path), events=_columns(events), files=(str(path),), malformed=bad, legacy=True
    )


def _items(raw: bytes, path: Path) -> list[msgspec.Raw]:
    try:
        if raw.lstrip()[:1] == b"[":
            return _decode_list(raw)
        return _decode_wrapped(raw).events
    except msgspec.ValidationError:
        raise TraceLoadError(
            path, "not a Neuron Explorer JSON export (no list of events)"
        ) from None
    except msgspec.DecodeError as err:
        raise TraceLoadError(path, f"invalid JSON ({err})") from None


def _ints(events: list[_Event], name: str, missing: int = -1) -> np.ndarray:
    values = (getattr(e, name) for e in events)
    return np.fromiter((missing if v is None else v for v in values), np.int64, len(events))


def _columns(events: list[_Event]) -> EventColumns:
    n = len(events)
    names, name_code = codes((e.name for e in events), n)
    instances, instance_code = codes((e.instance_id or "" for e in events), n)
    start = _ints(events, "timestamp")
    kind = _ints(events, "type")
    is_framework = kind == X.LEGACY_FRAMEWORK_TYPE
    hardware = np.array([s in HARDWARE_TYPES for s in names], dtype=bool)[name_code]
    source = np.where(is_framework, 2, np.where(hardware, 1, 0)).astype(np.int8)
    ids, parents = _ints(events, "id"), _ints(events, "parent_id")
    # a framework event's flow is its own id; another event's is its parent's
    flow_value = np.where(is_framework, ids, parents)
    flow_row = np.flatnonzero(flow_value >= 0)
    minus = np.full(n, -1, dtype=np.int64)
    return EventColumns(
        start_ns=start,
        end_ns=start + np.maximum(_ints(events, "duration", 0), 0),
        source=source,
        name_code=np.asarray(name_code, dtype=np.int64),
        names=list(names),
        instance_code=np.asarray(instance_code, dtype=np.int64),
        instances=list(instances),
        process_id=_ints(events, "process_id"),
        thread_id=_ints(events, "thread_id"),
        nc_idx=_ints(events, "lnc_idx"),
        pcore_idx=minus,
        worker_gid=minus.copy(),
        flow_row=flow_row,
        flow_value=flow_value[flow_row],
        exec_id=minus.copy(),
        seq_id=minus.copy(),
        op_id=minus.copy(),
        attributes=[b"{}"] * n,
        stream_code=np.zeros(n, dtype=np.int64),
        streams=[""],
    )


__all__ = ["read_legacy"]
