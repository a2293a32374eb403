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
- JSON that msgspec refuses (cut off, ``NaN``, bad text, nesting too deep) is read by the one
  repair policy of bad input (``trace/repair.py``, with ``REPAIR``'s settings): complete events
  before a cut are kept (``truncated``), repaired events counted in ``malformed``.

Why this shape: msgspec decodes each event into a small typed Struct in C (unknown keys skipped,
phases to enum members, no strings built for them), the int columns come out in one C-level pass
per row set, pairing/clock mapping are numpy sorts (skipped when the stream is already in time
order), not a per-event loop. Each row's ``data`` bytes are cut out of the payload only when a
consumer first reads ``DeviceActivities.data`` (one raw pass; most uses of the columns never do).
"""

from __future__ import annotations

import codecs
import dataclasses
import enum
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import cache
from itertools import chain, count, repeat
from operator import attrgetter, is_
from typing import Any, TypeVar

import msgspec
import numpy as np

from neuron_profiler.heap import gc_paused
from neuron_profiler.runtime_trace import format as F
from neuron_profiler.runtime_trace._pylists import codes, take
from neuron_profiler.runtime_trace.activities import ActivityKind, DeviceActivities, Queue
from neuron_profiler.runtime_trace.extension import ABSENT as _ABSENT
from neuron_profiler.runtime_trace.extension import I64 as _I64
from neuron_profiler.runtime_trace.extension import Extension, projection
from neuron_profiler.trace.repair import (
    COUNTED,
    ELEMENT,
    END,
    INCOMPLETE,
    NOTHING_COMPLETE,
    Policy,
    Repair,
    Unusable,
    checked,
    close_of,
    depth_limit,
    fix_utf8,
    repair_value,
    split_elements,
    with_headroom,
)

MAX_CORES = 4096  # an nc_idx outside [0, 4096) is a bad field, not a core
_START, _STOP, _INSTANT, _OTHER_PHASE = 0, 1, 2, 3
_T = TypeVar("_T")


class _Phase(enum.Enum):
    """Event phase decoded straight to a member (no str per event); any other string -> OTHER."""

    START = F.START
    STOP = F.STOP
    INSTANT = F.INSTANT
    OTHER = F.UNKNOWN

    def __init__(self, value: str) -> None:
        self.code = {F.START: _START, F.STOP: _STOP, F.INSTANT: _INSTANT}.get(value, _OTHER_PHASE)

    @classmethod
    def _missing_(cls, value: object) -> _Phase | None:
        return cls.OTHER if isinstance(value, str) else None


# The few extension keys the parser needs (all others stay in the row's raw data, for placement).
_Ext = projection(
    Extension, (F.X_OP, F.X_COLLECTIVE_OP, F.X_CORRELATION_ID, F.X_MODELLED, F.X_EXEC_ID), "_Ext"
)
_NO_EXT = _Ext()


class _Data(msgspec.Struct, gc=False, frozen=True):
    exec_id: _I64 | None = msgspec.field(default=_ABSENT, name=F.DATA_EXEC_ID)
    nc_timestamp_ns: _I64 | None = msgspec.field(default=_ABSENT, name=F.DATA_NC_TIMESTAMP_NS)
    cpu_timestamp_ns: _I64 | None = msgspec.field(default=_ABSENT, name=F.DATA_CPU_TIMESTAMP_NS)
    neuron_profiler: _Ext | None = msgspec.field(default=_NO_EXT, name=F.EXT_KEY)


_NO_DATA = _Data()


class _Event(msgspec.Struct, gc=False, kw_only=True):
    # Field order follows the runtime's JSON (msgspec's fast path for keys in declared order).
    event_type: str
    phase: _Phase = _Phase.OTHER
    tracking_id: _I64 | None = _ABSENT
    nc_idx: _I64 = 0
    thread_id: _I64 = 0
    timestamp_ns: _I64
    nrta_seq_id: _I64 | None = _ABSENT
    data: _Data = _NO_DATA


class _EnvExt(msgspec.Struct, gc=False):
    dropped_events: dict[str, int] = msgspec.field(default_factory=dict, name=F.X_DROPPED_EVENTS)


class _Envelope(msgspec.Struct, gc=False):
    events: list[_Event]
    neuron_profiler: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name=F.EXT_KEY)


class _RawEnvelope(msgspec.Struct, gc=False):
    events: list[msgspec.Raw]
    neuron_profiler: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name=F.EXT_KEY)


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
_get_type = attrgetter("event_type")
_get_ext = attrgetter("data.neuron_profiler")
_get_op = attrgetter("op")
_get_collective = attrgetter("collective")
_DROPPED_KEY = F.X_DROPPED_EVENTS.encode()
_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")
_CHUNK = 4096  # events per validation chunk on the slow (malformed input) path

# Every event's stream columns, in one C-level pass.
_STREAM = (
    "timestamp_ns",
    "tracking_id",
    "nc_idx",
    "data.exec_id",
    "data.nc_timestamp_ns",
    "phase.code",
)

_KIND_BY_TYPE = {
    **{t: ActivityKind.KERNEL for t in F.DEVICE_EXEC_TYPES},
    **{t: ActivityKind.DMA for t in F.DMA_TYPES},
    **{t: ActivityKind.COLLECTIVE for t in F.COLLECTIVE_TYPES},
    **{t: ActivityKind.RUNTIME_CALL for t in F.HOST_CALL_TYPES},
    **{t: ActivityKind.COLLECTIVE_WAIT for t in F.COLLECTIVE_WAIT_TYPES},
    **{t: ActivityKind.EXEC_STAGE for t in F.EXEC_STAGE_TYPES},
    F.EXT_HOST_SYNC: ActivityKind.HOST_SYNC,
    F.EXT_FALLBACK: ActivityKind.FALLBACK,
    F.EXT_EMULATOR_OVERHEAD: ActivityKind.OVERHEAD,
}
_QUEUE_BY_KIND = np.full(len(ActivityKind), Queue.OTHER, dtype=np.uint8)
for _kind, _queue in (
    (ActivityKind.KERNEL, Queue.COMPUTE),
    (ActivityKind.DMA, Queue.DMA),
    (ActivityKind.COLLECTIVE, Queue.COLLECTIVE),
    (ActivityKind.COLLECTIVE_WAIT, Queue.COLLECTIVE),
    (ActivityKind.EXEC_STAGE, Queue.HOST),
    (ActivityKind.RUNTIME_CALL, Queue.HOST),
    (ActivityKind.HOST_SYNC, Queue.HOST),
    (ActivityKind.FALLBACK, Queue.HOST),
    (ActivityKind.OVERHEAD, Queue.HOST),
):
    _QUEUE_BY_KIND[_kind] = _queue


class _Part(msgspec.Struct, gc=False):
    """One decoded envelope: its events, where their raw data comes from, and what was wrong."""

    events: list[_Event]
    source: Any  # the envelope's bytes (raw data cut out lazily) ...
    raws: list[msgspec.Raw] | None  # ... or, on the slow path, the raw data of each kept event
    malformed: int
    ext: Any
    truncated: bool = False


def _envelopes(payload: bytes | str) -> Iterator[_Part]:
    """Decoded envelopes of one payload: a single envelope, envelopes one after another, or a
    JSON list of envelopes; what msgspec refuses is read by the repair policy (``_salvaged``).
    Raises ``msgspec.DecodeError`` when a part is not a system-trace envelope (``Unusable``
    when the payload is cut off or damaged before its first complete event)."""
    buf = payload.encode() if isinstance(payload, str) else bytes(payload)
    if buf.startswith(_BOM):  # some Windows tools write one: dropped
        buf = buf[len(_BOM) :]
    fast = _utf8(buf)  # msgspec does not check the text it skips: bad bytes take the slow path
    view = memoryview(buf)
    if bytes(view[:64]).lstrip().startswith(b"["):
        try:
            raws = msgspec.json.decode(view, type=list[msgspec.Raw]) if fast else None
        except (msgspec.DecodeError, RecursionError):
            raws = None
        if raws is None:
            yield from _salvaged_list(buf, fast)
            return
        for raw in raws:
            yield _events_of(raw)
        return
    pos, limit = 0, cache(depth_limit)
    while pos < len(view):
        end = pos
        if fast:
            try:
                yield _events_of(view[pos:])
                return
            except msgspec.ValidationError:
                raise
            except (msgspec.DecodeError, RecursionError) as err:  # (nesting too deep for msgspec)
                match = _TRAILING.search(str(err)) if isinstance(err, msgspec.DecodeError) else None
                end = pos + int(match.group(1)) - 1 if match else pos  # msgspec counts from 1
        if end > pos:  # another envelope follows: decode up to it
            yield _events_of(view[pos:end])
            pos = end
            continue
        if pos and _EVENTS_ARRAY.search(buf, pos) is None:  # text that is no envelope: damage
            part, used = _events_of(b'{"events":[]}'), None
            part.truncated = True
        else:
            part, used = _salvaged(buf, pos, limit, first=pos == 0)
        yield part
        if used is None:
            return
        pos = used
        while pos < len(buf) and buf[pos] in _WS:
            pos += 1


# The repair policy's settings for system-trace files (neuron_profiler.trace.repair): their
# fields are typed numbers and ids, so an odd value (NaN, Infinity, beyond float range, a bare
# word, an integer beyond 64 bits) becomes null, and the field is left out as a mistyped one is;
# a data object nested deeper than the decoder takes becomes TOO_DEEP. Counted in ``malformed``.
TOO_DEEP = {F.EXT_KEY: {F.X_TOO_DEEP: True}}  # what replaces a value nested too deep
_TOO_DEEP_JSON = msgspec.json.encode(TOO_DEEP)
REPAIR = Policy(marker=lambda limit: _TOO_DEEP_JSON, odd_as_text=False, int_bits=64)
_BOM = b"\xef\xbb\xbf"
_WS = b" \t\r\n"
_EVENTS_ARRAY = re.compile(rb'"events"\s*:\s*\[')
_EXT_MEMBER = b"," + msgspec.json.encode(F.EXT_KEY) + b":"
_decode_raw = msgspec.json.Decoder(msgspec.Raw).decode
_decode_keys = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode


def _utf8(buf: bytes, block: int = 1 << 20) -> bool:
    """Whether ``buf`` is UTF-8 (checked a block at a time: no copy of a large payload)."""
    if buf.isascii():
        return True
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(buf)
    try:
        for lo in range(0, len(buf), block):
            decoder.decode(view[lo : lo + block])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def _checked(text: bytes, limit: Callable[[], int]) -> tuple[bytes, Repair] | None:
    """``checked`` by ``REPAIR``, with bytes that are not UTF-8 replaced first (msgspec does not
    check the text it skips)."""
    text, bad_bytes = fix_utf8(text)
    got = checked(text, limit, REPAIR)
    return got if got is None or not bad_bytes else (got[0], got[1] | Repair.TEXT)


def sanitized(raw: bytes) -> tuple[bytes, int] | None:
    """One event (or data object) rewritten by ``REPAIR``, and 1 if it had anything the policy
    counts (None: not JSON even then)."""
    fixed, how = repair_value(raw, None, REPAIR)
    try:
        with_headroom(_decode_raw, fixed)
    except (msgspec.DecodeError, RecursionError):
        return None
    return fixed, int(bool(how & COUNTED))


def _salvaged(
    buf: bytes, pos: int, limit: Callable[[], int], first: bool
) -> tuple[_Part, int | None]:
    """The envelope at ``pos`` that msgspec refuses, read by the repair policy: its events array
    split into elements without decoding them, each one msgspec refuses repaired (``REPAIR``,
    counted in ``malformed``), the complete events before a cut or damage kept (``truncated``).
    Returns the part and where the envelope ends (None: the data ends or breaks first)."""
    found = _EVENTS_ARRAY.search(buf, pos)
    if found is None:
        raise msgspec.DecodeError("no system-trace envelope before the data ends")
    texts, repaired, close = [], 0, None
    for kind, start, end in split_elements(buf, found.end()):
        if kind == ELEMENT or (kind == INCOMPLETE and buf[start:].strip()):  # (cut right after?)
            got = _checked(buf[start : end if kind == ELEMENT else None].strip(), limit)
            if got is not None:
                texts.append(got[0])
                repaired += bool(got[1] & COUNTED)
            if kind == ELEMENT and got is not None:
                continue
        elif kind == END:
            close = start
        break  # the array's end, a cut, or damage (an element that is not JSON even repaired)
    tail, used = b"}", None  # the envelope's keys after the array; where it ends
    end = close_of(buf, 2, close) if close is not None else None
    if end is not None:
        tail, used = buf[close + 1 : end], end
    elif first and not texts:
        raise Unusable(NOTHING_COMPLETE)
    keys, bad_keys = _keys_of(buf[pos : found.start()] + b'"events":[]' + tail, limit)
    ext = keys.get(F.EXT_KEY)
    part = _events_of(
        b'{"events":['
        + b",".join(texts)
        + b"]"
        + (_EXT_MEMBER + bytes(ext) if ext is not None else b"")
        + b"}"
    )
    part.malformed += repaired + bad_keys
    part.truncated = used is None
    return part, used


def _keys_of(text: bytes, limit: Callable[[], int]) -> tuple[dict[str, msgspec.Raw], int]:
    """An envelope's keys (its events left out), repaired if need be (1: counted), {} if they are
    not even then an object."""
    text, bad_bytes = fix_utf8(text)
    try:
        return _decode_keys(text), int(bad_bytes)
    except (msgspec.DecodeError, RecursionError):
        pass
    fixed, how = repair_value(text, limit(), REPAIR)
    try:
        return _decode_keys(fixed), int(bool(how & COUNTED))
    except (msgspec.DecodeError, RecursionError):
        return {}, 1


def _salvaged_list(buf: bytes, fast: bool) -> Iterator[_Part]:
    """A JSON list of envelopes that msgspec refuses: each element read on its own (by msgspec
    when it can: ``fast``), a cut list keeping its complete envelopes and what the cut one
    holds."""
    limit = cache(depth_limit)
    seen = False
    for kind, start, end in split_elements(buf, buf.index(b"[") + 1):
        if kind == ELEMENT:
            part = None
            if fast:
                try:
                    part = _events_of(buf[start:end])
                except msgspec.ValidationError:
                    raise
                except (msgspec.DecodeError, RecursionError):
                    pass
            yield part if part is not None else _salvaged(buf[start:end], 0, limit, False)[0]
            seen = True
            continue
        if kind == END:
            return
        if _EVENTS_ARRAY.search(buf, start) is not None:  # cut inside an envelope's events
            part = _salvaged(buf, start, limit, first=not seen)[0]
        elif seen:  # cut before the next envelope's events: it adds nothing
            part = _events_of(b'{"events":[]}')
        else:
            raise Unusable(NOTHING_COMPLETE)
        part.truncated = True
        yield part
        return


def _events_of(part: Any) -> _Part:
    """Decode one envelope (raw data of its events left in ``part`` when all are well-typed)."""
    try:
        env = _decode_envelope(part)
        return _Part(env.events, part, None, 0, env.neuron_profiler)
    except msgspec.ValidationError:
        pass  # some event is mistyped: validate chunk by chunk, then event by event
    env_raw = _decode_raw_envelope(part)  # raises when the envelope itself is unusable
    events: list[_Event] = []
    raws = []
    malformed = 0
    items = env_raw.events
    for lo in range(0, len(items), _CHUNK):
        chunk = items[lo : lo + _CHUNK]
        try:
            good = list(zip(_decode_events(b"[" + b",".join(chunk) + b"]"), chunk, strict=True))
        except msgspec.ValidationError:
            good = []
            for raw in chunk:
                try:
                    good.append((_decode_event(raw), raw))
                except msgspec.ValidationError:
                    fixed = sanitized(bytes(raw))  # numbers msgspec cannot hold: left out
                    try:
                        if fixed is None:
                            raise msgspec.ValidationError("not JSON")
                        good.append((_decode_event(fixed[0]), msgspec.Raw(fixed[0])))
                        malformed += fixed[1]
                    except msgspec.ValidationError:
                        malformed += 1
        for event, raw in good:
            events.append(event)
            raws.append(_decode_data_raw(raw).data)
    return _Part(events, None, raws, malformed, env_raw.neuron_profiler)


class RowData(Sequence[bytes]):
    """``DeviceActivities.data``: each row's ``data`` object as JSON bytes, cut out of the
    payload on first use (one raw msgspec pass), then held as a plain list."""

    __slots__ = ("_parts", "_rows", "_list")

    def __init__(self, parts: list[_Part], rows: np.ndarray) -> None:
        # Only the envelopes' bytes (or slow-path raws) are kept, not the decoded events.
        self._parts: list[tuple[Any, list[Any] | None]] | None = [(p.source, p.raws) for p in parts]
        self._rows = rows
        self._list: list[bytes] | None = None

    def _materialise(self) -> list[bytes]:
        if self._list is None:
            raws: list[Any] = []
            for source, part_raws in self._parts or ():
                raws.extend(
                    part_raws
                    if part_raws is not None
                    else map(_get_data, _decode_raw_data(source).events)
                )
            self._list = list(map(bytes, take(raws, self._rows)))
            self._parts = None  # the payload can go
        return self._list

    def decode(self, row_type: type[_T]) -> list[_T]:
        """Each row's data decoded as ``row_type`` (a msgspec type) in one pass over the payload,
        without cutting the rows' bytes out first. Raises ``msgspec.ValidationError`` when some
        row's data does not fit ``row_type`` (other events' data may be anything)."""
        if self._list is None:  # the payload is still here
            try:
                out: list[Any] = []
                for source, part_raws in self._parts:
                    if part_raws is not None:
                        out.extend(decode_rows(part_raws, row_type))
                    else:
                        out.extend(map(_get_data, _wrapped(row_type)(source).events))
                return take(out, self._rows)
            except msgspec.ValidationError:
                pass  # maybe an event that is not a row: decode the rows' own bytes
        return decode_rows(self._materialise(), row_type)

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, i):  # type: ignore[no-untyped-def]
        return self._materialise()[i]

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._materialise())

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented

    def __repr__(self) -> str:
        return f"RowData({len(self)} rows{'' if self._list is not None else ', not read yet'})"


@cache
def _wrapped(row_type: type) -> Any:
    """Decoder of an envelope whose events' data are ``row_type`` (absent data: ``{}``)."""
    empty = msgspec.json.Decoder(row_type).decode
    event = msgspec.defstruct(
        "_RowEvent",
        [("data", row_type, msgspec.field(default_factory=lambda: empty(b"{}")))],
        gc=False,
    )
    envelope = msgspec.defstruct("_RowEnvelope", [("events", list[event])], gc=False)
    return msgspec.json.Decoder(envelope).decode


def decode_rows(data: Sequence[Any], row_type: type[_T]) -> list[_T]:
    """Rows' data (``DeviceActivities.data``: the parser's lazy RowData or plain bytes) decoded
    as ``row_type`` in one pass."""
    if isinstance(data, RowData):
        return data.decode(row_type)
    if not len(data):
        return []
    return msgspec.json.decode(b"[" + b",".join(map(bytes, data)) + b"]", type=list[row_type])


def _dropped_of(ext_raw: Any) -> tuple[dict[int, int], int]:
    """Per-core drop counts from our envelope extension; (counts, 1 if it was malformed)."""
    if not len(ext_raw) or bytes(ext_raw) == b"null":
        return {}, 0
    try:
        counts = _decode_env_ext(ext_raw).dropped_events
        return {int(core): int(n) for core, n in counts.items()}, 0
    except (msgspec.ValidationError, msgspec.DecodeError, ValueError):
        return {}, 1


def _matrix(objs: list[Any], names: Sequence[str]) -> np.ndarray:
    """int64 (len(objs), len(names)) of ``obj.name`` (dotted), JSON nulls -> ``_ABSENT``; one
    C-level pass. Raises AttributeError where an intermediate object is null."""
    n, width = len(objs), len(names)
    get = attrgetter(*names) if width > 1 else (lambda o, g=attrgetter(names[0]): (g(o),))
    try:
        flat = np.fromiter(chain.from_iterable(map(get, objs)), dtype=np.int64, count=n * width)
    except TypeError:  # explicit JSON nulls
        flat = np.array(
            [_ABSENT if v is None else v for v in chain.from_iterable(map(get, objs))],
            dtype=np.int64,
        )
    return flat.reshape(n, width)


def _present(col: np.ndarray, missing: int) -> tuple[np.ndarray, np.ndarray]:
    """(column with absent -> ``missing``, presence mask) of a ``_matrix`` column."""
    col = np.ascontiguousarray(col)
    present = col != _ABSENT
    col[~present] = missing
    return col, present


def _nearest(
    group: list[np.ndarray], order: np.ndarray, is_sync: np.ndarray, backward: bool
) -> np.ndarray:
    """For each element, the position of the sync point of its group at or before it (or the
    first after it when ``backward``) in ``order``; -1 when there is none."""
    n = len(order)
    pos = np.where(is_sync[order], np.arange(n), -1 if not backward else n)
    found = np.maximum.accumulate(pos) if not backward else np.minimum.accumulate(pos[::-1])[::-1]
    valid = (found >= 0) & (found < n)
    safe = np.clip(found, 0, n - 1)
    for key in group:
        ordered = key[order]
        valid &= ordered[safe] == ordered
    out = np.full(n, -1, dtype=np.int64)
    out[order] = np.where(valid, order[safe], -1)
    return out


def _map_clock(
    core: np.ndarray,
    exec_id: np.ndarray,
    has_exec: np.ndarray,
    nc_ts: np.ndarray,
    ts: np.ndarray,
    device: np.ndarray,
    is_sync: np.ndarray,
    sync_cpu: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(host-clock ns of every event, mapped) for ``device`` rows, through their core's sync
    points only: the one of the same (core, exec_id) when there is one (the latest at or before
    in device time, else the earliest after), else interpolated between the core's sync points
    around the stamp (extrapolated from the nearest two), which follows a drifting device clock.
    A device row whose core has no sync point is not mapped (its raw stamp can be hours off)."""
    host = ts.copy()
    mapped = ~device
    rows = np.flatnonzero(device)
    sync = np.flatnonzero(is_sync)
    if len(rows) == 0 or len(sync) == 0:
        return host, mapped
    for c in np.unique(core[rows]).tolist():
        d = rows[core[rows] == c]
        s = sync[core[sync] == c]
        if len(s) == 0:
            continue
        nc_s, first = np.unique(nc_ts[s], return_index=True)  # a sync point fetched twice
        cpu_s, q = sync_cpu[s][first], nc_ts[d]
        if len(nc_s) == 1:
            host[d] = cpu_s[0] + (q - nc_s[0])
        else:
            i = np.clip(np.searchsorted(nc_s, q, side="right") - 1, 0, len(nc_s) - 2)
            slope = (cpu_s[i + 1] - cpu_s[i]) / (nc_s[i + 1] - nc_s[i])
            host[d] = cpu_s[i] + np.rint((q - nc_s[i]) * slope).astype(np.int64)
        mapped[d] = True
    keyed = rows[has_exec[rows]]
    keyed_sync = sync[has_exec[sync]]
    if len(keyed) and len(keyed_sync):
        sel = np.concatenate([keyed, keyed_sync])
        is_s = np.concatenate([np.zeros(len(keyed), bool), np.ones(len(keyed_sync), bool)])
        group = [core[sel], exec_id[sel]]
        order = np.lexsort((~is_s, nc_ts[sel], *reversed(group)))  # a tie: the sync point first
        before = _nearest(group, order, is_s, backward=False)
        after = _nearest(group, order, is_s, backward=True)
        exact = np.where(before >= 0, before, after)[: len(keyed)]
        hit = exact >= 0
        rows_hit, sync_hit = keyed[hit], sel[exact[hit]]
        host[rows_hit] = sync_cpu[sync_hit] + (nc_ts[rows_hit] - nc_ts[sync_hit])
        mapped[rows_hit] = True
    return host, mapped


def _pair(
    type_code: np.ndarray,
    phase: np.ndarray,
    tracking: np.ndarray,
    pairable: np.ndarray,
    ts: np.ndarray,
    ts_sorted: bool,
) -> tuple[np.ndarray, np.ndarray, int]:
    """(start rows, their stop rows, unpaired count) among pairable events: sorted by (type,
    tracking id, ts, row), a start pairs with the next row when that is its stop."""
    rows = np.flatnonzero(pairable)
    if not ts_sorted:
        rows = rows[np.argsort(ts[rows], kind="stable")]
    order = rows[np.lexsort((tracking[rows], type_code[rows]))]  # stable: keeps (ts, row)
    if len(order) < 2:
        return order[:0], order[:0], len(order)
    a, b = order[:-1], order[1:]
    is_pair = (
        (phase[a] == _START)
        & (phase[b] == _STOP)
        & (type_code[a] == type_code[b])
        & (tracking[a] == tracking[b])
    )
    starts, stops = a[is_pair], b[is_pair]
    return starts, stops, len(order) - 2 * len(starts)


class _Columns:
    """Event columns pulled out of the decoded Structs once (C-level attribute getters)."""

    def __init__(self, events: list[_Event]) -> None:
        self.events = events
        n = len(events)
        self.type_names, self.type_code = codes(map(_get_type, events), n)
        m = _matrix(events, _STREAM)
        self.ts = np.ascontiguousarray(m[:, 0])
        self.tracking, self.has_tracking = _present(m[:, 1], -1)
        self.core = np.ascontiguousarray(m[:, 2])
        self.exec_id, self.has_exec = _present(m[:, 3], -1)
        self.nc_ts, self.has_nc = _present(m[:, 4], 0)
        self.phase = m[:, 5].astype(np.int8)
        self.ts_sorted = bool((self.ts[1:] >= self.ts[:-1]).all())


def _select_sync(cols: _Columns) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(sync-point rows, usable sync point, its cpu stamps, malformed sync points) per event."""
    code = (
        cols.type_names.index(F.TIMESTAMP_SYNC_POINT)
        if (F.TIMESTAMP_SYNC_POINT in cols.type_names)
        else -1
    )
    is_sync_type = cols.type_code == code
    cpu = np.zeros(len(cols.ts), dtype=np.int64)
    rows = np.flatnonzero(is_sync_type)
    values, has_cpu = _present(
        _matrix(take(cols.events, rows), ("data.cpu_timestamp_ns",))[:, 0], -1
    )
    cpu[rows] = values
    usable = is_sync_type.copy()
    usable[rows] = has_cpu & cols.has_nc[rows]
    return is_sync_type, usable, cpu, int(is_sync_type.sum() - usable.sum())


def _activities(
    cols: _Columns, parts: list[_Part], malformed: int, dropped: dict[int, int], drops_known: bool
) -> DeviceActivities:
    odd_core = (cols.core < 0) | (cols.core >= MAX_CORES)  # kept without it (core 0), counted
    if odd_core.any():
        cols.core = np.where(odd_core, 0, cols.core)
        malformed += int(odd_core.sum())
    consumed, is_sync, sync_cpu, bad_sync = _select_sync(cols)
    device = cols.has_nc & ~consumed  # events whose timestamp is the device clock
    host, mapped = _map_clock(
        cols.core, cols.exec_id, cols.has_exec, cols.nc_ts, cols.ts, device, is_sync, sync_cpu
    )
    unmapped = int((~mapped).sum())
    consumed = consumed | ~mapped
    pairable = ~consumed & cols.has_tracking & (cols.phase <= _STOP)
    starts, stops, unpaired = _pair(
        cols.type_code, cols.phase, cols.tracking, pairable, cols.ts, cols.ts_sorted
    )
    single = ~consumed
    single[starts] = False
    single[stops] = False
    lone = np.flatnonzero(single)
    rows = np.concatenate([starts, lone])
    start_ns = host[rows]
    end_ns = np.concatenate([np.maximum(host[stops], host[starts]), host[lone]])
    order = np.lexsort((rows, start_ns))
    rows, start_ns, end_ns = rows[order], start_ns[order], end_ns[order]
    acts = _build(cols, rows, start_ns, end_ns, parts, malformed + bad_sync, unpaired, dropped)
    kind = acts.kind
    host_timed = ~cols.has_nc[rows] & np.isin(kind, [ActivityKind.DMA])
    shown = np.zeros(len(cols.type_code), dtype=bool)
    shown[rows] = True
    shown[stops] = True
    hidden = np.bincount(cols.type_code[~shown], minlength=len(cols.type_names))
    return dataclasses.replace(
        acts,
        drops_known=drops_known,
        unmapped=unmapped,
        host_timed=host_timed,
        hidden_types={
            t: int(n) for t, n in zip(cols.type_names, hidden.tolist(), strict=True) if n
        },
    )


def _row_exts(events: list[_Event]) -> list[_Ext] | None:
    """Each kept row's extension object; None when no row has one (the real runtime's stream)."""
    exts = list(map(_get_ext, events))
    if all(map(is_, exts, repeat(_NO_EXT))):
        return None
    if None in exts:  # an explicit JSON null
        exts = [_NO_EXT if x is None else x for x in exts]
    return exts


def _row_columns(
    events: list[_Event], exts: list[_Ext] | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """thread, seq, correlation and modelled columns of the kept rows."""
    m = _matrix(events, ("thread_id", "nrta_seq_id"))
    n = len(events)
    if exts is None:
        corr, modelled = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    else:
        x = _matrix(exts, ("correlation_id", "modelled"))
        corr, modelled = _present(x[:, 0], 0)[0], x[:, 1] != 0
    return np.ascontiguousarray(m[:, 0]), _present(m[:, 1], -1)[0], corr, modelled


def _labels(
    cols: _Columns, exts: list[_Ext] | None, type_code: np.ndarray
) -> tuple[list[str], np.ndarray]:
    """Row names: the extension's op, else its collective, else the event type."""
    table: defaultdict[str, int] = defaultdict(count().__next__)
    label = np.full(len(type_code), -1, dtype=np.int64)
    if exts is not None and len(exts):
        op_names, op_code = codes(map(_get_op, exts), len(exts))
        label = np.array([table[o] if o else -1 for o in op_names], dtype=np.int64)[op_code]
        need = np.flatnonzero(label < 0)
        if len(need):
            sub = take(exts, need)
            coll_names, coll_code = codes(map(_get_collective, sub), len(sub))
            label[need] = np.array([table[c] if c else -1 for c in coll_names], dtype=np.int64)[
                coll_code
            ]
    need = np.flatnonzero(label < 0)
    if len(need):
        by_type = np.array([table[t] for t in cols.type_names], dtype=np.int64)
        label[need] = by_type[type_code[need]]
    names = list(table)
    used = np.zeros(len(names), dtype=bool)
    used[label] = True
    remap = np.cumsum(used) - 1
    return [s for s, u in zip(names, used.tolist(), strict=True) if u], remap[label]


def _build(
    cols: _Columns,
    rows: np.ndarray,
    start_ns: np.ndarray,
    end_ns: np.ndarray,
    parts: list[_Part],
    malformed: int,
    unpaired: int,
    dropped: dict[int, int],
) -> DeviceActivities:
    kind_of_code = np.array([_KIND_BY_TYPE.get(t, -1) for t in cols.type_names], dtype=np.int16)
    type_code = cols.type_code[rows]
    kind = kind_of_code[type_code] if len(rows) else np.zeros(0, np.int16)
    unknown = kind < 0
    kind[unknown] = np.where(
        cols.phase[rows][unknown] == _INSTANT, ActivityKind.INSTANT, ActivityKind.GENERIC
    )
    kind = kind.astype(np.uint8)
    events = take(cols.events, rows)
    exts = _row_exts(events)
    thread, seq, corr, modelled = _row_columns(events, exts)
    names, name_id = _labels(cols, exts, type_code)
    exec_id = cols.exec_id[rows]
    if exts is not None:  # the emulator says a runtime call's exec_id in its extension
        ext_exec = _present(_matrix(exts, ("exec_id",))[:, 0], -1)[0]
        exec_id = np.where(exec_id >= 0, exec_id, ext_exec)
    return DeviceActivities(
        start_ns=start_ns,
        end_ns=end_ns,
        kind=kind,
        queue=_QUEUE_BY_KIND[kind],
        core=cols.core[rows],
        thread_id=thread,
        correlation_id=corr,
        exec_id=exec_id,
        seq_id=seq,
        name_id=name_id.astype(np.int32),
        modelled=modelled,
        names=names,
        data=RowData(parts, rows),
        malformed=malformed,
        unpaired=unpaired,
        dropped=dropped,
    )


def parse_system_traces(
    payloads: Iterable[bytes | str], dropped: dict[int, int] | None = None
) -> DeviceActivities:
    """Parse several fetch outputs as one stream (a start and its stop may be in different ones).

    ``dropped``: per-core counts the source reports outside the JSON (e.g. libnrt); when given it
    replaces the envelopes' own counts. Raises ``msgspec.DecodeError`` when a payload is not JSON
    or not a system-trace envelope.
    """
    with gc_paused():
        parts: list[_Part] = []
        malformed = 0
        reported: dict[int, int] = {}
        for payload in payloads:
            for part in _envelopes(payload):
                counts, bad_ext = _dropped_of(part.ext)
                parts.append(part)
                malformed += part.malformed + bad_ext
                for core, n in counts.items():
                    reported[core] = reported.get(core, 0) + n
        events = (
            parts[0].events
            if len(parts) == 1
            else list(chain.from_iterable(p.events for p in parts))
        )
        drops = dict(reported if dropped is None else dropped)
        known = dropped is not None or any(
            len(p.ext) and _DROPPED_KEY in bytes(p.ext) for p in parts
        )
        acts = _activities(_Columns(events), parts, malformed, drops, known)
        cut = sum(p.truncated for p in parts)
        return dataclasses.replace(acts, truncated=cut) if cut else acts


class _SyncProbe(msgspec.Struct, gc=False):
    event_type: Any = None
    nc_idx: Any = None


_decode_probe = msgspec.json.Decoder(_SyncProbe).decode


class SyncPoints:
    """The latest sync points of each core, kept across fetches: the runtime hands each event
    out once, so a later fetch may hold device stamps but no sync point to map them with::

        memory = SyncPoints()
        payload = b"[" + memory.envelope() + b"," + fetch + b"]"   # when envelope() is not None
        memory.keep(fetch)
    """

    def __init__(self, per_core: int = 64) -> None:
        self._per_core = per_core
        self._by_core: dict[Any, list[bytes]] = {}

    def keep(self, payload: bytes) -> None:
        """Remember the sync points of one fetch output (a cheap scan when it has none)."""
        if F.TIMESTAMP_SYNC_POINT.encode() not in payload:
            return
        parts = [bytes(p) for p in _envelopes_raw(payload)]  # what msgspec can read
        for part in parts:
            try:
                events = _decode_raw_envelope(part).events
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                continue  # the parse of the same payload reports it
            for raw in events:
                probe = _decode_probe(raw)
                if probe.event_type == F.TIMESTAMP_SYNC_POINT:
                    kept = self._by_core.setdefault(probe.nc_idx, [])
                    kept.append(bytes(raw))
                    del kept[: -self._per_core]

    def envelope(self) -> bytes | None:
        """An envelope of every kept sync point (None when there is none)."""
        events = [e for kept in self._by_core.values() for e in kept]
        if not events:
            return None
        return b'{"events":[' + b",".join(events) + b'],"data_version":%d}' % F.DATA_VERSION


def _envelopes_raw(payload: bytes) -> list[Any]:
    """The whole envelopes of a payload as raw JSON, without decoding their events; a part
    msgspec cannot read (cut off, NaN tokens) ends the list: the parse reads it the slow way."""
    view = memoryview(payload)[len(_BOM) if payload.startswith(_BOM) else 0 :]
    if bytes(view[:64]).lstrip().startswith(b"["):
        try:
            return msgspec.json.decode(view, type=list[msgspec.Raw])
        except (msgspec.DecodeError, RecursionError):
            return []
    parts, pos = [], 0
    while pos < len(view):
        try:
            msgspec.json.decode(view[pos:], type=msgspec.Raw)
            parts.append(view[pos:])
            break
        except RecursionError:  # nesting too deep for msgspec: the parse reads it the slow way
            break
        except msgspec.DecodeError as err:
            match = _TRAILING.search(str(err))
            end = pos + int(match.group(1)) - 1 if match else pos  # msgspec counts from 1
            if end <= pos:
                break
            parts.append(view[pos:end])
            pos = end
    return parts


class _VersionEnvelope(msgspec.Struct, gc=False):
    data_version: Any = None


def envelope_versions(payload: bytes | str) -> list[object]:
    """The ``data_version`` of each envelope in ``payload`` that msgspec reads whole (None
    where absent; a digit string as its int): what ``merge`` compares across its inputs. A part
    cut off before its version (the key comes after the events) gives none."""
    parts = _envelopes_raw(payload.encode() if isinstance(payload, str) else payload)
    out: list[object] = []
    for part in parts:
        try:
            version = msgspec.json.decode(part, type=_VersionEnvelope).data_version
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            continue
        if isinstance(version, str) and version.isdigit():
            version = int(version)
        out.append(version)
    return out


class _InfoEnvelope(msgspec.Struct, gc=False):
    neuron_profiler: dict[str, Any] = msgspec.field(default_factory=dict, name=F.EXT_KEY)


def envelope_extensions(payload: bytes | str) -> list[dict[str, Any]]:
    """Our extension object of each envelope in ``payload`` ({} where absent or not an object):
    chip, emulated, speed_factor, dropped_events as the emulator writes them."""
    parts = _envelopes_raw(payload.encode() if isinstance(payload, str) else payload)
    out = []
    for part in parts:
        try:
            out.append(msgspec.json.decode(part, type=_InfoEnvelope).neuron_profiler)
        except (msgspec.ValidationError, RecursionError):
            out.append({})
    return out


class _MemData(msgspec.Struct, gc=False, frozen=True):
    usage_type: str | None = msgspec.field(default=None, name=F.DATA_USAGE_TYPE)
    usage_total: _I64 | None = msgspec.field(default=None, name=F.DATA_USAGE_TYPE_TOTAL)
    total: _I64 | None = msgspec.field(default=None, name=F.DATA_TOTAL_BYTES)


class _MemEvent(msgspec.Struct, gc=False, kw_only=True):
    event_type: str
    phase: _Phase = _Phase.OTHER
    tracking_id: _I64 | None = _ABSENT
    nc_idx: _I64 = 0
    timestamp_ns: _I64
    data: _MemData = _MemData()


class _MemEnvelope(msgspec.Struct, gc=False):
    events: list[msgspec.Raw]


@dataclasses.dataclass(frozen=True)
class MemoryEvent:
    """One device-memory call as the runtime reported it: the usage category (from the call's
    intent when its result does not repeat it) and the figures after the call."""

    ts_ns: int
    core: int
    usage_type: str
    usage_total: int
    total: int


def memory_events(payload: bytes | str) -> tuple[list[MemoryEvent], int]:
    """The ``nrt_dma_mem_alloc`` / ``nrt_dma_mem_dealloc`` results of a fetch output, in time
    order, and how many of their events could not be used (no usage type, no figures, mistyped).
    A result takes its usage type from the intent of the same ``tracking_id`` on its core."""
    raw = payload.encode() if isinstance(payload, str) else payload
    events: list[_MemEvent] = []
    bad = 0
    for part in _envelopes_raw(raw):
        try:
            envelope = msgspec.json.decode(part, type=_MemEnvelope)
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            continue  # not an envelope of events: the main parse counts it
        for text in envelope.events:
            if F.NRT_DMA_MEM_ALLOC.encode() not in bytes(text) and (
                F.NRT_DMA_MEM_DEALLOC.encode() not in bytes(text)
            ):
                continue
            try:
                event = msgspec.json.decode(text, type=_MemEvent)
            except (msgspec.ValidationError, msgspec.DecodeError):
                bad += 1
                continue
            if event.event_type in F.DMA_MEM_TYPES:
                events.append(event)
    events.sort(key=attrgetter("timestamp_ns"))
    intent: dict[tuple[int, int | None], str] = {}
    out = []
    for e in events:
        d = e.data
        if d.usage_type is not None and e.phase is not _Phase.STOP:
            intent[(e.nc_idx, e.tracking_id)] = d.usage_type
        if d.usage_total is None and d.total is None:
            continue  # an intent: its figures come with the result
        usage = d.usage_type or intent.pop((e.nc_idx, e.tracking_id), None)
        if usage is None or d.usage_total is None or d.total is None:
            bad += 1
            continue
        out.append(MemoryEvent(e.timestamp_ns, e.nc_idx, usage, d.usage_total, d.total))
    return out, bad


def parse_system_trace(
    payload: bytes | str, dropped: dict[int, int] | None = None
) -> DeviceActivities:
    """Parse one fetch output (see ``parse_system_traces``)."""
    return parse_system_traces([payload], dropped)


# The event-type -> activity kind rule and the queue of each kind, for other readers of the same
# event types (neuron_profiler.explorer): one rule, one place.
KIND_BY_TYPE = _KIND_BY_TYPE
QUEUE_BY_KIND = _QUEUE_BY_KIND

__all__: Sequence[str] = (
    "KIND_BY_TYPE",
    "QUEUE_BY_KIND",
    "SyncPoints",
    "decode_rows",
    "envelope_extensions",
    "memory_events",
    "parse_system_trace",
    "parse_system_traces",
)
