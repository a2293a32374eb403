"""Perfetto protobuf (.pftrace) writer for the ``Trace`` model, streamed in chunks.

    from neuron_profiler.exporters.perfetto import write_perfetto_trace
    result = write_perfetto_trace(trace, "out.pftrace")
    result.slices, result.flows, result.skipped      # what went in, what could not (counted)

Layout: a process track per host process with a thread track per thread; a process track per
device (a pid holding kernel / memcpy / collective events: "NeuronCore N", CUDA or ROCm devices)
whose queues (tids) are named child tracks, plus counter tracks (busy %, DMA bandwidth) computed by
``analysis.counters``. Complete events become slice begin/end pairs (0 ns ones instants); where
work on one Chrome thread overlaps without nesting, the later-starting slice moves to a sibling
track "<thread> (overlap k)" so begin/end stay well nested. Flow events (ac2g, fwdbwd, ...)
become ``flow_ids`` / ``terminating_flow_ids`` on the slices that enclose them. Event names,
categories and arg names are interned; args become debug annotations.

Encoding: descriptors and interned data are built with perfetto's generated protos; the bulk of
TrackEvent packets is encoded from numpy columns (``_protowire``) with field numbers read from the
same protos, a chunk at a time, so the output is never whole in memory. Device pids (and pids
that are not OS pids) get synthetic process ids from SYNTHETIC_PID_BASE so that Chrome's device
pid 0 never lands on Linux's idle process; the original pid is in the track description.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from neuron_profiler.analysis.counters import CounterSeries, DeviceCounters, device_counters
from neuron_profiler.exporters import _nesting as N
from neuron_profiler.exporters import _protowire as W
from neuron_profiler.exporters._annotations import ArgsEncoder
from neuron_profiler.exporters._nesting import Timeline, assign_lanes, extend, stable_order
from neuron_profiler.trace import schema as S
from neuron_profiler.trace.model import Trace

EXTENSIONS = (".pftrace",)
CHUNK_PACKETS = 131072
# numpy releases the GIL, so planning steps and chunks can run side by side; measured on a 2-core
# machine the extra thread costs more CPU than it saves, so it is used only with more cores
ENCODE_THREADS = 2 if (os.cpu_count() or 1) > 2 else 1
SEQUENCE_ID = 1
SYNTHETIC_PID_BASE = 0x40000000
INTERNED_PACKET_NAMES = 20000  # names per interned-data packet (keeps packets small)
FLOW_PHASES = (S.Phase.FLOW_START, S.Phase.FLOW_STEP, S.Phase.FLOW_END)
INSTANTS, COUNTERS = N.POINTS, N.POINTS + 1  # timeline classes after slice ends and begins

BEGIN = pb.TrackEvent.TYPE_SLICE_BEGIN
END = pb.TrackEvent.TYPE_SLICE_END
INSTANT = pb.TrackEvent.TYPE_INSTANT
COUNTER = pb.TrackEvent.TYPE_COUNTER
CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
NEEDS_STATE = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE


def _num(message: Any, name: str) -> int:
    return message.DESCRIPTOR.fields_by_name[name].number


class _F:
    """Field numbers, read from perfetto's generated protos (the schema), not typed in twice."""

    PACKET = _num(pb.Trace, "packet")
    TIMESTAMP = _num(pb.TracePacket, "timestamp")
    SEQUENCE = _num(pb.TracePacket, "trusted_packet_sequence_id")
    FLAGS = _num(pb.TracePacket, "sequence_flags")
    TRACK_EVENT = _num(pb.TracePacket, "track_event")
    TYPE = _num(pb.TrackEvent, "type")
    TRACK = _num(pb.TrackEvent, "track_uuid")
    NAME = _num(pb.TrackEvent, "name_iid")
    CATEGORY = _num(pb.TrackEvent, "category_iids")
    FLOW = _num(pb.TrackEvent, "flow_ids")
    TERMINATING_FLOW = _num(pb.TrackEvent, "terminating_flow_ids")
    COUNTER_VALUE = _num(pb.TrackEvent, "double_counter_value")


@dataclass(frozen=True)
class PerfettoExport:
    """What a Perfetto export wrote, and what it could not represent (counted, never silent).

    Args:
        slices / instants / counter_points: TrackEvents written by type (a slice is a
            begin/end pair). flows: flows with both ends bound to slices.
        overlap_tracks: sibling tracks added for overlapping, non-nested work on one thread.
        unbound_flow_endpoints: flow events left out: no enclosing slice on their thread (or
            their other end had none, or both ends fell on one slice).
        orphan_flow_endpoints: flow events whose other end is not in the trace at all.
        skipped: events left out, by reason.
    """

    path: Path
    bytes_written: int
    packets: int
    tracks: int
    slices: int
    instants: int
    counter_points: int
    flows: int
    overlap_tracks: int
    unbound_flow_endpoints: int
    orphan_flow_endpoints: int
    skipped: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Selection:
    slices: np.ndarray
    instants: np.ndarray
    flows: np.ndarray
    counters: np.ndarray
    skipped: dict[str, int]


@dataclass(frozen=True)
class _Tracks:
    descriptors: list[pb.TrackDescriptor]
    slice_uuid: np.ndarray
    instant_uuid: np.ndarray
    counter_ts: np.ndarray  # counter samples (device series, then Chrome counters)
    counter_uuid: np.ndarray
    counter_value: np.ndarray
    overlap_tracks: int
    chrome_counter_skipped: int


@dataclass(frozen=True)
class _Flows:
    candidate: np.ndarray  # index into slice rows, then instant rows
    flow_uid: np.ndarray
    terminating: np.ndarray
    flows: int
    orphans: int
    unbound: int


def _phase_table(*phases: int) -> np.ndarray:
    table = np.zeros(256, dtype=bool)
    table[list(phases)] = True
    return table


_FLOW_PHASE = _phase_table(*FLOW_PHASES)
_BEGIN_END = _phase_table(S.Phase.BEGIN, S.Phase.END)


def _select(trace: Trace) -> _Selection:
    ph, dur, ts = trace.col(S.PH), trace.col(S.DUR_NS), trace.col(S.TS_NS)
    valid_ts = ts >= 0
    complete = (ph == S.Phase.COMPLETE) & valid_ts
    flow_phase = _FLOW_PHASE[ph] & valid_ts
    has_flow_id = trace.col(S.FLOW_ID) >= 0
    skipped = {
        "negative duration": int((complete & (dur < 0)).sum()),
        "negative timestamp": int(len(ts) - np.count_nonzero(valid_ts)),
        "unpaired begin/end": int((_BEGIN_END[ph] & valid_ts).sum()),
        "unknown phase": int(((ph == S.Phase.OTHER) & valid_ts).sum()),
        "flow without id": int((flow_phase & ~has_flow_id).sum()),
    }
    return _Selection(
        slices=np.flatnonzero(complete & (dur > 0)),
        instants=np.flatnonzero((complete & (dur == 0)) | ((ph == S.Phase.INSTANT) & valid_ts)),
        flows=np.flatnonzero(flow_phase & has_flow_id),
        counters=np.flatnonzero((ph == S.Phase.COUNTER) & valid_ts),
        skipped={k: v for k, v in skipped.items() if v})


def _label(value: int, labels: dict[int, str]) -> str:
    return labels.get(value, str(value))


class _Ids:
    """Track uuids (sequential, unique in the file) and the descriptors declaring them."""

    def __init__(self) -> None:
        self.descriptors: list[pb.TrackDescriptor] = []

    def add(self, parent: int = 0, **fields: Any) -> pb.TrackDescriptor:
        desc = pb.TrackDescriptor(uuid=len(self.descriptors) + 1, **fields)
        if parent:
            desc.parent_uuid = parent
        self.descriptors.append(desc)
        return desc


def _device_pids(trace: Trace, counters: DeviceCounters) -> set[int]:
    kinds = np.array(sorted(S.DEVICE_KINDS), dtype=np.uint8)
    pids = set(np.unique(trace.col(S.PID)[np.isin(trace.col(S.KIND), kinds)]).tolist())
    return pids | {s.pid for s in counters.series}


def _process_tracks(trace: Trace, pids: list[int], devices: set[int],
                    ids: _Ids) -> tuple[dict[int, int], dict[int, int]]:
    """pid -> process track uuid, pid -> the pid written (synthetic for devices)."""
    uuid_of, out_pid = {}, {}
    synthetic = 0
    order = sorted(pids, key=lambda p: (p in devices, trace.process_sort_index.get(p, p), p))
    for pid in order:
        label = _label(pid, trace.pid_labels)
        written = pid
        if pid in devices or not 0 < pid < 2**31:
            written = SYNTHETIC_PID_BASE + synthetic
            synthetic += 1
        name = trace.process_names.get(pid) or (f"device {label}" if pid in devices
                                                else f"process {label}")
        desc = ids.add(process=pb.ProcessDescriptor(pid=written, process_name=name),
                       description=f"Chrome trace pid {label}",
                       child_ordering=pb.TrackDescriptor.EXPLICIT)
        uuid_of[pid], out_pid[pid] = desc.uuid, written
    return uuid_of, out_pid


def _pair_key(pid: np.ndarray, tid: np.ndarray) -> np.ndarray | None:
    """One int64 per (pid, tid) when both fit in 32 bits (the usual case), else None."""
    if len(pid) == 0:
        return np.zeros(0, dtype=np.int64)
    lo, hi = -(2**31), 2**31
    if min(int(pid.min()), int(tid.min())) < lo or max(int(pid.max()), int(tid.max())) >= hi:
        return None
    return (pid.astype(np.int64) << 32) + (tid.astype(np.int64) - lo)


def _thread_index(trace: Trace, rows: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Dense thread index per row and the (pid, tid) of each index (hash-based, O(n))."""
    pid, tid = trace.col(S.PID)[rows], trace.col(S.TID)[rows]
    key = _pair_key(pid, tid)
    if key is not None:
        codes, uniq = pd.factorize(key, sort=True)
        pairs = [(int(k >> 32), int((k & 0xFFFFFFFF) - 2**31)) for k in uniq.tolist()]
        return codes.astype(np.int64), pairs
    codes_p, uniq_p = pd.factorize(pid, sort=True)
    codes_t, uniq_t = pd.factorize(tid, sort=True)
    width = max(1, len(uniq_t))
    codes, uniq = pd.factorize(codes_p.astype(np.int64) * width + codes_t, sort=True)
    pairs = [(int(uniq_p[u // width]), int(uniq_t[u % width])) for u in uniq.tolist()]
    return codes.astype(np.int64), pairs


def _thread_name(trace: Trace, pid: int, tid: int, device: bool) -> str:
    name = trace.thread_names.get((pid, tid))
    if name:
        return name
    label = _label(tid, trace.tid_labels)
    return f"stream {label}" if device else f"thread {label}"


@dataclass(frozen=True)
class _Threads:
    """Chrome threads holding slices or instants: index per candidate row (slice rows, then
    instant rows) and the (pid, tid) of each index."""

    thread: np.ndarray
    pairs: list[tuple[int, int]]


def _threads(trace: Trace, sel: _Selection) -> _Threads:
    thread, pairs = _thread_index(trace, np.concatenate([sel.slices, sel.instants]))
    return _Threads(thread=thread, pairs=pairs)


def _plan(trace: Trace, sel: _Selection, counters: DeviceCounters | None,
          pool: ThreadPoolExecutor) -> tuple[_Tracks, _Flows, Timeline]:
    """Tracks (lanes, counters), flows and the emission order of every TrackEvent packet.

    Counters and lanes run on the pool while this thread binds flows (numpy releases the GIL).
    """
    pending = None if counters is not None else pool.submit(device_counters, trace)
    threads = _threads(trace, sel)
    ts = trace.col(S.TS_NS)
    start = ts[sel.slices]
    end = start + trace.col(S.DUR_NS)[sel.slices]
    tl = N.timeline(start, end, [ts[sel.instants]])
    lanes = pool.submit(assign_lanes, threads.thread[:len(sel.slices)], start, end, tl)
    flows = _bind_flows(trace, sel, threads, tl, end)
    counters = pending.result() if pending is not None else counters
    tracks = _tracks(trace, sel, counters, threads, lanes.result())
    return tracks, flows, extend(tl, [tracks.counter_ts])


def _tracks(trace: Trace, sel: _Selection, counters: DeviceCounters, threads: _Threads,
            lane: np.ndarray) -> _Tracks:
    ids = _Ids()
    devices = _device_pids(trace, counters)
    thread, pairs = threads.thread, threads.pairs
    n_slices = len(sel.slices)
    chrome_counters, skipped_c = _chrome_counters(trace, sel.counters)
    pids = sorted({p for p, _ in pairs} | {s.pid for s in counters.series}
                  | {p for p, _, _, _ in chrome_counters})
    proc_uuid, out_pid = _process_tracks(trace, pids, devices, ids)
    rank: dict[int, int] = {}

    def child(pid: int, **fields: Any) -> pb.TrackDescriptor:
        rank[pid] = rank.get(pid, 0) + 1
        return ids.add(parent=proc_uuid[pid], sibling_order_rank=rank[pid], **fields)

    lanes = int(lane.max()) + 1 if n_slices else 1
    track_uuid = np.zeros(len(pairs) * lanes, dtype=np.int64)
    slot = thread[:n_slices] * lanes + lane if lanes > 1 else thread[:n_slices]
    used_lanes = set(np.flatnonzero(np.bincount(slot, minlength=1)).tolist())
    order = sorted(range(len(pairs)), key=lambda i: (
        trace.thread_sort_index.get(pairs[i], 0), pairs[i][1]))
    for i in order:
        pid, tid = pairs[i]
        device = pid in devices
        name = _thread_name(trace, pid, tid, device)
        if not device and 0 < out_pid[pid] < SYNTHETIC_PID_BASE and tid > 0:
            desc = child(pid, thread=pb.ThreadDescriptor(pid=out_pid[pid], tid=tid,
                                                         thread_name=name))
        else:
            desc = child(pid, name=name)
        track_uuid[i * lanes] = desc.uuid
        for k in range(1, lanes):
            if i * lanes + k in used_lanes:
                track_uuid[i * lanes + k] = child(pid, name=f"{name} (overlap {k})").uuid
    points: list[tuple[int, np.ndarray, np.ndarray]] = []
    for series in counters.series:
        where = ("" if series.tid is None else
                 _thread_name(trace, series.pid, series.tid, True) + " ")
        unit = "" if series.name.endswith(series.unit) else f" ({series.unit})"
        desc = child(series.pid, name=f"{where}{series.name}{unit}",
                     counter=pb.CounterDescriptor(unit_name=series.unit))
        points.append((desc.uuid, *_changes(series)))
    for pid, name, ts, values in chrome_counters:
        desc = child(pid, name=name, counter=pb.CounterDescriptor())
        points.append((desc.uuid, ts, values))
    return _Tracks(
        descriptors=ids.descriptors,
        slice_uuid=track_uuid[slot],
        instant_uuid=track_uuid[thread[n_slices:] * lanes],
        counter_ts=_concat([ts for _, ts, _ in points], np.int64),
        counter_uuid=_concat([np.full(len(ts), u) for u, ts, _ in points], np.int64),
        counter_value=_concat([v for _, _, v in points], np.float64),
        overlap_tracks=len([k for k in used_lanes if k % lanes]),
        chrome_counter_skipped=skipped_c)


def _concat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)


def _changes(series: CounterSeries) -> tuple[np.ndarray, np.ndarray]:
    """Counter samples: a bin's value at its start where it changes, and 0 where it ends."""
    if len(series.ts_ns) == 0:
        return np.zeros(0, np.int64), np.zeros(0)
    step = int(series.ts_ns[1] - series.ts_ns[0]) if len(series.ts_ns) > 1 else 0
    ts = np.append(series.ts_ns, series.ts_ns[-1] + step)
    value = np.append(series.values, 0.0)
    change = np.ones(len(ts), dtype=bool)  # a counter holds its value: write changes only
    change[1:] = value[1:] != value[:-1]
    return ts[change], value[change]


def _chrome_counters(trace: Trace, rows: np.ndarray) -> tuple[list[Any], int]:
    """Chrome ``C`` events -> (pid, track name, ts, values) per (pid, name, series key)."""
    points: dict[tuple[int, str], list[tuple[int, float]]] = {}
    skipped = 0
    for row in rows.tolist():
        name, pid, ts = trace.name(row), int(trace.col(S.PID)[row]), int(trace.col(S.TS_NS)[row])
        numeric = {k: v for k, v in trace.args(row).items()
                   if isinstance(v, int | float) and not isinstance(v, bool)}
        if not numeric:
            skipped += 1
        for key, value in numeric.items():
            track = name if key in (name, "value") else f"{name} {key}"
            points.setdefault((pid, track), []).append((ts, float(value)))
    out = [(pid, track, np.array([p[0] for p in pts], dtype=np.int64),
            np.array([p[1] for p in pts], dtype=np.float64))
           for (pid, track), pts in points.items()]
    return out, skipped


def _bind_flows(trace: Trace, sel: _Selection, threads: _Threads, tl: Timeline,
                slice_end: np.ndarray) -> _Flows:
    """Attach each flow event to the innermost slice (or instant) enclosing it on its thread:
    the latest to start at or before it, stepping back over ones that already ended."""
    n, m = len(sel.slices), len(sel.instants)
    empty = np.zeros(0, dtype=np.int64)
    if len(sel.flows) == 0 or n + m == 0:
        return _Flows(empty, empty, np.zeros(0, dtype=bool), 0, 0, len(sel.flows))
    ts = trace.col(S.TS_NS)
    event_class = tl.event_class(tl.keys)
    keys = tl.keys[(event_class == N.BEGIN) | (event_class == INSTANTS)]  # starts, by time
    index = tl.index(keys)
    is_begin = tl.event_class(keys) == N.BEGIN
    cand = n + index  # candidate: slice i, or instant j as n + j
    cand[is_begin] = tl.border[index[is_begin]]
    c_thread = threads.thread[cand]
    by_thread = stable_order(c_thread)  # (thread, start, longer first)
    cand, c_thread, c_axis = cand[by_thread], c_thread[by_thread], tl.axis(keys)[by_thread]
    c_end = np.concatenate([slice_end, ts[sel.instants]])
    f_thread = _thread_lookup(trace.col(S.PID)[sel.flows], trace.col(S.TID)[sel.flows],
                              threads.pairs)
    f_ts = ts[sel.flows]
    f_axis = tl.to_axis(f_ts)
    width = tl.span + 2
    if len(threads.pairs) * width >= 2**62:  # absurd span: dense ranks keep the order
        uniq, ranks = np.unique(np.concatenate([c_axis, f_axis]), return_inverse=True)
        c_axis, f_axis, width = ranks[:len(c_axis)], ranks[len(c_axis):], len(uniq) + 1
    c_key = c_thread * width + c_axis + 1  # ascending: by thread, then time
    f_key = np.where(f_thread >= 0, f_thread * width + f_axis + 1, -1)
    by_key = stable_order(f_thread)  # flows come in time order: now ascending keys, which
    pos = np.empty(len(f_key), dtype=np.int64)  # searchsorted walks in one sweep
    pos[by_key] = np.searchsorted(c_key, f_key[by_key], side="right") - 1
    bound = np.full(len(sel.flows), -1, dtype=np.int64)
    todo = np.flatnonzero((pos >= 0) & (f_thread >= 0))
    for _ in range(4):  # step back to an enclosing slice when the latest start has ended
        at = pos[todo]
        c = cand[at]
        hit = (c_thread[at] == f_thread[todo]) & (c_end[c] >= f_ts[todo])
        bound[todo[hit]] = c[hit]
        todo = todo[~hit & (at > 0)]
        pos[todo] -= 1
    return _chain_flows(trace, sel, bound, f_ts)


def _thread_lookup(pid: np.ndarray, tid: np.ndarray, pairs: list[tuple[int, int]],
                   ) -> np.ndarray:
    """Index in ``pairs`` of each (pid, tid), -1 where no slice or instant is on that thread."""
    if not pairs:
        return np.full(len(pid), -1, dtype=np.int64)
    known_pid = np.array([p for p, _ in pairs], dtype=np.int64)
    known_tid = np.array([t for _, t in pairs], dtype=np.int64)
    key, known = _pair_key(pid, tid), _pair_key(known_pid, known_tid)
    if key is not None and known is not None:
        return pd.Index(known).get_indexer(key).astype(np.int64)
    known_index = pd.MultiIndex.from_arrays([known_pid, known_tid])
    return known_index.get_indexer(pd.MultiIndex.from_arrays([pid, tid])).astype(np.int64)


def _chain_flows(trace: Trace, sel: _Selection, bound: np.ndarray, f_ts: np.ndarray) -> _Flows:
    """Flow uid per (category, id); the last endpoint in time terminates the flow."""
    flow_id, cat = trace.col(S.FLOW_ID)[sel.flows], trace.col(S.CAT_ID)[sel.flows]
    if int(flow_id.max()) < 2**40:
        uid, _ = pd.factorize((cat.astype(np.int64) << 40) + flow_id)
    else:
        ids_f, _ = pd.factorize(flow_id)
        uid, _ = pd.factorize(cat.astype(np.int64) * (len(flow_id) + 1) + ids_f)
    uid = uid.astype(np.int64)
    orphan = np.bincount(uid)[uid] == 1  # the other end is not in the trace at all
    keep = np.flatnonzero(bound >= 0)
    k_ts, k_ph = f_ts[keep], trace.col(S.PH)[sel.flows][keep]
    in_order = bool(((k_ts[1:] > k_ts[:-1]) | ((k_ts[1:] == k_ts[:-1])
                                                & (k_ph[1:] >= k_ph[:-1]))).all())
    # by flow, then time (then phase): flows of a sorted trace only need a stable sort by flow
    keep = keep[stable_order(uid[keep]) if in_order else np.lexsort((k_ph, k_ts, uid[keep]))]
    k_uid, k_cand = uid[keep], bound[keep]
    same = np.zeros(len(keep), dtype=bool)  # consecutive ends of one flow on one slice
    same[1:] = (k_uid[1:] == k_uid[:-1]) & (k_cand[1:] == k_cand[:-1])
    k_uid, k_cand = k_uid[~same], k_cand[~same]
    enough = np.bincount(k_uid)[k_uid] >= 2
    k_uid, k_cand = k_uid[enough], k_cand[enough]
    last = np.ones(len(k_uid), dtype=bool)
    last[:-1] = k_uid[1:] != k_uid[:-1]
    return _Flows(candidate=k_cand,
                  flow_uid=k_uid + 1, terminating=last, flows=int(last.sum()),
                  orphans=int(orphan.sum()),
                  unbound=int(len(sel.flows) - len(k_uid) - orphan.sum()))


@dataclass(frozen=True)
class _Chunk:
    """Packets lo..hi of the emission order, gathered from the event sources."""

    ts: np.ndarray
    type: np.ndarray
    track: np.ndarray
    name_iid: np.ndarray  # 0: none (end and counter packets)
    cat_iid: np.ndarray
    value: np.ndarray
    row: np.ndarray  # trace row whose name and args to write (-1: none)
    n_flow: np.ndarray  # flow ids on each packet, then n_term terminating ones, stored in
    n_term: np.ndarray  # _Events.flow_uid from first
    first: np.ndarray


@dataclass(frozen=True)
class _Events:
    """Every TrackEvent packet: the timeline's keys in emission order and, per event id (class
    offset + index: ends, begins, instants, counter samples), what its packet carries."""

    tl: Timeline
    offset: np.ndarray  # event class -> first event id
    type: np.ndarray  # per event class
    track: np.ndarray  # per event id
    row: np.ndarray
    cand: np.ndarray  # flow candidate (slice i, instant n + j), or the last entry: none
    counter_value: np.ndarray
    name_col: np.ndarray  # per trace row
    cat_col: np.ndarray
    flow_first: np.ndarray  # per candidate: its flow ids, then terminating ones, in flow_uid
    flow_count: np.ndarray
    term_count: np.ndarray
    flow_uid: np.ndarray

    def __len__(self) -> int:
        return len(self.tl.keys)

    def _ids(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        keys = self.tl.keys[lo:hi]
        event_class = self.tl.event_class(keys)
        return keys, self.offset[event_class] + self.tl.index(keys)

    def rows(self, lo: int, hi: int) -> np.ndarray:
        return self.row[self._ids(lo, hi)[1]]

    def chunk(self, lo: int, hi: int) -> _Chunk:
        keys, ids = self._ids(lo, hi)
        row, cand = self.row[ids], self.cand[ids]
        safe = np.maximum(row, 0)
        named = row >= 0
        value = np.zeros(len(ids))
        if len(self.counter_value):
            at = ids - self.offset[COUNTERS]
            value[at >= 0] = self.counter_value[at[at >= 0]]
        return _Chunk(
            ts=self.tl.time_ns(keys), type=self.type[self.tl.event_class(keys)],
            track=self.track[ids],
            name_iid=np.where(named, self.name_col[safe] + 1, 0),
            cat_iid=np.where(named, self.cat_col[safe] + 1, 0), value=value,
            row=row, n_flow=self.flow_count[cand], n_term=self.term_count[cand],
            first=self.flow_first[cand])


def _events(trace: Trace, sel: _Selection, tracks: _Tracks, flows: _Flows,
            tl: Timeline) -> _Events:
    n, m, k = len(sel.slices), len(sel.instants), len(tracks.counter_ts)
    border = tl.border
    ends = border[::-1]  # end index i closes the slice of begin rank n - 1 - i
    n_cand = n + m
    # flows per candidate, non-terminating first (in flow order), then terminating ones
    order = np.argsort(flows.candidate * 2 + flows.terminating, kind="stable")
    flow_count = np.bincount(flows.candidate[~flows.terminating], minlength=n_cand)
    term_count = np.bincount(flows.candidate[flows.terminating], minlength=n_cand)
    total = flow_count + term_count
    zero = np.zeros(1, dtype=np.int64)
    return _Events(
        tl=tl, offset=np.array([0, n, 2 * n, 2 * n + m, 2 * n + m + k], dtype=np.int64),
        type=np.array([END, BEGIN, INSTANT, COUNTER], dtype=np.uint8),
        track=np.concatenate([tracks.slice_uuid[ends], tracks.slice_uuid[border],
                              tracks.instant_uuid, tracks.counter_uuid]),
        row=np.concatenate([np.full(n, -1), sel.slices[border], sel.instants,
                            np.full(k, -1)]).astype(np.int64),
        cand=np.concatenate([np.full(n, -1), border, n + np.arange(m),
                             np.full(k, -1)]).astype(np.int64),
        counter_value=tracks.counter_value,
        name_col=trace.col(S.NAME_ID).astype(np.int64, copy=False),
        cat_col=trace.col(S.CAT_ID).astype(np.int64, copy=False),
        flow_first=np.concatenate([np.cumsum(total) - total, zero]),
        flow_count=np.concatenate([flow_count, zero]),
        term_count=np.concatenate([term_count, zero]),
        flow_uid=flows.flow_uid[order])


def _framed(packets: list[pb.TracePacket]) -> bytes:
    return pb.Trace(packet=packets).SerializeToString()


def _used_strings(trace: Trace, column: str, selections: tuple[np.ndarray, ...]) -> list[int]:
    used = np.zeros(max(len(trace.strings), 1), dtype=bool)
    for rows in selections:
        used[trace.col(column)[rows]] = True
    return np.flatnonzero(used).tolist()


def _header(trace: Trace, sel: _Selection, tracks: _Tracks,
            first_ts: int) -> Iterator[tuple[bytes, int]]:
    """First packet (clears incremental state), interned names/categories, track descriptors:
    (framed bytes, packets in them)."""
    names = _used_strings(trace, S.NAME_ID, (sel.slices, sel.instants))
    cats = _used_strings(trace, S.CAT_ID, (sel.slices, sel.instants))
    first = True
    for lo in range(0, max(len(names), len(cats), 1), INTERNED_PACKET_NAMES):
        packet = pb.TracePacket(trusted_packet_sequence_id=SEQUENCE_ID,
                                sequence_flags=(CLEARED | NEEDS_STATE) if first else NEEDS_STATE)
        if first:
            packet.first_packet_on_sequence = True
        for i in names[lo:lo + INTERNED_PACKET_NAMES]:
            packet.interned_data.event_names.add(iid=i + 1, name=trace.strings[i])
        for i in cats[lo:lo + INTERNED_PACKET_NAMES]:
            packet.interned_data.event_categories.add(iid=i + 1, name=trace.strings[i])
        first = False
        yield _framed([packet]), 1
    for lo in range(0, len(tracks.descriptors), 1000):
        batch = tracks.descriptors[lo:lo + 1000]
        yield _framed([pb.TracePacket(timestamp=first_ts, trusted_packet_sequence_id=SEQUENCE_ID,
                                      track_descriptor=d) for d in batch]), len(batch)


_PACKET_CONSTANTS = (W.tag(_F.SEQUENCE, W.WIRE_VARINT) + W.encode_varint(SEQUENCE_ID)
                     + W.tag(_F.FLAGS, W.WIRE_VARINT) + W.encode_varint(NEEDS_STATE))


def _encode_packets(ev: _Events, lo: int, hi: int,
                    tails: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    """Packets lo..hi (args already encoded in ``tails``) as wire bytes (a uint8 array).

    Each packet is a prefix every packet has (framing, timestamp, sequence, type, track: one
    fixed-layout matrix for all rows, or one per length width), a body by layout (name and
    category, or a counter value; flow ids) and its args blob, all placed by ``W.assemble``.
    TrackEvent fields are written in this order, which protobuf allows (field order is free).
    Pure numpy on its inputs (no shared state), so chunks can be encoded on worker threads.
    """
    ch = ev.chunk(lo, hi)
    m = hi - lo
    n_flow, n_term = ch.n_flow, ch.n_term
    base = int(max(n_flow.max(initial=0), n_term.max(initial=0))) + 1
    shape = (ch.type.astype(np.int64) * base + n_flow) * base + n_term  # type is per shape
    tail_rows, blobs, tail_sizes = tails
    after = np.zeros(m, dtype=np.int64)  # TrackEvent bytes after the prefix: body and args
    after[tail_rows] = tail_sizes
    bodies = []
    for key in np.flatnonzero(np.bincount(shape)).tolist():
        event_type, nf, nt = key // (base * base), (key // base) % base, key % base
        if event_type == END and nf + nt == 0:
            continue  # nothing after the prefix
        rows = np.flatnonzero(shape == key)
        body = W.FixedRows(len(rows))
        if event_type in (BEGIN, INSTANT):
            body.varint(_F.NAME, ch.name_iid[rows])
            body.varint(_F.CATEGORY, ch.cat_iid[rows])
        elif event_type == COUNTER:
            body.double(_F.COUNTER_VALUE, ch.value[rows])
        first = ch.first[rows]
        for j in range(nf):
            body.fixed64(_F.FLOW, ev.flow_uid[first + j])
        for j in range(nt):
            body.fixed64(_F.TERMINATING_FLOW, ev.flow_uid[first + nf + j])
        after[rows] += body.width
        bodies.append(W.Rows(rows, body.matrix()))
    parts = [W.Rows(rows, _prefix(ch, rows, after[rows])) for rows in _length_classes(ch, after)]
    return W.assemble(m, parts + bodies + [W.Blobs(tail_rows, blobs, tail_sizes)])


def _prefix(ch: _Chunk, rows: np.ndarray, after: np.ndarray) -> np.ndarray:
    te = W.FixedRows(len(rows))
    te.varint(_F.TYPE, ch.type[rows])
    te.varint(_F.TRACK, ch.track[rows])
    te.tail(after)
    packet = W.FixedRows(len(rows))
    packet.varint(_F.TIMESTAMP, ch.ts[rows])
    packet.raw(_PACKET_CONSTANTS)
    packet.message(_F.TRACK_EVENT, te)
    framed = W.FixedRows(len(rows))
    framed.message(_F.PACKET, packet)
    return framed.matrix()


_SHORT = 100  # TrackEvent bytes after the prefix below which both lengths take one byte


def _length_classes(ch: _Chunk, after: np.ndarray) -> list[np.ndarray]:
    """Rows by how wide their length varints are, so one long packet (many args) does not
    widen every packet's lengths (they are padded to the widest in a matrix)."""
    short = after < _SHORT
    if short.all():
        return [np.arange(len(after))]
    # long ones by about their packet length's size (any grouping is correct, this one is tight)
    sizes = np.where(short, 1, W.varint_sizes((after + 32).astype(np.uint64)))
    return [np.flatnonzero(sizes == k) for k in np.unique(sizes).tolist()]


def _chunk_args(ev: _Events, lo: int, hi: int, args: ArgsEncoder | None,
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Packets of the chunk with args, their encoded annotations (packed bytes) and sizes."""
    empty = np.zeros(0, dtype=np.int64)
    if args is None:
        return empty, np.zeros(0, dtype=np.uint8), empty
    rows = ev.rows(lo, hi)
    args_rows = np.where(rows >= 0, args.trace.col(S.ARGS_ROW)[np.maximum(rows, 0)], -1)
    have = np.flatnonzero(args_rows >= 0)
    if not len(have):
        return empty, np.zeros(0, dtype=np.uint8), empty
    blobs = args.encode_many(args_rows[have].tolist())
    sizes = np.fromiter(map(len, blobs), dtype=np.int64, count=len(blobs))
    return have, np.frombuffer(b"".join(blobs), dtype=np.uint8), sizes


def write_perfetto_trace(trace: Trace, path: str | Path, *,
                         progress: Callable[[int], None] | None = None,
                         counters: DeviceCounters | None = None, args: bool = True,
                         chunk_packets: int = CHUNK_PACKETS) -> PerfettoExport:
    """Write ``trace`` as a Perfetto protobuf trace; ``progress(rows_done)`` after each chunk.

    ``counters`` defaults to ``analysis.counters.device_counters(trace)``; ``args=False`` leaves
    args out (smaller, faster files).
    """
    path = Path(path)
    sel = _select(trace)
    pending: deque[tuple[Future[np.ndarray], bytes, int]] = deque()
    with open(path, "wb") as out, ThreadPoolExecutor(ENCODE_THREADS) as pool:
        tracks, flows, tl = _plan(trace, sel, counters, pool)
        ev = _events(trace, sel, tracks, flows, tl)
        encoder = ArgsEncoder(trace) if args else None
        total = len(ev)
        written = packets = 0
        first_ts = int(tl.time_ns(tl.keys[:1])[0]) if total else 0
        for data, count in _header(trace, sel, tracks, first_ts):
            written += out.write(data)
            packets += count

        def flush(keep: int) -> None:
            nonlocal written
            while len(pending) > keep:  # in order; at most a few chunks in flight
                future, interned, hi = pending.popleft()
                written += out.write(interned) + out.write(future.result())
                if progress:
                    progress(min(len(trace), round(len(trace) * hi / total)))

        for lo in range(0, total, chunk_packets):
            hi = min(lo + chunk_packets, total)
            tails = _chunk_args(ev, lo, hi, encoder)  # Python, in order: interning is sequential
            interned = encoder.take_interned() if encoder else None
            # names this chunk introduced are declared right before its events
            declared = b"" if interned is None else _framed([pb.TracePacket(
                trusted_packet_sequence_id=SEQUENCE_ID, sequence_flags=NEEDS_STATE,
                interned_data=interned)])
            pending.append((pool.submit(_encode_packets, ev, lo, hi, tails), declared, hi))
            packets += hi - lo + (interned is not None)
            flush(ENCODE_THREADS)
        flush(0)
    skipped = dict(sel.skipped)
    if tracks.chrome_counter_skipped:
        skipped["counter without numeric value"] = tracks.chrome_counter_skipped
    return PerfettoExport(
        path=path, bytes_written=written, packets=packets, tracks=len(tracks.descriptors),
        slices=len(sel.slices), instants=len(sel.instants),
        counter_points=len(tracks.counter_ts), flows=flows.flows,
        overlap_tracks=tracks.overlap_tracks, unbound_flow_endpoints=flows.unbound,
        orphan_flow_endpoints=flows.orphans,
        skipped=skipped)
