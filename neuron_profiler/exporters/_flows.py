"""Flow events (ac2g, fwdbwd, ...) -> flow ids on the slices that enclose them, for track formats.

    flows = bind_flows(trace, flow_rows, cand_rows, cand_thread, pairs)
    flows.candidate      # per attachment: index into cand_rows (slices, then instants)
    flows.flow_uid       # 1.. per (category, id); flows.terminating: the flow's last end

Each flow event attaches to the innermost slice (or instant) that encloses it on its own thread.
Why this shape: a trace is sorted by time, so candidates and flow events get their (thread,
time) order from a stable radix sort on the thread alone, and the flows are searched in that
order (sorted needles make ``searchsorted`` about 10x faster than random ones on a million);
anything that is not in time order takes the general sorts instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from neuron_profiler.exporters._nesting import stable_order
from neuron_profiler.trace import schema as S
from neuron_profiler.trace.model import Trace

STEP_BACK = 4  # enclosing candidates tried per flow event when the latest start has ended


@dataclass(frozen=True)
class Flows:
    """Flow attachments sorted by (flow, time), and the counts of what could not be bound."""

    candidate: np.ndarray  # index into the candidate rows (slices, then instants)
    flow_uid: np.ndarray
    terminating: np.ndarray
    flows: int
    orphans: int
    unbound: int


def pair_key(pid: np.ndarray, tid: np.ndarray) -> np.ndarray | None:
    """One int64 per (pid, tid) when both fit in 32 bits (the usual case), else None."""
    if len(pid) == 0:
        return np.zeros(0, dtype=np.int64)
    lo, hi = -(2**31), 2**31
    if min(int(pid.min()), int(tid.min())) < lo or max(int(pid.max()), int(tid.max())) >= hi:
        return None
    return (pid.astype(np.int64) << 32) + (tid.astype(np.int64) - lo)


def thread_lookup(pid: np.ndarray, tid: np.ndarray, pairs: list[tuple[int, int]]) -> np.ndarray:
    """Index in ``pairs`` of each (pid, tid), -1 where no slice or instant is on that thread."""
    if not pairs:
        return np.full(len(pid), -1, dtype=np.int64)
    known_pid = np.array([p for p, _ in pairs], dtype=np.int64)
    known_tid = np.array([t for _, t in pairs], dtype=np.int64)
    key, known = pair_key(pid, tid), pair_key(known_pid, known_tid)
    if key is not None and known is not None:
        if len(known) == 1 or bool((known[1:] > known[:-1]).all()):  # few threads, sorted
            at = np.minimum(np.searchsorted(known, key), len(known) - 1)
            return np.where(known[at] == key, at, -1).astype(np.int64)
        return pd.Index(known).get_indexer(key).astype(np.int64)
    known_index = pd.MultiIndex.from_arrays([known_pid, known_tid])
    return known_index.get_indexer(pd.MultiIndex.from_arrays([pid, tid])).astype(np.int64)


def _shared_time_axis(a: np.ndarray, b: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Times relative to the earliest, or their dense ranks when group * time would overflow."""
    lo = min(int(a.min()), int(b.min()))
    span = max(int(a.max()), int(b.max())) - lo + 1
    if groups * span < 2**62:
        return a - lo, b - lo
    _, ranks = np.unique(np.concatenate([a, b]), return_inverse=True)
    return ranks[: len(a)].astype(np.int64), ranks[len(a) :].astype(np.int64)


def _time_order(ts: np.ndarray) -> np.ndarray | None:
    """Stable order by time; None when already in it (one comparison per event)."""
    if len(ts) < 2 or bool((ts[1:] >= ts[:-1]).all()):
        return None
    return np.argsort(ts, kind="stable")  # timsort: sorted runs (slices, instants) merge fast


def _then_by_thread(thread: np.ndarray, order: np.ndarray | None) -> np.ndarray:
    """``order`` (None: the identity) stably re-sorted by thread (a radix sort)."""
    by = stable_order(thread if order is None else thread[order])
    if order is None:
        return np.arange(len(thread)) if by is None else by
    return order if by is None else order[by]


def _search_sorted(haystack: np.ndarray, needles: np.ndarray) -> np.ndarray:
    """``np.searchsorted(haystack, needles, side="right")``. Sorted needles (flows in (thread,
    time) order) are merged with the haystack instead: one stable sort of the two sorted runs
    (timsort merges them in linear time) beats a binary search per needle (about 1.6x on 500k
    needles into 1M)."""
    if len(needles) < 2 or not bool((needles[1:] >= needles[:-1]).all()):
        return np.searchsorted(haystack, needles, side="right")
    # equal values keep the haystack's first (a stable sort), as side="right" counts them
    merged = np.argsort(np.concatenate([haystack, needles]), kind="stable")
    return np.flatnonzero(merged >= len(haystack)) - np.arange(len(needles))


def _start_order(
    key: np.ndarray, thread: np.ndarray, start: np.ndarray, end: np.ndarray
) -> np.ndarray:
    """Candidates by (thread, start, longer first); key = thread * width + time."""
    by_time = _time_order(start)
    s, e = (start, end) if by_time is None else (start[by_time], end[by_time])
    if not ((s[1:] == s[:-1]) & (e[1:] > e[:-1])).any():  # equal starts come longer first
        return _then_by_thread(thread, by_time)
    order = _then_by_thread(thread, by_time)  # equal starts may still be fine per thread
    k, e = key[order], end[order]
    if ((k[1:] == k[:-1]) & (e[1:] > e[:-1])).any():
        return np.lexsort((-end, key))
    return order


def bind_flows(
    trace: Trace,
    flow_rows: np.ndarray,
    cand: np.ndarray,
    c_thread: np.ndarray,
    pairs: list[tuple[int, int]],
) -> Flows:
    """Attach each flow event to the innermost candidate (slice or instant row) enclosing it on
    the same thread; ``c_thread`` indexes ``pairs`` per candidate."""
    empty = np.zeros(0, dtype=np.int64)
    if len(flow_rows) == 0 or len(cand) == 0:
        return Flows(empty, empty, np.zeros(0, dtype=bool), 0, 0, len(flow_rows))
    f_thread = thread_lookup(trace.col(S.PID)[flow_rows], trace.col(S.TID)[flow_rows], pairs)
    c_start = trace.col(S.TS_NS)[cand]
    c_end = c_start + trace.col(S.DUR_NS)[cand]
    f_ts = trace.col(S.TS_NS)[flow_rows]
    c_time, f_time = _shared_time_axis(c_start, f_ts, len(pairs))
    width = int(max(c_time.max(), f_time.max())) + 1
    c_key = c_thread * width + c_time
    order = _start_order(c_key, c_thread, c_start, c_end)
    f_key = np.where(f_thread >= 0, f_thread * width + f_time, -1)
    # flows in (thread, time) order: the candidates they land on then come in order too
    f_order = _then_by_thread(f_thread + 1, _time_order(f_ts))
    s_key, s_end = c_key[order], c_end[order]
    s_thread = np.repeat(np.arange(len(pairs)), np.bincount(c_thread, minlength=len(pairs)))
    pos = _search_sorted(s_key, f_key[f_order]) - 1
    o_thread, o_ts = f_thread[f_order], f_ts[f_order]  # the flows in that order
    todo = np.flatnonzero((pos >= 0) & (o_thread >= 0))
    bound_sorted = np.full(len(flow_rows), -1, dtype=np.int64)
    for _ in range(STEP_BACK):  # step back to an enclosing candidate when the latest has ended
        p = pos[todo]
        hit = (s_thread[p] == o_thread[todo]) & (s_end[p] >= o_ts[todo])
        bound_sorted[todo[hit]] = order[p[hit]]
        todo = todo[~hit & (p > 0)]
        pos[todo] -= 1
        if not len(todo):
            break
    bound = np.empty(len(flow_rows), dtype=np.int64)
    bound[f_order] = bound_sorted
    return _chain(trace, flow_rows, bound, f_ts)


def _chain(trace: Trace, flow_rows: np.ndarray, bound: np.ndarray, f_ts: np.ndarray) -> Flows:
    """Flow uid per (category, id); the last endpoint in time terminates the flow."""
    flow_id, cat = trace.col(S.FLOW_ID)[flow_rows], trace.col(S.CAT_ID)[flow_rows]
    if 0 <= int(flow_id.min()) and int(flow_id.max()) < 2**40:  # (text ids are negative)
        uid, _ = pd.factorize((cat.astype(np.int64) << 40) + flow_id)
    else:
        ids_f, _ = pd.factorize(flow_id)
        uid, _ = pd.factorize(cat.astype(np.int64) * (len(flow_id) + 1) + ids_f)
    uid = uid.astype(np.int64)
    orphan = np.bincount(uid)[uid] == 1  # the other end is not in the trace at all
    keep = np.flatnonzero(bound >= 0)
    keep = keep[
        _flow_order(
            uid[keep], (f_ts[keep] - int(f_ts.min())) * 8 + trace.col(S.PH)[flow_rows][keep]
        )
    ]
    k_uid, k_cand = uid[keep], bound[keep]
    same = np.zeros(len(keep), dtype=bool)  # consecutive ends of one flow on one slice
    same[1:] = (k_uid[1:] == k_uid[:-1]) & (k_cand[1:] == k_cand[:-1])
    k_uid, k_cand = k_uid[~same], k_cand[~same]
    enough = np.bincount(k_uid)[k_uid] >= 2
    k_uid, k_cand = k_uid[enough], k_cand[enough]
    last = np.ones(len(k_uid), dtype=bool)
    last[:-1] = k_uid[1:] != k_uid[:-1]
    return Flows(
        candidate=k_cand,
        flow_uid=k_uid + 1,
        terminating=last,
        flows=int(last.sum()),
        orphans=int(orphan.sum()),
        unbound=int(len(flow_rows) - len(k_uid) - orphan.sum()),
    )


def _flow_order(uid: np.ndarray, rel_ts: np.ndarray) -> np.ndarray:
    """Order by (flow, time, phase). Flow events come in time order (a trace is sorted by ts),
    so a stable sort by flow does it (uids number flows by first appearance: nearly sorted,
    which timsort takes in about linear time); lexsort only for unsorted input."""
    if len(uid) > 1 and (rel_ts[1:] < rel_ts[:-1]).any():
        return np.lexsort((rel_ts, uid))
    return np.argsort(uid, kind="stable")
