"""The host runtime calls that launched device rows, sorted once per trace: the work's launch
starts (``_device``), its launch sites (``_launches``), the threads that launched each device
(``AnalysisContext.launch_thread_table``) and the ops that launched each row (``device_costs``,
``graph_launches``, ``diff``) all look them up::

    calls = runtime_calls(trace)
    calls, k = calls.lookup(trace.col(S.CORRELATION), rows)  # per device row: its id's index
    calls.rows[calls.first[k] : calls.first[k + 1]]  # every call carrying it
    calls.launching_call(trace, rows)  # per row: the call that launched it, -1: none

A device row and its call share the ``correlation`` arg (Kineto writes it on both). A device row
whose correlation names no call (a trace written without the arg, or a device row without args)
is linked, in this order, by (1) an ``ac2g`` flow: its ``s`` event lies on a runtime call, its
``f`` event (same flow id) on the device row, each on its own thread; (2) the launching op's
``External id`` on both the call and the row: within one External id, the calls and the rows
each in time order, the k-th call launched the k-th row (``_external_id_links`` says what
happens when the counts differ). Such a row gets an id of its own, above every correlation id in
the trace, in the calls ``lookup`` returns: every consumer goes through ``lookup``, and a trace
whose rows all find their call by correlation id costs what it did (the fallback is computed
once per trace, and only when some row's correlation id names no call).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from neuron_profiler.analysis._keys import index_of
from neuron_profiler.analysis.selections import is_wait_name
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import Trace

_EMPTY = np.zeros(0, np.int64)
_MAX_ID = 1 << 62  # fallback ids beyond this would risk int64 sums: no fallback (hostile ids)


@dataclass(frozen=True)
class RuntimeCalls:
    """Complete runtime calls with a correlation id (> 0); with the fallback's links
    (``lookup``), then the calls those link, one id each after the correlation ids."""

    rows: np.ndarray  # sorted by (correlation id, start), file order among ties
    ids: np.ndarray  # the distinct ids, sorted
    first: np.ndarray  # index into ``rows`` of each id's first call; len(rows) appended
    linked: np.ndarray = field(default_factory=lambda: _EMPTY)  # device rows linked without
    linked_ids: np.ndarray = field(default_factory=lambda: _EMPTY)  # correlation; their ids
    trace: Trace | None = field(default=None, repr=False, compare=False)  # (for the fallback)

    def find(self, wanted: np.ndarray) -> np.ndarray:
        """Per wanted id: its index in ``ids``, -1 where no call carries it (ids <= 0 never
        match)."""
        return index_of(self.ids, wanted)

    def lookup(self, corr: np.ndarray, rows: np.ndarray) -> tuple[RuntimeCalls, np.ndarray]:
        """(calls, k): per device row (``corr``: the trace's correlation column), the index in
        ``calls.ids`` of its launching call's id, -1 where none is known. ``calls`` is these
        calls, or, where some row's correlation id names no call, these with the fallback's
        links (computed once per trace): the correlation path costs one ``find`` as before."""
        k = self.find(corr[rows])
        if self.trace is None or bool((k >= 0).all()):
            return self, k
        full = self.with_fallback
        if not len(full.linked):
            return self, k
        miss = np.flatnonzero(k < 0)
        at = np.minimum(np.searchsorted(full.linked, rows[miss]), len(full.linked) - 1)
        hit = full.linked[at] == rows[miss]
        k = k.copy()
        k[miss[hit]] = full.find(full.linked_ids[at[hit]])
        return full, k

    def launching_call(self, trace: Trace, rows: np.ndarray) -> np.ndarray:
        """Per device row, the runtime call that launched it (-1: none known): among the calls
        carrying its id (``lookup``), the latest that starts at or before the row (a launch
        precedes its work: merged traces and restarted id counters reuse an id), else the id's
        earliest call. The rule of every analysis that links a row to its launch. Where each
        id has one call (a single trace) that call is the answer, at the cost of one lookup;
        otherwise one merge sort, O(rows log rows) however often an id repeats."""
        c = trace.columns
        calls, k = self.lookup(c[S.CORRELATION], rows)
        out = np.full(len(rows), -1, np.int64)
        linked = np.flatnonzero(k >= 0)
        if not len(linked):
            return out
        if len(calls.rows) == len(calls.ids):  # one call per id
            out[linked] = calls.rows[calls.first[k[linked]]]
            return out
        out[linked] = _latest_at_or_before(calls, c[S.TS_NS], k[linked], c[S.TS_NS][rows[linked]])
        return out

    @cached_property
    def with_fallback(self) -> RuntimeCalls:
        """These calls with the flow and External id links (the module docstring)."""
        return self if self.trace is None else _with_fallback(self.trace, self)


def _latest_at_or_before(
    calls: RuntimeCalls, ts: np.ndarray, k: np.ndarray, start: np.ndarray
) -> np.ndarray:
    """Per row (``k``: its id's index in ``calls.ids``, >= 0; ``start``: its start), the latest
    call with its id starting at or before it, else the id's earliest call (``ts``: the trace's
    start column)."""
    # calls are sorted by (id, start), file order among ties: merge the rows in by the same
    # key, a row after the calls starting at its time, and count the calls before each row
    n = len(calls.rows)
    call_k = np.repeat(np.arange(len(calls.ids)), np.diff(calls.first))
    key_k, key_ts = np.concatenate([call_k, k]), np.concatenate([ts[calls.rows], start])
    is_row = np.r_[np.zeros(n, bool), np.ones(len(k), bool)]
    order = np.lexsort((is_row, key_ts, key_k))
    before = np.cumsum(~is_row[order])  # calls at or before each merged position
    at = np.empty(len(k), np.int64)
    at[order[is_row[order]] - n] = before[is_row[order]] - 1
    lo = calls.first[k]
    return calls.rows[np.where(at >= lo, at, lo)]


def runtime_calls(trace: Trace) -> RuntimeCalls:
    c = trace.columns
    calls = np.flatnonzero(
        trace.mask(kind=S.EventKind.RUNTIME, ph=S.Phase.COMPLETE) & (c[S.CORRELATION] > 0)
    )
    corr = c[S.CORRELATION][calls]
    order = np.lexsort((c[S.TS_NS][calls], corr))
    rows, corr = calls[order], corr[order]
    new = np.ones(len(rows), bool)
    new[1:] = corr[1:] != corr[:-1]
    first = np.flatnonzero(new)
    return RuntimeCalls(rows=rows, ids=corr[first], first=np.append(first, len(rows)), trace=trace)


def _with_fallback(trace: Trace, calls: RuntimeCalls) -> RuntimeCalls:
    """``calls`` with the device rows that no correlation id links linked by ac2g flows,
    then by External id (the module docstring)."""
    c = trace.columns
    work = np.flatnonzero(trace.mask(kind=list(S.WORK_KINDS), ph=S.Phase.COMPLETE))
    k = calls.find(c[S.CORRELATION][work])
    unlinked = work[k < 0]
    runtime = np.flatnonzero(trace.mask(kind=S.EventKind.RUNTIME, ph=S.Phase.COMPLETE))
    base = max(int(c[S.CORRELATION].max()), 0) + 1 if len(c[S.CORRELATION]) else 1
    if not len(unlinked) or not len(runtime) or base + len(unlinked) >= _MAX_ID:
        return calls
    dev, call = _flow_links(trace, unlinked, work, runtime)
    rest = unlinked[~np.isin(unlinked, dev)] if len(dev) else unlinked
    rest = rest[c[S.EXTERNAL_ID][rest] > 0]
    dev2 = call2 = _EMPTY
    if len(rest):  # External ids, among the calls no device row names yet
        named = np.zeros(len(calls.ids) + 1, bool)  # (the last entry: no id)
        named[k[k >= 0]] = True
        free = runtime[
            (c[S.EXTERNAL_ID][runtime] > 0) & ~named[calls.find(c[S.CORRELATION][runtime])]
        ]
        free = free[~np.isin(free, call)] if len(call) else free
        dev2, call2 = _external_id_links(trace, rest, free)
    dev, call = np.concatenate([dev, dev2]), np.concatenate([call, call2])
    if not len(dev):
        return calls
    order = np.argsort(dev)
    dev, call = dev[order], call[order]
    n, m = len(calls.rows), len(dev)
    new_ids = base + np.arange(m, dtype=np.int64)
    return RuntimeCalls(
        rows=np.concatenate([calls.rows, call]),
        ids=np.concatenate([calls.ids, new_ids]),
        first=np.concatenate([calls.first[:-1], n + np.arange(m + 1)]),
        linked=dev,
        linked_ids=new_ids,
    )


def _flow_links(
    trace: Trace, unlinked: np.ndarray, work: np.ndarray, calls: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(device row, runtime call row) pairs that an ``ac2g`` flow joins, for the ``unlinked``
    device rows: its start event on the call, its end event (same id) on the row, each the
    slice that encloses it on its own thread (Kineto writes both at the slice's start; an end
    is bound among all ``work`` rows, so a row ending as the next starts never takes that
    one's flow). A row with several flows takes the first in time. Only the end events that
    fall in an unlinked row's time are bound: few, where most rows carry correlation ids."""
    c = trace.columns
    cat = trace.string_id(V.CAT_FLOW)
    if cat < 0:
        return _EMPTY, _EMPTY
    flows = np.flatnonzero((c[S.CAT_ID] == cat) & (c[S.FLOW_ID] != -1))
    ph = c[S.PH][flows]
    starts, ends = flows[ph == S.Phase.FLOW_START], flows[ph == S.Phase.FLOW_END]
    ends = ends[_in_some(trace, unlinked, c[S.TS_NS][ends])]
    if not len(ends) or not len(starts):
        return _EMPTY, _EMPTY
    on_row = _enclosing(trace, ends, work)
    is_unlinked = np.zeros(len(trace) + 1, bool)  # (the last entry: no row)
    is_unlinked[unlinked] = True
    keep = is_unlinked[on_row]
    ends, on_row = ends[keep], on_row[keep]
    starts = starts[index_of(np.unique(c[S.FLOW_ID][ends]), c[S.FLOW_ID][starts]) >= 0]
    on_call = _enclosing(trace, starts, calls)
    starts, on_call = starts[on_call >= 0], on_call[on_call >= 0]
    if not len(starts) or not len(ends):
        return _EMPTY, _EMPTY
    ids, first = np.unique(c[S.FLOW_ID][starts], return_index=True)  # (starts: time order)
    k = index_of(ids, c[S.FLOW_ID][ends])  # (text flow ids are negative labels: searched)
    hit = k >= 0
    dev, call = on_row[hit], on_call[first[k[hit]]]
    dev, once = np.unique(dev, return_index=True)  # (ends: time order: the first flow wins)
    return dev, call[once]


def _in_some(trace: Trace, rows: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Which instants ``ts`` fall within some row's [start, end] (any thread): a cheap
    superset of the instants those rows enclose."""
    c = trace.columns
    start = c[S.TS_NS][rows]
    order = np.argsort(start, kind="stable")
    start, reach = start[order], np.maximum.accumulate((start + c[S.DUR_NS][rows])[order])
    j = np.searchsorted(start, ts, side="right") - 1
    return (j >= 0) & (reach[np.maximum(j, 0)] >= ts)


def _enclosing(trace: Trace, points: np.ndarray, slices: np.ndarray) -> np.ndarray:
    """Per point row (an instant in time on a thread), the slice row among ``slices`` on the
    same (pid, tid) with the latest start at or before it that has not ended before it; -1:
    none. One merge of the two sets by (pid, tid, time), no loop per thread."""
    out = np.full(len(points), -1, np.int64)
    if not len(points) or not len(slices):
        return out
    c = trace.columns
    both = np.concatenate([slices, points])
    is_point = np.r_[np.zeros(len(slices), bool), np.ones(len(points), bool)]
    order = np.lexsort((is_point, c[S.TS_NS][both], c[S.TID][both], c[S.PID][both]))
    before = np.cumsum(~is_point[order]) - 1  # the latest slice at or before each position
    sorted_slices = both[order[~is_point[order]]]
    at_point = is_point[order]
    j = before[at_point]
    point = both[order[at_point]]
    which = order[at_point] - len(slices)
    ok = j >= 0
    cand = sorted_slices[np.maximum(j, 0)]
    ok &= (c[S.PID][cand] == c[S.PID][point]) & (c[S.TID][cand] == c[S.TID][point])
    ok &= c[S.TS_NS][cand] + c[S.DUR_NS][cand] >= c[S.TS_NS][point]
    out[which[ok]] = cand[ok]
    return out


def _external_id_links(
    trace: Trace, rows: np.ndarray, calls: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(device row, runtime call row) pairs sharing the launching op's External id. Within
    one id, rows and calls each in time order: with as many calls as rows the k-th call
    launched the k-th row; the counts are aligned at the end otherwise, so that extra calls
    before the launches (occupancy and attribute queries) launch nothing and a single call
    launches every row (a graph launch). Synchronize calls never launch: they are left out."""
    c = trace.columns
    rows = rows[c[S.EXTERNAL_ID][rows] > 0]
    calls = calls[c[S.EXTERNAL_ID][calls] > 0]
    if not len(rows) or not len(calls):
        return _EMPTY, _EMPTY
    names = np.unique(c[S.NAME_ID][calls])
    waits = [i for i in names.tolist() if _never_launches(trace.strings[i])]
    calls = calls[~np.isin(c[S.NAME_ID][calls], waits)]
    rows = rows[np.lexsort((c[S.TS_NS][rows], c[S.EXTERNAL_ID][rows]))]
    calls = calls[np.lexsort((c[S.TS_NS][calls], c[S.EXTERNAL_ID][calls]))]
    call_keys, call_first, call_n = np.unique(
        c[S.EXTERNAL_ID][calls], return_index=True, return_counts=True
    )
    row_key = c[S.EXTERNAL_ID][rows]
    row_keys, row_first, row_n = np.unique(row_key, return_index=True, return_counts=True)
    g = np.searchsorted(row_keys, row_key)  # each row's group among the rows
    rank = np.arange(len(rows)) - row_first[g]
    k = index_of(call_keys, row_key)
    hit = k >= 0
    n_calls, n_rows = call_n[k[hit]], row_n[g[hit]]
    j = np.clip(rank[hit] + n_calls - n_rows, 0, n_calls - 1)
    return rows[hit], calls[call_first[k[hit]] + j]


def _never_launches(name: str) -> bool:
    """A runtime wait that is no copy: a synchronize (``cudaMemcpy`` waits and launches)."""
    return is_wait_name(name) and "memcpy" not in name.lower()
