"""Explorer events -> the runtime activities the libnrt path produces (``DeviceActivities``), so
the one placement (``runtime_trace.placement``) lays both out the same way::

    conv = to_activities(profile, framework_correlation)
    placed = place(conv.acts, ...)          # what runtime_trace.merge.merge_activities does

- Framework events (``trace_event_source == "framework"``) are not activities: they are the host
  ops the others link to (``framework_correlation``: each one's External id, 0 for none).
- Kinds come from the event name by the system-trace parser's rule (``KIND_BY_TYPE``); a name
  it does not know is kept (INSTANT when it has no duration, else GENERIC).
- Cores: one per (instance, process, ``nc_idx``): ``nc_idx`` is process-local, so two
  processes' core 0 are two cores (``CoreKey``). Events with no ``nc_idx`` share one key per
  process (nc_idx -1).
- Links, in this order: an event that carries the flow id of a framework event of the same
  instance and process takes that event's External id; a host-side runtime event whose
  ``framework_stream_id`` names a framework thread takes the op of that thread around its start
  (``streams``); device work (``nc_exec_running``, ``cc_running``, ``cc_exec_barrier``) takes
  the id of the runtime event of the same instance, process and ``exec_id`` (the latest one
  starting at or before it, else the first after), so after the stream link; the rest (calls by containment on their own thread, copies by the call around
  them) in placement, as libnrt's.
- Collectives take their name, algorithm and bytes (max of input and output size) from the CcOp
  row with the same ``op_id``, the k-th ``cc_running`` of an op id pairing with its k-th CcOp row.
Numpy over the columns; Python touches rows only to reorder the attribute bytes (one C-level
pass) and to splice the extension into the collectives matched with CcOp (one per collective).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from neuron_profiler.explorer.columns import (
    CcOpColumns,
    EventColumns,
    ExplorerProfile,
    key_codes,
)
from neuron_profiler.explorer.streams import StreamCounts, ThreadOps, link_by_stream
from neuron_profiler.runtime_trace.activities import ActivityKind, DeviceActivities, Queue
from neuron_profiler.runtime_trace.parser import KIND_BY_TYPE, QUEUE_BY_KIND

FRAMEWORK, HARDWARE, RUNTIME = 2, 1, 0  # EventColumns.source codes (schema.SOURCES order)
DEVICE_WORK = np.array(
    [ActivityKind.KERNEL, ActivityKind.COLLECTIVE, ActivityKind.COLLECTIVE_WAIT], dtype=np.uint8
)
HOST_SIDE = np.array([ActivityKind.RUNTIME_CALL, ActivityKind.EXEC_STAGE], dtype=np.uint8)


@dataclass(frozen=True)
class CoreKey:
    """Which NeuronCore a core index stands for."""

    instance: str
    process_id: int
    nc_idx: int  # -1: events that name no core
    worker_gid: int  # -1: not given


@dataclass(frozen=True)
class Converted:
    """The activities, and what the trace around them needs.

    Args:
        acts: one activity per non-framework event, in start order.
        event_row: the Explorer event row of each activity.
        cores: ``CoreKey`` per core index (``acts.core``).
        arrows: (activity, framework event row) per flow an activity shares with a framework
            event: the arrows to draw.
        bad_spans: events whose end was before their start (kept with zero length, counted).
        unmatched_cc: cc_running events with no CcOp row of their op id (no bytes).
        streams: what the ``framework_stream_id`` link did (``streams.StreamCounts``).
    """

    acts: DeviceActivities
    event_row: np.ndarray
    cores: list[CoreKey]
    arrows: tuple[np.ndarray, np.ndarray]
    bad_spans: int
    unmatched_cc: int
    streams: StreamCounts = StreamCounts()


def framework_rows(events: EventColumns) -> np.ndarray:
    """Rows of the framework events, in start order."""
    rows = np.flatnonzero(events.source == FRAMEWORK)
    return rows[np.argsort(events.start_ns[rows], kind="stable")]


def to_activities(
    profile: ExplorerProfile,
    framework_correlation: np.ndarray,
    host_ops: ThreadOps | None = None,
    *,
    thread_id: np.ndarray | None = None,
) -> Converted:
    """See the module docstring; ``framework_correlation`` is indexed like ``framework_rows``;
    ``host_ops``: the ops a stream's thread links to (default: the framework events);
    ``thread_id``: per event the thread id the placement keys its host thread by (default the
    event's own; ``hosts.HostIds`` keeps threads of two processes apart)."""
    ev = profile.events
    rows = np.flatnonzero(ev.source != FRAMEWORK)
    rows = rows[np.lexsort((rows, ev.start_ns[rows]))]
    start, end = ev.start_ns[rows], ev.end_ns[rows]
    bad_spans = int((end < start).sum())
    end = np.maximum(end, start)
    kind = _kinds(ev, rows, end - start)
    core, cores = _cores(ev, rows)
    corr_of_event = np.zeros(len(ev), dtype=np.int64)
    fw = framework_rows(ev)
    corr_of_event[fw] = framework_correlation
    arrows = _flow_links(ev, corr_of_event)
    corr = corr_of_event[rows]
    framework = ThreadOps.of_framework(ev, fw, framework_correlation)
    host_side = QUEUE_BY_KIND[kind] == Queue.HOST
    ops = framework if host_ops is None else host_ops
    corr, streams = link_by_stream(ev, rows, host_side, corr, ops, framework)
    corr = _exec_links(ev, rows, kind, corr)
    data, unmatched = _collective_data(ev, rows, kind, profile.cc_ops)
    position = np.empty(len(ev), dtype=np.int64)
    position[rows] = np.arange(len(rows))
    act_of_arrow = position[arrows[0]]
    acts = DeviceActivities(
        start_ns=start,
        end_ns=end,
        kind=kind,
        queue=QUEUE_BY_KIND[kind],
        core=core,
        thread_id=(ev.thread_id if thread_id is None else thread_id)[rows],
        correlation_id=corr,
        exec_id=ev.exec_id[rows],
        seq_id=ev.seq_id[rows],
        name_id=ev.name_code[rows].astype(np.int32),
        modelled=np.zeros(len(rows), dtype=bool),
        names=list(ev.names),
        data=data,
        malformed=profile.malformed + bad_spans + streams.not_an_integer,
        drops_known=False,  # Explorer's tables carry no count of dropped events
        host_timed=(kind == ActivityKind.DMA) & (ev.source[rows] != HARDWARE),
    )
    arrows = (act_of_arrow, arrows[1])
    return Converted(acts, rows, cores, arrows, bad_spans, unmatched, streams)


def _kinds(ev: EventColumns, rows: np.ndarray, duration: np.ndarray) -> np.ndarray:
    by_name = np.array([KIND_BY_TYPE.get(n, -1) for n in ev.names], dtype=np.int16)
    kind = by_name[ev.name_code[rows]] if len(rows) else np.zeros(0, np.int16)
    unknown = kind < 0
    kind[unknown] = np.where(duration[unknown] == 0, ActivityKind.INSTANT, ActivityKind.GENERIC)
    return kind.astype(np.uint8)


def _cores(ev: EventColumns, rows: np.ndarray) -> tuple[np.ndarray, list[CoreKey]]:
    """Core index per activity: distinct (instance, process, nc_idx), in that order."""
    keys = np.stack([ev.instance_code[rows], ev.process_id[rows], ev.nc_idx[rows]])
    if not len(rows):
        return np.zeros(0, dtype=np.int64), []
    distinct, inverse = np.unique(keys, axis=1, return_inverse=True)
    inverse = inverse.reshape(-1)
    worker = np.full(distinct.shape[1], -1, dtype=np.int64)
    np.maximum.at(worker, inverse, ev.worker_gid[rows])
    cores = [
        CoreKey(ev.instances[i], p, c, w)
        for (i, p, c), w in zip(distinct.T.tolist(), worker.tolist(), strict=True)
    ]
    return inverse.astype(np.int64), cores


def _flow_links(ev: EventColumns, corr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Give each event that shares a flow id with a framework event of its own instance and
    process that event's External id (in ``corr``, where it has none yet); returns (event row,
    framework row) per such link. Flow ids are only compared within a process: two processes
    (or instances, where pids repeat) may number their flows alike."""
    row = ev.flow_row
    if not len(row):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    value = key_codes(ev.instance_code[row], ev.process_id[row], ev.flow_value)[0]
    is_fw = ev.source[row] == FRAMEWORK
    fw_row, fw_value = row[is_fw], value[is_fw]
    order = np.lexsort((fw_row, fw_value))  # a flow id two framework events carry: the first
    fw_row, fw_value = fw_row[order], fw_value[order]
    other_row, other_value = row[~is_fw], value[~is_fw]
    if not len(fw_value) or not len(other_value):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    at = np.clip(np.searchsorted(fw_value, other_value), 0, len(fw_value) - 1)
    hit = fw_value[at] == other_value
    src, dst = fw_row[at[hit]], other_row[hit]
    first = np.unique(dst, return_index=True)[1]  # an event in two flows: the first one links
    take = corr[dst[first]] == 0
    corr[dst[first][take]] = corr[src[first][take]]
    return dst, src


def _exec_links(
    ev: EventColumns, rows: np.ndarray, kind: np.ndarray, corr: np.ndarray
) -> np.ndarray:
    """Device work without an id takes the one of the runtime event of the same (instance,
    process, exec_id) that has one: the latest starting at or before it, else the first after."""
    exec_id = ev.exec_id[rows]
    work = np.flatnonzero(np.isin(kind, DEVICE_WORK) & (exec_id >= 0) & (corr == 0))
    host = np.flatnonzero(np.isin(kind, HOST_SIDE) & (exec_id >= 0) & (corr != 0))
    if not len(work) or not len(host):
        return corr
    both = np.concatenate([host, work])
    key_cols = np.stack([ev.instance_code[rows[both]], ev.process_id[rows[both]], exec_id[both]])
    key = np.unique(key_cols, axis=1, return_inverse=True)[1].reshape(-1)
    start = ev.start_ns[rows[both]]
    rank = np.empty(len(both), dtype=np.int64)
    rank[np.argsort(start, kind="stable")] = np.arange(len(both))
    combined = key * len(both) + rank  # (key, start) as one sortable int
    h, w = combined[: len(host)], combined[len(host) :]
    order = np.argsort(h)
    h_sorted, h_rows = h[order], host[order]
    at = np.searchsorted(h_sorted, w, side="right") - 1  # latest at or before
    after = np.clip(at + 1, 0, len(h_sorted) - 1)
    same = (at >= 0) & (key[: len(host)][order][np.clip(at, 0, None)] == key[len(host) :])
    later = key[: len(host)][order][after] == key[len(host) :]
    pick = np.where(same, np.clip(at, 0, None), np.where(later, after, -1))
    out = corr.copy()
    hit = pick >= 0
    out[work[hit]] = corr[h_rows[pick[hit]]]
    return out


def _collective_data(
    ev: EventColumns, rows: np.ndarray, kind: np.ndarray, cc: CcOpColumns | None
) -> tuple[list[bytes], int]:
    """Each activity's data object (its extra attributes); collectives joined with CcOp also
    carry, in our extension, the collective's name, algorithm and bytes."""
    data = np.empty(len(rows), dtype=object)
    data[:] = [ev.attributes[i] for i in rows.tolist()] if len(rows) else []
    coll = np.flatnonzero(kind == ActivityKind.COLLECTIVE)
    if not len(coll):
        return list(data), 0
    if cc is None or not len(cc):
        return list(data), len(coll)
    op = ev.op_id[rows[coll]]
    pick = _pair_by_occurrence(op, cc.op_id, cc.start_ns)
    hit = pick >= 0
    if hit.any():
        sizes = np.maximum(cc.input_size, cc.output_size)
        data[coll[hit]] = _with_extension(
            list(data[coll[hit]]),
            [cc.operation[i] for i in pick[hit].tolist()],
            [cc.algorithm[i] for i in pick[hit].tolist()],
            sizes[pick[hit]],
        )
    return list(data), int((~hit).sum())


def _pair_by_occurrence(op: np.ndarray, cc_op: np.ndarray, cc_start: np.ndarray) -> np.ndarray:
    """For each event (in start order) the CcOp row of the same op id and occurrence rank (the
    k-th event of an id pairs with the id's k-th CcOp row by start); -1 when there is none."""
    order = np.lexsort((cc_start, cc_op))
    keys = cc_op[order]
    e_order = np.lexsort((np.arange(len(op)), op))
    e_keys = op[e_order]
    new = np.ones(len(e_keys), dtype=bool)
    new[1:] = e_keys[1:] != e_keys[:-1]
    pos = np.arange(len(e_keys))
    rank = pos - np.maximum.accumulate(np.where(new, pos, 0))
    at = np.searchsorted(keys, e_keys, side="left") + rank
    ok = (at < len(keys)) & (e_keys >= 0)
    ok[ok] = keys[at[ok]] == e_keys[ok]
    out = np.full(len(op), -1, dtype=np.int64)
    out[e_order[ok]] = order[at[ok]]
    return out


def _with_extension(
    attrs: list[bytes], operation: list[str], algorithm: list[str], nbytes: np.ndarray
) -> list[bytes]:
    """The attribute objects with our extension key added in front (one msgspec encode of the
    extensions, then byte splicing: no object is decoded)."""
    import msgspec

    from neuron_profiler.runtime_trace import format as F

    exts = msgspec.json.encode(
        [
            {F.X_COLLECTIVE_OP: o, F.X_ALGORITHM: a or None, F.X_BYTES: b}
            for o, a, b in zip(operation, algorithm, nbytes.tolist(), strict=True)
        ]
    )
    parts = msgspec.json.decode(exts, type=list[msgspec.Raw])
    head = b'{"' + F.EXT_KEY.encode() + b'":'
    out = []
    for ext, attr in zip(parts, attrs, strict=True):
        body = attr.strip()[1:].lstrip()
        out.append(head + bytes(ext) + (b"" if body.startswith(b"}") else b",") + body)
    return out
