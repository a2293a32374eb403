"""System-trace JSON (real runtime or emulator) -> paired ``DeviceActivities``, vectorised.

    acts = parse_system_trace(fetch_output_bytes)
    acts = parse_system_traces([fetch1, fetch2])   # several fetches: pairs across them

Rules (docs/runtime-events.md):
- Input: one envelope ``{"events": [...], "data_version": 2}``, several envelopes concatenated
  (one fetch after another in one file), or a JSON list of envelopes.
- Start/stop events pair by ``(event_type, tracking_id)`` in host-time order: a start pairs with
  the next event of its key when that is a stop. Unmatched halves are kept as zero-length
  activities and counted in ``unpaired``.
- Device stamps (``data.nc_timestamp_ns``) map to host time through a ``timestamp_sync_point``:
  the one of the same core and ``exec_id`` when there is one (the latest at or before the event,
  else the earliest after), otherwise the core's latest sync point at or before the event
  (none: the event's own ``timestamp_ns``). ``host_ns = sync.cpu_timestamp_ns +
  (nc_timestamp_ns - sync.nc_timestamp_ns)``. Sync points are consumed, not emitted.
- Unknown event types are kept (GENERIC, or INSTANT for phase "instant"); events whose fields are
  mistyped or missing (and sync points without both stamps) are counted in ``malformed``.
- Ring-buffer drops come from our envelope extension ``{"neuron_profiler": {"dropped_events":
  {"core": n}}}`` (per fetch, summed over envelopes).

Why this shape: msgspec decodes each event into a small typed Struct in C (unknown keys skipped),
columns are pulled out once, and pairing/clock mapping are numpy sorts, not a per-event loop.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from itertools import repeat
from operator import attrgetter, itemgetter
from typing import Annotated, Any

import msgspec
import numpy as np

from neuron_profiler.runtime_trace import format as F
from neuron_profiler.runtime_trace.activities import ActivityKind, DeviceActivities, Queue

_ABSENT = -(2**63)  # an absent optional int (JSON null decodes to None and takes a slower path)
_I64 = Annotated[int, msgspec.Meta(ge=_ABSENT + 1, le=2**63 - 1)]


class _Ext(msgspec.Struct, gc=False, frozen=True):
    """The few extension keys the parser needs (all others stay in the row's raw data)."""

    op: str | None = None
    collective: str | None = None
    correlation_id: _I64 | None = 0
    modelled: bool = False


_NO_EXT = _Ext()


class _Data(msgspec.Struct, gc=False, frozen=True):
    exec_id: _I64 | None = _ABSENT
    nc_timestamp_ns: _I64 | None = _ABSENT
    cpu_timestamp_ns: _I64 | None = _ABSENT
    neuron_profiler: _Ext | None = _NO_EXT


_NO_DATA = _Data()


class _Event(msgspec.Struct, gc=False, kw_only=True):
    # Field order follows the runtime's JSON (msgspec's fast path for keys in declared order).
    event_type: str
    phase: str = F.UNKNOWN
    tracking_id: _I64 | None = _ABSENT
    nc_idx: _I64 = 0
    thread_id: _I64 = 0
    timestamp_ns: _I64
    nrta_seq_id: _I64 | None = _ABSENT
    data: _Data = _NO_DATA


class _EnvExt(msgspec.Struct, gc=False):
    dropped_events: dict[str, int] = {}


class _Envelope(msgspec.Struct, gc=False):
    events: list[_Event]
    neuron_profiler: msgspec.Raw = msgspec.Raw(b"")


class _RawEnvelope(msgspec.Struct, gc=False):
    events: list[msgspec.Raw]
    neuron_profiler: msgspec.Raw = msgspec.Raw(b"")


class _RawData(msgspec.Struct, gc=False):
    data: msgspec.Raw = msgspec.Raw(b"{}")


class _RawDataEnvelope(msgspec.Struct, gc=False):
    events: list[_RawData]


_decode_envelope = msgspec.json.Decoder(_Envelope).decode
_decode_raw_envelope = msgspec.json.Decoder(_RawEnvelope).decode
_decode_raw_data = msgspec.json.Decoder(_RawDataEnvelope).decode
_decode_event = msgspec.json.Decoder(_Event).decode
_decode_events = msgspec.json.Decoder(list[_Event]).decode
_decode_data_raw = msgspec.json.Decoder(_RawData).decode
_decode_env_ext = msgspec.json.Decoder(_EnvExt).decode
_get_data = attrgetter("data")
_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")
_CHUNK = 4096  # events per validation chunk on the slow (malformed input) path

_KIND_BY_TYPE = {
    **{t: ActivityKind.KERNEL for t in F.DEVICE_EXEC_TYPES},
    **{t: ActivityKind.DMA for t in F.DMA_TYPES},
    **{t: ActivityKind.COLLECTIVE for t in F.COLLECTIVE_TYPES},
    **{t: ActivityKind.RUNTIME_CALL for t in F.HOST_CALL_TYPES},
    F.EXT_HOST_SYNC: ActivityKind.HOST_SYNC, F.EXT_FALLBACK: ActivityKind.FALLBACK,
}
_QUEUE_BY_KIND = np.full(len(ActivityKind), Queue.OTHER, dtype=np.uint8)
for _kind, _queue in ((ActivityKind.KERNEL, Queue.COMPUTE), (ActivityKind.DMA, Queue.DMA),
                      (ActivityKind.COLLECTIVE, Queue.COLLECTIVE),
                      (ActivityKind.RUNTIME_CALL, Queue.HOST), (ActivityKind.HOST_SYNC, Queue.HOST),
                      (ActivityKind.FALLBACK, Queue.HOST)):
    _QUEUE_BY_KIND[_kind] = _queue
_PHASE_CODE = {F.START: 0, F.STOP: 1, F.INSTANT: 2}  # anything else: 3
_START, _STOP, _INSTANT = 0, 1, 2


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Millions of short-lived containers would trigger repeated full collections for nothing."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _envelopes(payload: bytes | str) -> Iterator[tuple[list[_Event], list[Any], int, Any]]:
    """Decoded envelopes of one payload: a single envelope, envelopes one after another, or a
    JSON list of envelopes. Raises ``msgspec.DecodeError`` when a part is not JSON."""
    buf = payload.encode() if isinstance(payload, str) else payload
    view = memoryview(buf)
    if bytes(view[:64]).lstrip().startswith(b"["):
        for raw in msgspec.json.decode(view, type=list[msgspec.Raw]):
            yield _events_of(raw)
        return
    pos = 0
    while pos < len(view):
        try:
            yield _events_of(view[pos:])
            return
        except msgspec.ValidationError:
            raise
        except msgspec.DecodeError as err:  # another envelope follows: decode up to it
            match = _TRAILING.search(str(err))
            end = pos + int(match.group(1)) - 1 if match else pos  # msgspec counts from 1
            if end <= pos:
                raise
            yield _events_of(view[pos:end])
            pos = end


def _events_of(part: bytes | memoryview) -> tuple[list[_Event], list[msgspec.Raw], int, Any]:
    """Decode one envelope: (events, their raw data, malformed count, extension raw)."""
    try:
        env = _decode_envelope(part)
        raws = list(map(_get_data, _decode_raw_data(part).events))
        return env.events, raws, 0, env.neuron_profiler
    except msgspec.ValidationError:
        pass  # some event is mistyped: validate chunk by chunk, then event by event
    env_raw = _decode_raw_envelope(part)  # raises when the envelope itself is unusable
    events: list[_Event] = []
    raws = []
    malformed = 0
    items = env_raw.events
    for lo in range(0, len(items), _CHUNK):
        chunk = items[lo:lo + _CHUNK]
        try:
            good = list(zip(_decode_events(b"[" + b",".join(chunk) + b"]"), chunk, strict=True))
        except msgspec.ValidationError:
            good = []
            for raw in chunk:
                try:
                    good.append((_decode_event(raw), raw))
                except msgspec.ValidationError:
                    malformed += 1
        for event, raw in good:
            events.append(event)
            raws.append(_decode_data_raw(raw).data)
    return events, raws, malformed, env_raw.neuron_profiler


def _dropped_of(ext_raw: Any) -> tuple[dict[int, int], int]:
    """Per-core drop counts from our envelope extension; (counts, 1 if it was malformed)."""
    if not len(ext_raw) or bytes(ext_raw) == b"null":
        return {}, 0
    try:
        counts = _decode_env_ext(ext_raw).dropped_events
        return {int(core): int(n) for core, n in counts.items()}, 0
    except (msgspec.ValidationError, msgspec.DecodeError, ValueError):
        return {}, 1


def _ints(objs: list[Any], attr: str, missing: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """int64 column of ``obj.attr`` (absent or null -> ``missing``) and its presence mask."""
    get = attrgetter(attr)
    try:
        col = np.fromiter(map(get, objs), dtype=np.int64, count=len(objs))
    except TypeError:  # explicit JSON nulls
        col = np.array([_ABSENT if v is None else v for v in map(get, objs)], dtype=np.int64)
    present = col != _ABSENT
    col[~present] = missing
    return col, present


def _codes(values: list[str]) -> tuple[dict[str, int], np.ndarray]:
    """Interned strings (first-seen order) and each value's code."""
    table = {v: i for i, v in enumerate(dict.fromkeys(values))}
    return table, np.fromiter(map(table.__getitem__, values), dtype=np.int64, count=len(values))


def _take(values: list[Any], rows: np.ndarray) -> list[Any]:
    """values[rows] for a Python list (itemgetter runs the loop in C)."""
    if len(rows) < 2:
        return [values[i] for i in rows.tolist()]
    return list(itemgetter(*rows.tolist())(values))


def _nearest(group: list[np.ndarray], ts: np.ndarray, idx: np.ndarray, is_sync: np.ndarray,
             backward: bool) -> np.ndarray:
    """For each element, the position of the sync point of its group at or before it (or the
    first after it when ``backward``) in (ts, idx) order; -1 when there is none."""
    order = np.lexsort((idx, ts, *reversed(group)))
    n = len(order)
    pos = np.where(is_sync[order], np.arange(n), -1 if not backward else n)
    found = (np.maximum.accumulate(pos) if not backward
             else np.minimum.accumulate(pos[::-1])[::-1])
    valid = (found >= 0) & (found < n)
    safe = np.clip(found, 0, n - 1)
    for key in group:
        valid &= key[order][safe] == key[order]
    out = np.full(n, -1, dtype=np.int64)
    out[order] = np.where(valid, order[safe], -1)
    return out


def _map_clock(ts: np.ndarray, core: np.ndarray, exec_id: np.ndarray, has_exec: np.ndarray,
               nc_ts: np.ndarray, device: np.ndarray, is_sync: np.ndarray, sync_cpu: np.ndarray
               ) -> np.ndarray:
    """Host-clock ns of every event (``device`` rows through their sync point)."""
    host = ts.copy()
    if not is_sync.any() or not device.any():
        return host
    idx = np.arange(len(ts))
    sel = np.flatnonzero(device | is_sync)
    s_sync, s_ts, s_idx, s_core = is_sync[sel], ts[sel], idx[sel], core[sel]
    chosen = _nearest([s_core], s_ts, s_idx, s_sync, backward=False)
    keyed = has_exec[sel]
    if keyed.any():  # same (core, exec_id): at or before, else the earliest after
        k = np.flatnonzero(keyed)
        group = [s_core[k], exec_id[sel][k]]
        before = _nearest(group, s_ts[k], s_idx[k], s_sync[k], backward=False)
        after = _nearest(group, s_ts[k], s_idx[k], s_sync[k], backward=True)
        exact = np.where(before >= 0, before, after)
        exact = np.where(exact >= 0, k[np.clip(exact, 0, None)], -1)
        chosen[k] = np.where(exact >= 0, exact, chosen[k])
    events = np.flatnonzero(~s_sync & (chosen >= 0))
    sync_rows = sel[chosen[events]]
    rows = sel[events]
    host[rows] = sync_cpu[sync_rows] + (nc_ts[rows] - nc_ts[sync_rows])
    return host


def _pair(type_code: np.ndarray, phase: np.ndarray, tracking: np.ndarray,
          pairable: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(start rows, their stop rows, unpaired count) among pairable events."""
    rows = np.flatnonzero(pairable)
    order = rows[np.lexsort((rows, ts[rows], tracking[rows], type_code[rows]))]
    if len(order) < 2:
        return order[:0], order[:0], len(order)
    a, b = order[:-1], order[1:]
    is_pair = ((phase[a] == _START) & (phase[b] == _STOP) & (type_code[a] == type_code[b])
               & (tracking[a] == tracking[b]))
    starts, stops = a[is_pair], b[is_pair]
    return starts, stops, len(order) - 2 * len(starts)


class _Columns:
    """Event columns pulled out of the decoded Structs once (C-level attribute getters)."""

    def __init__(self, events: list[_Event]) -> None:
        self.events = events
        g = lambda name: list(map(attrgetter(name), events))  # noqa: E731
        self.types: list[str] = g("event_type")
        self.type_names, self.type_code = _codes(self.types)
        phases = g("phase")
        self.phase = np.fromiter(map(_PHASE_CODE.get, phases, repeat(3, len(phases))),
                                 dtype=np.int8, count=len(phases))
        n = len(events)
        self.tracking, self.has_tracking = _ints(events, "tracking_id")
        self.core = np.fromiter(map(attrgetter("nc_idx"), events), dtype=np.int64, count=n)
        self.ts = np.fromiter(map(attrgetter("timestamp_ns"), events), dtype=np.int64, count=n)
        self.exec_id, self.has_exec = _ints(events, "data.exec_id")
        self.nc_ts, self.has_nc = _ints(events, "data.nc_timestamp_ns", 0)


def _select_sync(cols: _Columns) -> tuple[np.ndarray, np.ndarray, int]:
    """(is usable sync point, its cpu stamps, malformed sync points) per event."""
    code = cols.type_names.get(F.TIMESTAMP_SYNC_POINT, -1)
    is_sync_type = cols.type_code == code
    cpu = np.zeros(len(cols.ts), dtype=np.int64)
    rows = np.flatnonzero(is_sync_type)
    values, has_cpu = _ints(_take(cols.events, rows), "data.cpu_timestamp_ns")
    cpu[rows] = values
    usable = is_sync_type.copy()
    usable[rows] = has_cpu & cols.has_nc[rows]
    return usable, cpu, int(is_sync_type.sum() - usable.sum())


def _activities(cols: _Columns, raws: list[Any], malformed: int, dropped: dict[int, int]
                ) -> DeviceActivities:
    is_sync, sync_cpu, bad_sync = _select_sync(cols)
    consumed = cols.type_code == cols.type_names.get(F.TIMESTAMP_SYNC_POINT, -1)
    device = cols.has_nc & ~consumed  # events carrying a device stamp to map
    host = _map_clock(cols.ts, cols.core, cols.exec_id, cols.has_exec, cols.nc_ts, device,
                      is_sync, sync_cpu)
    pairable = ~consumed & cols.has_tracking & (cols.phase <= _STOP)
    starts, stops, unpaired = _pair(cols.type_code, cols.phase, cols.tracking, pairable, cols.ts)
    single = np.ones(len(cols.ts), dtype=bool)
    single[consumed] = False
    single[starts] = False
    single[stops] = False
    lone = np.flatnonzero(single)
    rows = np.concatenate([starts, lone])
    start_ns = host[rows]
    end_ns = np.concatenate([np.maximum(host[stops], host[starts]), host[lone]])
    order = np.lexsort((rows, start_ns))
    rows, start_ns, end_ns = rows[order], start_ns[order], end_ns[order]
    return _build(cols, rows, start_ns, end_ns, raws, malformed + bad_sync, unpaired, dropped)


def _build(cols: _Columns, rows: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray,
           raws: list[Any], malformed: int, unpaired: int, dropped: dict[int, int]
           ) -> DeviceActivities:
    kind_of_code = np.array([_KIND_BY_TYPE.get(t, -1) for t in cols.type_names], dtype=np.int16)
    kind = kind_of_code[cols.type_code[rows]] if len(rows) else np.zeros(0, np.int16)
    unknown = kind < 0
    kind[unknown] = np.where(cols.phase[rows][unknown] == _INSTANT, ActivityKind.INSTANT,
                             ActivityKind.GENERIC)
    kind = kind.astype(np.uint8)
    events = _take(cols.events, rows)
    exts = [_NO_EXT if x is None else x for x in map(attrgetter("data.neuron_profiler"), events)]
    types = _take(cols.types, rows)
    labels = list(map(attrgetter("op"), exts))
    for i in [i for i, op in enumerate(labels) if not op]:  # no op name: collective or type
        labels[i] = exts[i].collective or types[i]
    names, name_id = _codes(labels)
    seq, _ = _ints(events, "nrta_seq_id")
    corr, _ = _ints(exts, "correlation_id", 0)
    return DeviceActivities(
        start_ns=start_ns, end_ns=end_ns, kind=kind, queue=_QUEUE_BY_KIND[kind],
        core=cols.core[rows], thread_id=np.fromiter(map(attrgetter("thread_id"), events),
                                                    dtype=np.int64, count=len(events)),
        correlation_id=corr, exec_id=cols.exec_id[rows], seq_id=seq,
        name_id=name_id.astype(np.int32),
        modelled=np.fromiter(map(attrgetter("modelled"), exts), dtype=bool, count=len(exts)),
        names=list(names), data=list(map(bytes, _take(raws, rows))),
        malformed=malformed, unpaired=unpaired, dropped=dropped)


def parse_system_traces(payloads: Iterable[bytes | str], dropped: dict[int, int] | None = None
                        ) -> DeviceActivities:
    """Parse several fetch outputs as one stream (a start and its stop may be in different ones).

    ``dropped``: per-core counts the source reports outside the JSON (e.g. libnrt); when given it
    replaces the envelopes' own counts. Raises ``msgspec.DecodeError`` when a payload is not JSON
    or not a system-trace envelope.
    """
    with _gc_paused():
        events: list[_Event] = []
        raws: list[Any] = []
        malformed = 0
        reported: dict[int, int] = {}
        for payload in payloads:
            for part_events, part_raws, bad, ext in _envelopes(payload):
                counts, bad_ext = _dropped_of(ext)
                events.extend(part_events)
                raws.extend(part_raws)
                malformed += bad + bad_ext
                for core, n in counts.items():
                    reported[core] = reported.get(core, 0) + n
        drops = dict(reported if dropped is None else dropped)
        return _activities(_Columns(events), raws, malformed, drops)


class _InfoEnvelope(msgspec.Struct, gc=False):
    neuron_profiler: dict[str, Any] = {}


def envelope_extensions(payload: bytes | str) -> list[dict[str, Any]]:
    """Our extension object of each envelope in ``payload`` ({} where absent or not an object):
    chip, emulated, speed_factor, dropped_events as the emulator writes them."""
    buf = payload.encode() if isinstance(payload, str) else payload
    view = memoryview(buf)
    if bytes(view[:64]).lstrip().startswith(b"["):
        parts: list[Any] = msgspec.json.decode(view, type=list[msgspec.Raw])
    else:
        parts, pos = [], 0
        while pos < len(view):
            try:
                msgspec.json.decode(view[pos:], type=msgspec.Raw)
                parts.append(view[pos:])
                break
            except msgspec.DecodeError as err:
                match = _TRAILING.search(str(err))
                end = pos + int(match.group(1)) - 1 if match else pos  # msgspec counts from 1
                if end <= pos:
                    raise
                parts.append(view[pos:end])
                pos = end
    out = []
    for part in parts:
        try:
            out.append(msgspec.json.decode(part, type=_InfoEnvelope).neuron_profiler)
        except msgspec.ValidationError:
            out.append({})
    return out


def parse_system_trace(payload: bytes | str, dropped: dict[int, int] | None = None
                       ) -> DeviceActivities:
    """Parse one fetch output (see ``parse_system_traces``)."""
    return parse_system_traces([payload], dropped)


__all__: Sequence[str] = ("envelope_extensions", "parse_system_trace", "parse_system_traces")
