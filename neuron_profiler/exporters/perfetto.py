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
from neuron_profiler.exporters import _protowire as W
from neuron_profiler.exporters._annotations import ArgsEncoder
from neuron_profiler.exporters._nesting import Nesting, assign_lanes
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
    begin_pos: np.ndarray
    end_pos: np.ndarray
    counter_uuids: list[tuple[int, CounterSeries]]
    chrome_counters: list[tuple[int, np.ndarray, np.ndarray]]
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


def _select(trace: Trace) -> _Selection:
    ph, dur, ts = trace.col(S.PH), trace.col(S.DUR_NS), trace.col(S.TS_NS)
    valid_ts = ts >= 0
    complete = (ph == S.Phase.COMPLETE) & valid_ts
    flow_phase = np.isin(ph, np.array(FLOW_PHASES, dtype=np.uint8)) & valid_ts
    skipped = {
        "negative duration": int((complete & (dur < 0)).sum()),
        "negative timestamp": int((~valid_ts).sum()),
        "unpaired begin/end": int((np.isin(ph, [S.Phase.BEGIN, S.Phase.END]) & valid_ts).sum()),
        "unknown phase": int(((ph == S.Phase.OTHER) & valid_ts).sum()),
        "flow without id": int((flow_phase & (trace.col(S.FLOW_ID) < 0)).sum()),
    }
    return _Selection(
        slices=np.flatnonzero(complete & (dur > 0)),
        instants=np.flatnonzero((complete & (dur == 0)) | ((ph == S.Phase.INSTANT) & valid_ts)),
        flows=np.flatnonzero(flow_phase & (trace.col(S.FLOW_ID) >= 0)),
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


def _nest(trace: Trace, sel: _Selection, threads: _Threads) -> Nesting:
    start = trace.col(S.TS_NS)[sel.slices]
    return assign_lanes(threads.thread[:len(sel.slices)], start,
                        start + trace.col(S.DUR_NS)[sel.slices])


def _plan(trace: Trace, sel: _Selection, counters: DeviceCounters | None,
          pool: ThreadPoolExecutor) -> tuple[_Tracks, _Flows]:
    """Tracks (with nesting and counters) and flows; the independent parts run side by side."""
    threads = _threads(trace, sel)
    nest = pool.submit(_nest, trace, sel, threads)
    flows = pool.submit(_bind_flows, trace, sel, threads)
    counters = device_counters(trace) if counters is None else counters
    return _tracks(trace, sel, counters, threads, nest.result()), flows.result()


def _tracks(trace: Trace, sel: _Selection, counters: DeviceCounters, threads: _Threads,
            nest: Nesting) -> _Tracks:
    ids = _Ids()
    devices = _device_pids(trace, counters)
    thread, pairs = threads.thread, threads.pairs
    n_slices = len(sel.slices)
    chrome_counters, skipped_c = _chrome_counters(trace, sel.counters)
    pids = sorted({p for p, _ in pairs} | {s.pid for s in counters.series}
                  | {p for p, _, _ in chrome_counters})
    proc_uuid, out_pid = _process_tracks(trace, pids, devices, ids)
    rank: dict[int, int] = {}

    def child(pid: int, **fields: Any) -> pb.TrackDescriptor:
        rank[pid] = rank.get(pid, 0) + 1
        return ids.add(parent=proc_uuid[pid], sibling_order_rank=rank[pid], **fields)

    lanes = int(nest.lane.max()) + 1 if n_slices else 1
    track_uuid = np.zeros(len(pairs) * lanes, dtype=np.int64)
    used_lanes = set(np.flatnonzero(np.bincount(thread[:n_slices] * lanes + nest.lane,
                                                minlength=1)).tolist())
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
        for lane in range(1, lanes):
            if i * lanes + lane in used_lanes:
                track_uuid[i * lanes + lane] = child(pid, name=f"{name} (overlap {lane})").uuid
    counter_uuids = []
    for series in counters.series:
        where = ("" if series.tid is None else
                 _thread_name(trace, series.pid, series.tid, True) + " ")
        unit = "" if series.name.endswith(series.unit) else f" ({series.unit})"
        desc = child(series.pid, name=f"{where}{series.name}{unit}",
                     counter=pb.CounterDescriptor(unit_name=series.unit))
        counter_uuids.append((desc.uuid, series))
    chrome = []
    for pid, name, ts, values in chrome_counters:
        desc = child(pid, name=name, counter=pb.CounterDescriptor())
        chrome.append((desc.uuid, ts, values))
    return _Tracks(
        descriptors=ids.descriptors,
        slice_uuid=track_uuid[thread[:n_slices] * lanes + nest.lane],
        instant_uuid=track_uuid[thread[n_slices:] * lanes],
        begin_pos=nest.begin_pos,
        end_pos=nest.end_pos, counter_uuids=counter_uuids, chrome_counters=chrome,
        overlap_tracks=len([k for k in used_lanes if k % lanes]),
        chrome_counter_skipped=skipped_c)


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


def _bind_flows(trace: Trace, sel: _Selection, threads: _Threads) -> _Flows:
    """Attach each flow event to the innermost slice enclosing it on the same thread."""
    cand = np.concatenate([sel.slices, sel.instants])
    empty = np.zeros(0, dtype=np.int64)
    if len(sel.flows) == 0 or len(cand) == 0:
        return _Flows(empty, empty, np.zeros(0, dtype=bool), 0, 0, len(sel.flows))
    pid, tid = trace.col(S.PID), trace.col(S.TID)
    c_thread = threads.thread
    f_thread = _thread_lookup(pid[sel.flows], tid[sel.flows], threads.pairs)
    c_start = trace.col(S.TS_NS)[cand]
    c_end = c_start + trace.col(S.DUR_NS)[cand]
    f_ts = trace.col(S.TS_NS)[sel.flows]
    c_time, f_time = _shared_time_axis(c_start, f_ts, len(threads.pairs))
    width = int(max(c_time.max(), f_time.max())) + 1
    c_key = c_thread * width + c_time
    order = _start_order(c_key, c_end)
    f_key = np.where(f_thread >= 0, f_thread * width + f_time, -1)
    pos = np.searchsorted(c_key[order], f_key, side="right") - 1
    bound = np.full(len(sel.flows), -1, dtype=np.int64)
    for _ in range(4):  # step back to an enclosing slice when the latest start has ended
        ok = (pos >= 0) & (f_thread >= 0) & (bound < 0)
        c = order[np.maximum(pos, 0)]
        hit = ok & (c_thread[c] == f_thread) & (c_end[c] >= f_ts)
        bound[hit] = c[hit]
        pos = np.where(hit, pos, pos - 1)
    return _chain_flows(trace, sel, bound, f_ts)


def _shared_time_axis(a: np.ndarray, b: np.ndarray,
                      groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Times relative to the earliest, or their dense ranks when group * time would overflow."""
    lo = min(int(a.min()), int(b.min()))
    span = max(int(a.max()), int(b.max())) - lo + 1
    if groups * span < 2**62:
        return a - lo, b - lo
    _, ranks = np.unique(np.concatenate([a, b]), return_inverse=True)
    return ranks[: len(a)].astype(np.int64), ranks[len(a):].astype(np.int64)


def _start_order(key: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Order by (key, -end): a stable sort on key, with a full sort only if ties need it."""
    order = np.argsort(key, kind="stable")
    k, e = key[order], end[order]
    if ((k[1:] == k[:-1]) & (e[1:] > e[:-1])).any():
        return np.lexsort((-end, key))
    return order


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
    rel_ts = (f_ts[keep] - int(f_ts.min())) * 8 + trace.col(S.PH)[sel.flows][keep]
    keep = keep[np.lexsort((rel_ts, uid[keep]))]  # by flow, then time (then phase)
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
    row: np.ndarray  # trace row whose args to write (-1: none)


@dataclass(frozen=True)
class _Events:
    """Every TrackEvent packet: sources (slice ends in nesting order, instants, counter
    samples) and the emission order over them (time, ties in a per-track-valid order)."""

    order: np.ndarray
    ts: np.ndarray
    type: np.ndarray
    track: np.ndarray
    row: np.ndarray
    value: np.ndarray
    name_iid: np.ndarray  # per trace row
    cat_iid: np.ndarray
    flow_packet: np.ndarray  # flow attachments sorted by (packet, terminating)
    flow_uid: np.ndarray
    flow_terminating: np.ndarray

    def __len__(self) -> int:
        return len(self.order)

    def chunk(self, lo: int, hi: int) -> _Chunk:
        idx = self.order[lo:hi]
        kind, row = self.type[idx], self.row[idx]
        named = (kind == BEGIN) | (kind == INSTANT)
        safe = np.maximum(row, 0)
        return _Chunk(ts=self.ts[idx], type=kind, track=self.track[idx],
                      name_iid=np.where(named, self.name_iid[safe], 0),
                      cat_iid=np.where(named, self.cat_iid[safe], 0),
                      value=self.value[idx] if len(self.value) else np.zeros(len(idx)),
                      row=np.where(named, row, -1))


def _events(trace: Trace, sel: _Selection, tracks: _Tracks, flows: _Flows) -> _Events:
    ts_col, dur = trace.col(S.TS_NS), trace.col(S.DUR_NS)
    n, m = len(sel.slices), len(sel.instants)
    seq = np.empty(2 * n, dtype=np.int64)  # endpoint index in nesting order: i begin, n+i end
    seq[tracks.begin_pos] = np.arange(n)
    seq[tracks.end_pos] = np.arange(n, 2 * n)
    is_begin = seq < n
    slice_of = np.where(is_begin, seq, seq - n)
    s_rows = sel.slices[slice_of]
    c_ts, c_track, c_value = _counter_points(tracks)
    k = len(c_ts)
    ts = np.concatenate([ts_col[s_rows] + np.where(is_begin, 0, dur[s_rows]),
                         ts_col[sel.instants], c_ts])
    order = np.argsort(ts, kind="stable")  # merges the per-track runs; ties keep track order
    where = np.empty(len(order), dtype=np.int64)
    where[order] = np.arange(len(order))
    # candidate c (slice rows, then instant rows) -> its begin / instant packet in emission order
    cand_packet = np.concatenate([where[tracks.begin_pos], where[2 * n + np.arange(m)]])
    att = cand_packet[flows.candidate]
    att_order = np.argsort(att * 2 + flows.terminating, kind="stable")  # flows, then ends
    value = np.concatenate([np.zeros(2 * n + m), c_value]) if k else np.zeros(0)
    return _Events(
        order=order, ts=ts,
        type=np.concatenate([np.where(is_begin, BEGIN, END), np.full(m, INSTANT),
                             np.full(k, COUNTER)]).astype(np.uint8),
        track=np.concatenate([tracks.slice_uuid[slice_of], tracks.instant_uuid, c_track]),
        row=np.concatenate([s_rows, sel.instants, np.full(k, -1)]), value=value,
        name_iid=trace.col(S.NAME_ID).astype(np.int64) + 1,
        cat_iid=trace.col(S.CAT_ID).astype(np.int64) + 1,
        flow_packet=att[att_order], flow_uid=flows.flow_uid[att_order],
        flow_terminating=flows.terminating[att_order])


def _counter_points(tracks: _Tracks) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Counter samples: a bin's value at its start where it changes, and 0 where it ends."""
    ts, uuid, value = [], [], []
    for track, series in tracks.counter_uuids:
        if len(series.ts_ns) == 0:
            continue
        step = int(series.ts_ns[1] - series.ts_ns[0]) if len(series.ts_ns) > 1 else 0
        s_ts = np.append(series.ts_ns, series.ts_ns[-1] + step)
        s_value = np.append(series.values, 0.0)
        change = np.ones(len(s_ts), dtype=bool)  # a counter holds its value: write changes only
        change[1:] = s_value[1:] != s_value[:-1]
        ts.append(s_ts[change])
        value.append(s_value[change])
        uuid.append(np.full(int(change.sum()), track))
    for track, c_ts, c_values in tracks.chrome_counters:
        ts.append(c_ts)
        value.append(c_values)
        uuid.append(np.full(len(c_ts), track))
    if not ts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    return np.concatenate(ts), np.concatenate(uuid), np.concatenate(value)


def _framed(packets: list[pb.TracePacket]) -> bytes:
    return pb.Trace(packet=packets).SerializeToString()


def _header(trace: Trace, sel: _Selection, tracks: _Tracks,
            first_ts: int) -> Iterator[tuple[bytes, int]]:
    """First packet (clears incremental state), interned names/categories, track descriptors:
    (framed bytes, packets in them)."""
    named = np.concatenate([sel.slices, sel.instants])
    names = np.unique(trace.col(S.NAME_ID)[named]).tolist()
    cats = np.unique(trace.col(S.CAT_ID)[named]).tolist()
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


_TYPE_FIELD = {t: W.tag(_F.TYPE, W.WIRE_VARINT) + W.encode_varint(t)
               for t in (BEGIN, END, INSTANT, COUNTER)}


def _encode_packets(ev: _Events, lo: int, hi: int, ch: _Chunk,
                    tails: tuple[np.ndarray, list[bytes], np.ndarray]) -> bytes:
    """Packets lo..hi (gathered in ``ch``, args already encoded in ``tails``) as wire bytes.

    Packets are grouped by layout (event type, and how many flow ids they carry);
    each group is one fixed-layout byte matrix, and the groups are interleaved back in order.
    Pure numpy on its inputs (no shared state), so chunks can be encoded on worker threads.
    """
    m = hi - lo
    kind = ch.type
    a, b = np.searchsorted(ev.flow_packet, [lo, hi])
    f_packet, f_term = ev.flow_packet[a:b] - lo, ev.flow_terminating[a:b]
    n_flow = np.bincount(f_packet[~f_term], minlength=m)
    n_term = np.bincount(f_packet[f_term], minlength=m)
    n_all = n_flow + n_term
    first = a + np.cumsum(n_all) - n_all  # each packet's flows, then its terminating flows
    base = int(max(n_flow.max(initial=0), n_term.max(initial=0))) + 1
    shape = (kind.astype(np.int64) * base + n_flow) * base + n_term  # type is constant per shape
    tail_rows, blobs, tail_sizes = tails
    layouts = []
    for key in np.flatnonzero(np.bincount(shape)).tolist():
        rows = np.flatnonzero(shape == key)
        event_type, nf, nt = key // (base * base), (key // base) % base, key % base
        te = W.FixedRows(len(rows))
        te.raw(_TYPE_FIELD[event_type])
        te.varint(_F.TRACK, ch.track[rows])
        if event_type in (BEGIN, INSTANT):
            te.varint(_F.NAME, ch.name_iid[rows])
            te.varint(_F.CATEGORY, ch.cat_iid[rows])
        elif event_type == COUNTER:
            te.double(_F.COUNTER_VALUE, ch.value[rows])
        for j in range(nf):
            te.fixed64(_F.FLOW, ev.flow_uid[first[rows] + j])
        for j in range(nt):
            te.fixed64(_F.TERMINATING_FLOW, ev.flow_uid[first[rows] + nf + j])
        te.tail(tail_sizes[rows])
        packet = W.FixedRows(len(rows))
        packet.varint(_F.TIMESTAMP, ch.ts[rows])
        packet.raw(_PACKET_CONSTANTS)
        packet.message(_F.TRACK_EVENT, te)
        framed = W.FixedRows(len(rows))
        framed.message(_F.PACKET, packet)
        layouts.append((rows, framed.matrix()))
    return W.interleave(layouts, m, (tail_rows, blobs))


def _chunk_args(ch: _Chunk, args: ArgsEncoder | None) -> tuple[np.ndarray, list[bytes], np.ndarray]:
    """Rows of the chunk with args, their encoded annotations, and per-row sizes."""
    sizes = np.zeros(len(ch.ts), dtype=np.int64)
    if args is None:
        return np.zeros(0, dtype=np.int64), [], sizes
    rows = ch.row
    args_rows = np.where(rows >= 0, args.trace.col(S.ARGS_ROW)[np.maximum(rows, 0)], -1)
    have = np.flatnonzero(args_rows >= 0)
    blobs = args.encode_many(args_rows[have].tolist())
    sizes[have] = [len(blob) for blob in blobs]
    return have, blobs, sizes


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
    pending: deque[tuple[Future[bytes], bytes, int]] = deque()
    with open(path, "wb") as out, ThreadPoolExecutor(ENCODE_THREADS) as pool:
        tracks, flows = _plan(trace, sel, counters, pool)
        ev = _events(trace, sel, tracks, flows)
        encoder = ArgsEncoder(trace) if args else None
        total = len(ev)
        written = packets = 0
        first_ts = int(ev.ts[ev.order[0]]) if total else 0
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
            ch = ev.chunk(lo, hi)
            tails = _chunk_args(ch, encoder)  # Python, in order: interning is sequential
            interned = encoder.take_interned() if encoder else None
            # names this chunk introduced are declared right before its events
            declared = b"" if interned is None else _framed([pb.TracePacket(
                trusted_packet_sequence_id=SEQUENCE_ID, sequence_flags=NEEDS_STATE,
                interned_data=interned)])
            pending.append((pool.submit(_encode_packets, ev, lo, hi, ch, tails), declared, hi))
            packets += hi - lo + (interned is not None)
            flush(ENCODE_THREADS)
        flush(0)
    skipped = dict(sel.skipped)
    if tracks.chrome_counter_skipped:
        skipped["counter without numeric value"] = tracks.chrome_counter_skipped
    return PerfettoExport(
        path=path, bytes_written=written, packets=packets, tracks=len(tracks.descriptors),
        slices=len(sel.slices), instants=len(sel.instants),
        counter_points=int((ev.type == COUNTER).sum()), flows=flows.flows,
        overlap_tracks=tracks.overlap_tracks, unbound_flow_endpoints=flows.unbound,
        orphan_flow_endpoints=flows.orphans,
        skipped=skipped)
