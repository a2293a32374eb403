"""The Python side of one Kineto session: source start/stop, parse, link, window, record buffer.

The C++ bridge calls ``Controller.start()`` when Kineto starts the session and
``Controller.stop(window, correlation intervals)`` when it stops; ``stop`` returns the record
buffer (numpy columns) the bridge converts into Kineto activities, plus the device infos,
deviceProperties and metadata. ``build_session_result`` is a pure function of its inputs, so it is
tested without torch or the compiler::

    result = build_session_result(payload, window=(t0, t1), intervals=Intervals.empty(),
                                  host_pid=os.getpid(), links_by_correlation=True, props=[...])

Window: an activity is kept when the host call that launched it lies inside [t0, t1] (work that
finishes after t1 is kept); the rest are excluded and counted apart from runtime drops.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np

from neuron_profiler.errors import TraceLoadError
from neuron_profiler.runtime_trace import layout as L
from neuron_profiler.runtime_trace._pylists import codes, take
from neuron_profiler.runtime_trace.activities import ActivityKind, DeviceActivities, Queue
from neuron_profiler.runtime_trace.parser import decode_rows, parse_system_trace

# libkineto::ActivityType values (ActivityType.h): kernels and DMA count as device time.
KINETO_MEMCPY, KINETO_KERNEL, KINETO_RUNTIME, KINETO_DRIVER = 3, 5, 24, 25

from neuron_profiler.runtime_trace.layout import (  # noqa: E402,F401  (re-exported for tests)
    ARG_DATA,
    ARG_DTYPES,
    ARG_IS_FALLBACK,
    ARG_SHAPES,
    ARG_SYNC,
    FALLBACK_PREFIX,
    META_ACTIVITIES,
    META_DROPPED,
    META_EXCLUDED,
    META_LINK_ERROR,
    META_MALFORMED,
    META_MODELLED,
    META_SOURCE,
    META_UNPAIRED,
    RUNTIME_PREFIX,
    SYNC_PREFIX,
)

ARG_KEYS = {"exec_id": "exec_id", "flops": L.ARG_FLOPS, "bytes": L.ARG_BYTES,
            "tflops": L.ARG_TFLOPS, "gbps": L.ARG_GBPS, "bandwidth": L.ARG_BANDWIDTH}

_HOST_KINDS = np.array([ActivityKind.RUNTIME_CALL, ActivityKind.HOST_SYNC, ActivityKind.FALLBACK,
                        ActivityKind.INSTANT], dtype=np.uint8)
# Placed on the launching host thread; everything else goes on its core's rows (tensor
# alloc/free and unknown events on the "other" row, off the host op tree key_averages builds).
_ON_HOST_THREAD = np.array([ActivityKind.RUNTIME_CALL, ActivityKind.HOST_SYNC,
                            ActivityKind.FALLBACK], dtype=np.uint8)
_DEVICE_WORK = np.array([ActivityKind.KERNEL, ActivityKind.DMA, ActivityKind.COLLECTIVE],
                        dtype=np.uint8)
_KINETO_BY_KIND = np.full(len(ActivityKind), KINETO_DRIVER, dtype=np.int32)
_KINETO_BY_KIND[[ActivityKind.KERNEL, ActivityKind.COLLECTIVE]] = KINETO_KERNEL
_KINETO_BY_KIND[ActivityKind.DMA] = KINETO_MEMCPY
_KINETO_BY_KIND[[ActivityKind.RUNTIME_CALL, ActivityKind.HOST_SYNC,
                 ActivityKind.FALLBACK]] = KINETO_RUNTIME
_TID_BY_QUEUE = np.array([L.QUEUE_TIDS[Queue.COMPUTE], L.QUEUE_TIDS[Queue.DMA],
                          L.QUEUE_TIDS[Queue.COLLECTIVE], L.QUEUE_TIDS[Queue.OTHER],
                          L.QUEUE_TIDS[Queue.OTHER]], dtype=np.int32)


class _Ext(msgspec.Struct, gc=False):
    """Extension keys the collector reads; numbers typed so columns come out without a loop."""

    op: str | None = None
    flops: int = -1
    bytes: int = -1
    direction: str | None = None
    launch_ns: int = -1
    collective: Any = None
    ranks: Any = None
    algorithm: Any = None
    reason: Any = None
    shapes: Any = None
    dtypes: Any = None
    sync: Any = None


class _Data(msgspec.Struct, gc=False):
    neuron_profiler: _Ext | None = None
    algorithm: Any = None  # the real runtime's collective field


class _LooseExt(msgspec.Struct, gc=False):
    """The same keys untyped, for payloads whose numbers are not plain ints (then -1)."""

    op: Any = None
    flops: Any = None
    bytes: Any = None
    direction: Any = None
    launch_ns: Any = None
    collective: Any = None
    ranks: Any = None
    algorithm: Any = None
    reason: Any = None
    shapes: Any = None
    dtypes: Any = None
    sync: Any = None


class _LooseData(msgspec.Struct, gc=False):
    neuron_profiler: _LooseExt | None = None
    algorithm: Any = None


_NO_EXT = _Ext()
_enc = msgspec.json.encode
_SIMPLE_KINDS = frozenset({int(ActivityKind.KERNEL), int(ActivityKind.RUNTIME_CALL),
                           int(ActivityKind.DMA)})


def _int_or_missing(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else -1


def _decode_exts(data: Sequence[bytes]) -> list[_Data]:
    """Each row's data object; rows with odd types (floats, nulls) go through the loose path."""
    try:
        return decode_rows(data, _Data)
    except msgspec.ValidationError:
        pass
    out = []
    for d in decode_rows(data, _LooseData):
        e = d.neuron_profiler
        ext = None if e is None else _Ext(
            op=None if e.op is None else str(e.op), flops=_int_or_missing(e.flops),
            bytes=_int_or_missing(e.bytes), launch_ns=_int_or_missing(e.launch_ns),
            direction=None if e.direction is None else str(e.direction),
            collective=e.collective, ranks=e.ranks, algorithm=e.algorithm, reason=e.reason,
            shapes=e.shapes, dtypes=e.dtypes, sync=e.sync)
        out.append(_Data(ext, d.algorithm))
    return out


_UNSAFE = str.maketrans({"\\": "/", '"': "'", **{chr(c): " " for c in range(32)}})


def _safe(value: Any) -> Any:
    """``value`` without what Kineto's JSON writer breaks: it rewrites every backslash (so JSON
    escapes must never be needed) and drops newlines. Strings lose quotes and control chars."""
    if isinstance(value, str):
        return value.translate(_UNSAFE)
    if isinstance(value, dict):
        return {_safe(str(k)): _safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_safe(v) for v in value]
    return value


def _json(value: Any) -> str:
    """JSON text Kineto writes through unchanged (args, metadata, deviceProperties)."""
    return _enc(_safe(value)).decode()


@dataclass(frozen=True)
class Intervals:
    """Correlation intervals the C++ stack recorded: (thread, correlation id, push_ns, pop_ns)."""

    tid: np.ndarray
    correlation: np.ndarray
    push_ns: np.ndarray
    pop_ns: np.ndarray

    @classmethod
    def empty(cls) -> Intervals:
        z = np.zeros(0, dtype=np.int64)
        return cls(z, z, z, z)


@dataclass(frozen=True)
class RecordBuffer:
    """What the bridge converts: one row per Kineto activity (see neuron_kineto.cpp Records)."""

    columns: dict[str, np.ndarray]
    names: list[str]
    args: list[list[tuple[str, str]]]

    def __len__(self) -> int:
        return len(self.columns["start_ns"])

    def to_dict(self) -> dict[str, Any]:
        return {**self.columns, "names": self.names, "args": self.args}


@dataclass(frozen=True)
class SessionResult:
    """Everything one session hands to Kineto, plus the counts it reports.

    Args:
        records: the activities to convert. devices: (pid, sort index, name, label) per core.
        resources: (tid, sort index, pid, name) per queue thread. device_properties: the JSON
            objects for top-level ``deviceProperties``, comma-joined. metadata: key -> JSON value.
        excluded: activities outside the window. source_count: activities parsed from the source.
    """

    records: RecordBuffer
    devices: list[tuple[int, int, str, str]]
    resources: list[tuple[int, int, int, str]]
    device_properties: str
    metadata: dict[str, str]
    excluded: int = 0
    source_count: int = 0
    dropped: dict[int, int] = field(default_factory=dict)

    def to_bridge(self) -> dict[str, Any]:
        return {"records": self.records.to_dict(), "devices": self.devices,
                "resources": self.resources, "device_properties": self.device_properties,
                "metadata": self.metadata}


def _link_keys(acts: DeviceActivities) -> np.ndarray:
    """Per row: the id shared by a runtime call and its device work (nrta_seq_id, else exec_id
    on the same core); -1 where neither is known."""
    core = acts.core.astype(np.int64) << 44
    key = np.where(acts.exec_id >= 0, core | (acts.exec_id & ((1 << 44) - 1)), -1)
    seq = acts.seq_id >= 0
    key[seq] = (1 << 62) | core[seq] | (acts.seq_id[seq] & ((1 << 44) - 1))
    return key


def _lookup(keys: np.ndarray, table_keys: np.ndarray, table_vals: np.ndarray,
            default: np.ndarray) -> np.ndarray:
    """table_vals at keys (first occurrence in table); default where absent."""
    if len(table_keys) == 0:
        return default.copy()
    uk, first = np.unique(table_keys, return_index=True)
    pos = np.clip(np.searchsorted(uk, keys), 0, len(uk) - 1)
    hit = (uk[pos] == keys) & (keys >= 0)
    return np.where(hit, table_vals[first][pos], default)


def _launch_ns(acts: DeviceActivities, ext_launch: np.ndarray, key: np.ndarray) -> np.ndarray:
    """When the host launched each row: the extension's launch_ns, else its runtime call's start,
    else its own start (host rows are their own launch)."""
    calls = acts.kind == ActivityKind.RUNTIME_CALL
    launch = _lookup(key, key[calls], acts.start_ns[calls], acts.start_ns)
    host = np.isin(acts.kind, _HOST_KINDS)
    launch[host] = acts.start_ns[host]
    known = ext_launch >= 0
    launch[known] = ext_launch[known]
    return launch


def _flows(acts: DeviceActivities, key: np.ndarray, keep: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray]:
    """ac2g flow ids: from each kept runtime call to the earliest kept device work it launched."""
    n = len(acts)
    flow_id, flow_start = np.zeros(n, dtype=np.int32), np.zeros(n, dtype=np.uint8)
    calls = np.nonzero(keep & (acts.kind == ActivityKind.RUNTIME_CALL) & (key >= 0))[0]
    work = np.nonzero(keep & np.isin(acts.kind, _DEVICE_WORK) & (key >= 0))[0]
    if len(calls) == 0 or len(work) == 0:
        return flow_id, flow_start
    call_keys, call_first = np.unique(key[calls], return_index=True)
    work = work[np.lexsort((acts.start_ns[work], key[work]))]
    work_keys, work_first = np.unique(key[work], return_index=True)
    _, ci, wi = np.intersect1d(call_keys, work_keys, assume_unique=True, return_indices=True)
    ids = np.arange(1, len(ci) + 1, dtype=np.int32)
    flow_id[calls[call_first[ci]]] = ids
    flow_start[calls[call_first[ci]]] = 1
    flow_id[work[work_first[wi]]] = ids
    return flow_id, flow_start


def _row_args(kind: int, ext: _Ext | None, real_algorithm: Any, raw: bytes, modelled: bool
              ) -> tuple[tuple[str, str], ...]:
    """Extra args of one row (numeric flops/bytes/exec_id are columns, rendered in C++)."""
    out: list[tuple[str, str]] = []
    e = ext or _NO_EXT
    if modelled:
        out.append((L.ARG_EMULATED, "true"))
    if kind in (ActivityKind.KERNEL, ActivityKind.RUNTIME_CALL) and e.op is not None:
        out.append((L.ARG_OP, _json(str(e.op))))
    elif kind == ActivityKind.DMA and e.direction is not None:
        out.append((L.ARG_DIRECTION, _json(str(e.direction))))
    elif kind == ActivityKind.COLLECTIVE:
        ranks = e.ranks if isinstance(e.ranks, list) else []
        algorithm = e.algorithm if e.algorithm is not None else real_algorithm
        out += [(L.ARG_IS_COLLECTIVE, "true"), (L.ARG_COLLECTIVE, _json(str(e.collective)))]
        out += [(L.ARG_GROUP_RANKS, _json(ranks)), (L.ARG_GROUP_SIZE, str(len(ranks)))]
        if algorithm is not None:
            out.append((L.ARG_ALGORITHM, _json(str(algorithm))))
    elif kind == ActivityKind.FALLBACK:
        out += [(ARG_IS_FALLBACK, "true"), (L.ARG_OP, _json(str(e.op))),
                (L.ARG_FALLBACK_REASON, _json(str(e.reason)))]
        out += [(ARG_SHAPES, _json(e.shapes)), (ARG_DTYPES, _json(e.dtypes))]
    elif kind == ActivityKind.HOST_SYNC and e.sync is not None:
        out.append((ARG_SYNC, _json(str(e.sync))))
    elif kind in (ActivityKind.GENERIC, ActivityKind.INSTANT):
        out.append((ARG_DATA, raw.decode() if b"\\" not in raw
                    else _json(msgspec.json.decode(raw))))
    return tuple(out)


def _ext_columns(exts: list[_Ext]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """flops, bytes, launch_ns per row (-1 where the source does not say)."""
    n = len(exts)
    return tuple(np.fromiter(map(attrgetter(k), exts), dtype=np.int64, count=n)
                 for k in ("flops", "bytes", "launch_ns"))  # type: ignore[return-value]


def _args_ids(acts: DeviceActivities, rows: np.ndarray, exts: list[_Ext], datas: list[_Data]
              ) -> tuple[np.ndarray, list[list[tuple[str, str]]]]:
    """Per kept row, an index into a deduplicated args table (-1: no extra args). Kernels,
    launches and DMA depend only on (kind, modelled, op/direction): rendered once per distinct
    key, found with numpy; the rare other kinds are rendered row by row."""
    table: dict[tuple[tuple[str, str], ...], int] = {(): -1}
    ids = np.full(len(rows), -1, dtype=np.int32)
    kind, modelled = acts.kind[rows], acts.modelled[rows]
    simple = np.isin(kind, list(_SIMPLE_KINDS))
    at = np.flatnonzero(simple)
    if len(at):
        sub = take(exts, rows[at])
        is_dma = kind[at] == ActivityKind.DMA
        label = np.where(is_dma, codes(map(attrgetter("direction"), sub), len(sub))[1] * 2 + 1,
                         codes(map(attrgetter("op"), sub), len(sub))[1] * 2)
        key = (label * len(ActivityKind) + kind[at]) * 2 + modelled[at]
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        distinct = [table.setdefault(_row_args(int(kind[at[j]]), sub[j], None, b"",
                                               bool(modelled[at[j]])), len(table) - 1)
                    for j in first.tolist()]
        ids[at] = np.asarray(distinct, dtype=np.int32)[inverse.reshape(-1)]
    for j in np.flatnonzero(~simple).tolist():
        i, k = int(rows[j]), int(kind[j])
        raw = acts.data[i] if k in L.RAW_DATA_KINDS else b""  # read the payload's bytes only if needed
        ids[j] = table.setdefault(_row_args(k, exts[i], datas[i].algorithm, raw,
                                            bool(modelled[j])), len(table) - 1)
    return ids, [list(t) for t in list(table)[1:]]


def _names(acts: DeviceActivities, keep: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Row names: fallbacks, runtime launches and host syncs prefixed so that they never read as
    the aten op they belong to (key_averages groups rows by name)."""
    names = list(acts.names)
    name_id = acts.name_id.astype(np.int32).copy()
    for kind, prefix in ((ActivityKind.FALLBACK, FALLBACK_PREFIX),
                         (ActivityKind.RUNTIME_CALL, RUNTIME_PREFIX),
                         (ActivityKind.HOST_SYNC, SYNC_PREFIX)):
        rows = np.nonzero((acts.kind == kind) & keep)[0]
        for old in np.unique(name_id[rows]):
            base = acts.names[old]
            if kind == ActivityKind.RUNTIME_CALL and "::" not in base:
                continue  # already the runtime call's own name (e.g. nrt_execute)
            new = len(names)
            names.append(prefix + base)
            name_id[rows[name_id[rows] == old]] = new
    return name_id, names


def build_session_result(payload: bytes, *, window: tuple[int, int], intervals: Intervals,
                         host_pid: int, links_by_correlation: bool,
                         props: list[dict[str, Any]], source_name: str = "emulator",
                         dropped: dict[int, int] | None = None) -> SessionResult:
    """Parse, link, apply the window and lay out one session's activities (pure function)."""
    return build_from_activities(parse_system_trace(payload, dropped=dropped), window=window,
                                 intervals=intervals, host_pid=host_pid,
                                 links_by_correlation=links_by_correlation, props=props,
                                 source_name=source_name)


def build_from_activities(acts: DeviceActivities, *, window: tuple[int, int],
                          intervals: Intervals, host_pid: int, links_by_correlation: bool,
                          props: list[dict[str, Any]], source_name: str = "emulator"
                          ) -> SessionResult:
    """``build_session_result`` after the parse: link, window, layout."""
    metadata: dict[str, str] = {META_SOURCE: _json(source_name)}
    if len(acts):  # the real runtime needs it for everything; the emulator for instants only
        acts = _link_by_containment(acts, intervals, metadata)
    datas = _decode_exts(acts.data)
    exts = [d.neuron_profiler or _NO_EXT for d in datas]
    flops, nbytes, ext_launch = _ext_columns(exts)
    key = _link_keys(acts)
    launch = _launch_ns(acts, ext_launch, key)
    keep = (launch >= window[0]) & (launch <= window[1])
    flow_id, flow_start = _flows(acts, key, keep)
    name_id, names = _names(acts, keep)
    host = np.isin(acts.kind, _ON_HOST_THREAD)
    resource = np.where(host, acts.thread_id, _TID_BY_QUEUE[acts.queue.astype(np.intp)])
    rows = np.nonzero(keep)[0]
    args_id, args = _args_ids(acts, rows, exts, datas)
    columns = {
        "start_ns": acts.start_ns[rows], "end_ns": acts.end_ns[rows],
        "flops": flops[rows], "bytes": nbytes[rows], "exec_id": acts.exec_id[rows],
        "kineto_type": _KINETO_BY_KIND[acts.kind[rows]],
        "device": np.where(host, host_pid, acts.core).astype(np.int32)[rows],
        "resource": resource.astype(np.int32)[rows],
        "thread_id": resource.astype(np.int32)[rows],
        "correlation_id": acts.correlation_id.astype(np.int32)[rows],
        "flow_id": flow_id[rows], "flow_start": flow_start[rows], "name_id": name_id[rows],
        "args_id": args_id}
    records = RecordBuffer(columns, names, args)
    device_cores = acts.core[rows][~host[rows]]
    return _finish(records, acts, props, device_cores, metadata,
                   excluded=int(len(acts) - len(rows)), modelled=bool(acts.modelled.any()))


def _link_by_containment(acts: DeviceActivities, iv: Intervals, metadata: dict[str, str]
                         ) -> DeviceActivities:
    """Rows without a correlation id take the innermost op around them on their thread.

    Instants (tensor alloc/free) are host-side for this purpose: unlinked, torch would hand
    them the enclosing op's id and count that op's device time twice in key_averages."""
    try:
        from neuron_profiler.runtime_trace.linking import link_by_containment
    except ImportError as err:  # recorded in the trace, never silent
        metadata[META_LINK_ERROR] = _json(f"containment linking unavailable: {err}")
        return acts
    queue = np.where(acts.kind == ActivityKind.INSTANT, np.uint8(Queue.HOST), acts.queue)
    linked = link_by_containment(dataclasses.replace(acts, queue=queue), iv.tid, iv.push_ns,
                                 iv.pop_ns, iv.correlation)
    return dataclasses.replace(linked, queue=acts.queue)


def _finish(records: RecordBuffer, acts: DeviceActivities, props: list[dict[str, Any]],
            device_cores: np.ndarray, metadata: dict[str, str], *, excluded: int,
            modelled: bool) -> SessionResult:
    by_core = {int(p["id"]): p for p in props}
    for core in np.unique(device_cores).tolist():
        by_core.setdefault(int(core), {"id": int(core), "name": L.core_process_name(core),
                                       "emulated": False})
    cores = sorted(by_core)
    devices = [(L.core_pid(c), L.core_sort_index(c), L.core_process_name(c),
                str(by_core[c].get("chip", "NeuronCore"))) for c in cores]
    used_other = bool(np.isin(records.columns["kineto_type"], [KINETO_DRIVER]).any())
    queues = [Queue.COMPUTE, Queue.DMA, Queue.COLLECTIVE] + ([Queue.OTHER] if used_other else [])
    resources = [(L.QUEUE_TIDS[q], L.QUEUE_TIDS[q], L.core_pid(c), L.QUEUE_THREAD_NAMES[q])
                 for c in cores for q in queues]
    dropped = {int(k): int(v) for k, v in acts.dropped.items()}
    metadata.update({
        META_DROPPED: _json({str(k): v for k, v in sorted(dropped.items())}),
        META_EXCLUDED: str(excluded), META_MALFORMED: str(acts.malformed),
        META_UNPAIRED: str(acts.unpaired), META_ACTIVITIES: str(len(records)),
        META_MODELLED: "true" if modelled else "false"})
    return SessionResult(records, devices, resources,
                         ",".join(_json(by_core[c]) for c in cores), metadata,
                         excluded=excluded, source_count=len(acts), dropped=dropped)


def empty_result(source_name: str, problem: str) -> SessionResult:
    """A session with no source: no device rows, the reason in the metadata."""
    z64, z32 = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
    cols = {k: z64 for k in ("start_ns", "end_ns", "flops", "bytes", "exec_id")}
    cols.update({k: z32 for k in ("kineto_type", "device", "resource", "thread_id",
                                  "correlation_id", "flow_id", "name_id", "args_id")})
    cols["flow_start"] = np.zeros(0, dtype=np.uint8)
    return SessionResult(RecordBuffer(cols, [], []), [], [], "",
                         {META_SOURCE: _json(source_name), META_LINK_ERROR: _json(problem)})


class Controller:
    """What the bridge calls back into: one session at a time.

    ``source_factory`` returns the Source for the next session (or raises
    ``CollectorUnavailableError`` when there is none).
    """

    def __init__(self, source_factory: Callable[[], Any],
                 correlation: Callable[[], int] | None) -> None:
        self._factory = source_factory
        self._correlation = correlation
        self._source: Any = None
        self._problem = ""
        self.last_result: SessionResult | None = None

    def start(self) -> None:
        import warnings

        from neuron_profiler.errors import NeuronProfilerError

        self._source, self._problem = None, ""
        try:
            source = self._factory()
            source.start(max_events_per_nc(), self._correlation)
        except NeuronProfilerError as err:  # the profile goes on without device rows
            self._problem = str(err)
            warnings.warn(f"NEURON: no device activity in this trace: {err}", stacklevel=2)
            return
        self._source = source

    def stop(self, start_ns: int, stop_ns: int, tid: np.ndarray, corr: np.ndarray,
             push: np.ndarray, pop: np.ndarray) -> dict[str, Any]:
        src, self._source = self._source, None
        if src is None:
            self.last_result = empty_result("none", self._problem or "no device source")
            return self.last_result.to_bridge()
        payload = src.stop()
        try:
            result = build_session_result(
                payload, window=(int(start_ns), int(stop_ns)),
                intervals=Intervals(tid, corr, push, pop), host_pid=os.getpid(),
                links_by_correlation=src.links_by_correlation, props=src.device_properties(),
                source_name=src.name)
        except msgspec.DecodeError as err:
            raise TraceLoadError(f"{src.name} system-trace fetch output",
                                 f"not a system-trace JSON envelope ({err})") from err
        self.last_result = result
        return result.to_bridge()


def max_events_per_nc() -> int:
    """Ring size per core: the runtime's own env var, else its default (1,000,000)."""
    value = os.environ.get("NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC", "")
    return int(value) if value.isdigit() and int(value) > 0 else 1_000_000
