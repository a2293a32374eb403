"""A trace's steps rebuilt from its dependencies and replayed, with measured or swapped costs::

    graph = dependency_graph(ctx)                 # what waits for what, from the trace
    timeline = replay(graph, graph.duration)      # measured durations: the trace again
    timeline.step_ns                              # replayed wall time per step

The graph holds what the timeline of one process depends on (docs/projection.md, "Replay"):

- **host order**: the host runs as recorded; its time between two blocking waits shifts by one
  offset (every thread together: a training step's threads are coupled through the launching
  thread's waits, an ASSUMPTION);
- **launch -> device work**: an item starts no earlier than its launch (the runtime call with
  its correlation id) plus a launch latency: the measured one where the queue was idle at the
  launch, the trace's median idle-queue latency where it was busy;
- **queue order**: items of one queue (device, stream) run in their recorded order, with the
  recorded gap after the previous item where it started right behind it (the queue was the
  constraint);
- **collectives after compute**: a collective that started when a compute item of its device
  ended (not at its launch, its own queue idle) waits for that item (the stream wait that
  serialised it, NCCL's event or the emulator's input dependency);
- **syncs**: a host call that blocked until device work was done (``sync_calls``) ends when the
  latest item it evidently waited for (launched before it, finished before it returned) ends,
  on every queue whose work ended while it waited, plus the time it took to return after that;
- **host delays**: extra host time at a point (an op the target runs on the host), optionally
  after waiting for the device.

Collectives are device items on their own queue; a rank's wait for its peers is part of the
recorded duration (one trace is one rank). The queue-depth bound of the runtime is carried in
the recorded launch-call durations (a launch that blocked on a full queue keeps its time);
``replay_with_queue_depth`` models another runtime's bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from neuron_profiler.analysis import _tree
from neuron_profiler.analysis._device import COLLECTIVE, COMPUTE, NO_LAUNCH
from neuron_profiler.analysis.context import AnalysisContext
from neuron_profiler.analysis.steps import in_span
from neuron_profiler.analysis.sync_calls import sync_calls
from neuron_profiler.trace import schema as S

# A sync that returned within this long before the end of an item still waited for it (clock
# granularity of the two timelines: CUPTI and the host clock, µs-rounded in the JSON).
SYNC_SLACK_NS = 2_000
_NEVER = -(2**62)  # "no item awaited": earlier than any time
# Rounds of the queue-depth replay (each turns the launches found too early into host waits).
QUEUE_ROUNDS = 8


@dataclass(frozen=True)
class DependencyGraph:
    """Device items (in ``ctx.work`` order) and host wait events of one trace.

    Args:
        queue: dense queue code per item (device, stream).
        launch_ns: recorded start of the launching call (NO_LAUNCH: none; then ``start_ns``
            anchors the item to the host timeline).
        start_ns / duration: recorded start and duration per item.
        latency_ns: launch -> start when launch-bound (the queue was idle), else the trace's
            median idle-queue latency.
        gap_ns: recorded gap behind the previous item of the queue when queue-bound, else 0.
        launch_bound: the item's start was set by its launch, not by its queue.
        base_latency_ns: the trace's median launch latency on an idle queue.
        sync_start_ns / sync_end_ns: recorded host waits (innermost, in start order).
        sync_awaited: the item each waited for (-1: none found).
        sync_also: the items it waited for on the other queues (CSR: ``sync_also_items[
            sync_also_ptr[k] : sync_also_ptr[k + 1]]``): the last of each queue launched before
            it that ended while it waited; a replay with other costs ends it at the latest.
        after: per item, the item on another queue it waited for (-1: none; collectives
            serialised behind compute).
        sync_return_ns: recorded time from the awaited item's end (or the call's start, if
            later) to the call's return.
        step_start_ns / step_host_end_ns: steps on the host; ``last_step_items``: items launched
            or started in the last step (it is stretched over them, as ``steps`` does).
    """

    queue: np.ndarray
    device: np.ndarray  # device pid per item (the queue-depth bound is per device)
    launch_ns: np.ndarray
    start_ns: np.ndarray
    duration: np.ndarray
    latency_ns: np.ndarray
    gap_ns: np.ndarray
    launch_bound: np.ndarray
    base_latency_ns: int
    sync_start_ns: np.ndarray
    sync_end_ns: np.ndarray
    sync_awaited: np.ndarray
    sync_return_ns: np.ndarray
    step_start_ns: np.ndarray
    step_host_end_ns: np.ndarray
    step_end_ns: np.ndarray
    last_step_items: np.ndarray
    after: np.ndarray | None = None
    sync_also_ptr: np.ndarray | None = None
    sync_also_items: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.queue)


@dataclass(frozen=True)
class HostDelays:
    """Extra host time at recorded instants (in time order): the host first waits until item
    ``awaited`` ends (-1: no wait), then spends ``extra_ns``."""

    at_ns: np.ndarray
    awaited: np.ndarray
    extra_ns: np.ndarray

    @staticmethod
    def none() -> HostDelays:
        z = np.zeros(0, np.int64)
        return HostDelays(z, z, z)

    def merge(self, other: HostDelays) -> HostDelays:
        at = np.concatenate([self.at_ns, other.at_ns])
        order = np.argsort(at, kind="stable")
        return HostDelays(
            at[order],
            np.concatenate([self.awaited, other.awaited])[order],
            np.concatenate([self.extra_ns, other.extra_ns])[order],
        )


@dataclass(frozen=True)
class ReplayedTimeline:
    """Replayed start and end per item, host offset per recorded instant, and the steps."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    step_ns: np.ndarray
    launch_ns: np.ndarray  # replayed host time of each item's launch (its anchor, shifted)

    @property
    def mean_step_ns(self) -> float:
        return float(self.step_ns.mean()) if len(self.step_ns) else 0.0


def dependency_graph(ctx: AnalysisContext, *, recorded_latencies: bool = False) -> DependencyGraph:
    """The graph of one trace. Latencies are the trace's medians (launch -> start on an idle
    queue, the gap behind the previous item of a busy queue, a sync's return after the work it
    waited for), so a replay with the recorded durations tests the dependency model itself;
    ``recorded_latencies``: each item's own (a replay then reproduces the trace exactly)."""
    w = ctx.work
    c = ctx.trace.columns
    keep = ~w.wait  # a collective-wait slice is no work (its time is inside the collective)
    idx = np.flatnonzero(keep)
    rows = w.rows[idx]
    queue = np.unique(
        np.stack([w.device[idx], c[S.TID][rows]], axis=1), axis=0, return_inverse=True
    )[1].reshape(-1)
    start, end, launch = w.start[idx], w.end[idx], w.launch[idx]
    order = np.lexsort((start, queue))
    prev_end = np.full(len(idx), np.iinfo(np.int64).min)
    same = np.zeros(len(idx), bool)
    same[order[1:]] = queue[order[1:]] == queue[order[:-1]]
    prev_end[order[1:]] = np.where(same[order[1:]], end[order[:-1]], prev_end[order[1:]])
    known = launch != NO_LAUNCH
    after = _serialised_after(w.queue[idx], w.device[idx], start, end, launch, prev_end)
    idle_at_launch = known & (prev_end <= launch) & (after < 0)
    base = (
        int(np.median(start[idle_at_launch] - launch[idle_at_launch]))
        if idle_at_launch.any()
        else 0
    )
    launch_bound = known & (prev_end <= launch + base)
    behind = same & ~launch_bound
    gap_median = int(np.median(np.maximum(start - prev_end, 0)[behind])) if behind.any() else 0
    if recorded_latencies:
        latency = np.where(launch_bound & (after < 0), np.maximum(start - launch, 0), base)
        gap = np.where(behind, np.maximum(start - prev_end, 0), 0)
    else:
        latency = np.full(len(idx), base, np.int64)
        gap = np.where(behind, gap_median, 0)
    sync_start, sync_end, awaited, ret = _syncs(ctx, end, launch)
    also_ptr, also_items = _also_awaited(queue, end, launch, sync_start, sync_end, awaited)
    if not recorded_latencies and len(ret):
        ret = np.full(len(ret), int(np.median(ret)), np.int64)
    steps = ctx.steps
    host_end = steps.end_ns if steps.host_end_ns is None else steps.host_end_ns
    last = (
        np.flatnonzero(in_span(start, launch, steps.start_ns[-1], host_end[-1]))
        if len(steps)
        else np.zeros(0, np.int64)
    )
    return DependencyGraph(
        queue=queue,
        device=w.device[idx],
        launch_ns=launch,
        start_ns=start,
        duration=end - start,
        latency_ns=latency,
        gap_ns=gap,
        launch_bound=launch_bound,
        base_latency_ns=base,
        sync_start_ns=sync_start,
        sync_end_ns=sync_end,
        sync_awaited=awaited,
        sync_return_ns=ret,
        step_start_ns=steps.start_ns,
        step_host_end_ns=host_end,
        step_end_ns=steps.end_ns,
        last_step_items=last,
        after=after if (after >= 0).any() else None,
        sync_also_ptr=also_ptr,
        sync_also_items=also_items,
    )


def _serialised_after(
    kind: np.ndarray,
    device: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    launch: np.ndarray,
    prev_end: np.ndarray,
) -> np.ndarray:
    """Per item, the compute item a collective was serialised behind (-1: none): the collective
    started within ``SYNC_SLACK_NS`` of the end of a compute item of its device that ended after
    the collective's launch, while its own queue was idle."""
    after = np.full(len(start), -1, np.int64)
    coll = np.flatnonzero((kind == COLLECTIVE) & (launch != NO_LAUNCH))
    comp = np.flatnonzero(kind == COMPUTE)
    if len(coll) == 0 or len(comp) == 0:
        return after
    j = np.full(len(coll), -1, np.int64)
    for d in np.unique(device[coll]).tolist():  # per device (a few)
        mine = np.flatnonzero(device[coll] == d)
        ours = comp[device[comp] == d]
        ours = ours[np.argsort(end[ours], kind="stable")]
        # the last compute item of the device ending by the collective's start (+ slack)
        at = np.searchsorted(end[ours], start[coll[mine]] + SYNC_SLACK_NS, side="right") - 1
        j[mine] = np.where(at >= 0, ours[np.maximum(at, 0)] if len(ours) else -1, -1)
    ok = j >= 0
    cand = np.maximum(j, 0)
    ok &= end[cand] >= start[coll] - SYNC_SLACK_NS  # it started when that item ended ...
    ok &= end[cand] > launch[coll]  # ... which was still running at its launch ...
    ok &= prev_end[coll] < start[coll] - SYNC_SLACK_NS  # ... its own queue idle
    after[coll[ok]] = cand[ok]
    return after


def _also_awaited(
    queue: np.ndarray,
    end: np.ndarray,
    launch: np.ndarray,
    sync_start: np.ndarray,
    sync_end: np.ndarray,
    awaited: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Per sync with an awaited item, the last item of every other queue launched before it that
    ended while it waited (CSR); one vectorised search per queue."""
    n_sync = len(sync_start)
    if n_sync == 0 or len(queue) == 0:
        return np.zeros(n_sync + 1, np.int64), np.zeros(0, np.int64)
    known = launch != NO_LAUNCH
    pairs_sync, pairs_item = [], []
    order = np.lexsort((end, queue))
    cuts = np.r_[0, np.flatnonzero(np.diff(queue[order])) + 1, len(order)]
    for lo, hi in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):  # per queue
        items = order[lo:hi]
        j = np.searchsorted(end[items], sync_end + SYNC_SLACK_NS, side="right") - 1
        hit = j >= 0
        cand = items[np.maximum(j, 0)]
        hit &= (end[cand] > sync_start) & known[cand] & (launch[cand] < sync_start)
        hit &= (awaited >= 0) & (cand != awaited)
        pairs_sync.append(np.flatnonzero(hit))
        pairs_item.append(cand[hit])
    s, i = np.concatenate(pairs_sync), np.concatenate(pairs_item)
    o = np.argsort(s, kind="stable")
    ptr = np.searchsorted(s[o], np.arange(n_sync + 1))
    return ptr.astype(np.int64), i[o].astype(np.int64)


def graph_items(ctx: AnalysisContext) -> np.ndarray:
    """Indices into ``ctx.work`` of the graph's items (collective-wait slices left out)."""
    return np.flatnonzero(~ctx.work.wait)


def _syncs(
    ctx: AnalysisContext, end: np.ndarray, launch: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Innermost blocking waits (a sync holding another on its thread is left to the inner
    one), the item each waited for and its return time."""
    c = ctx.trace.columns
    rows = ctx.result(sync_calls)
    s, e = c[S.TS_NS][rows], c[S.TS_NS][rows] + c[S.DUR_NS][rows]
    thread = (
        np.unique(np.stack([c[S.PID][rows], c[S.TID][rows]], axis=1), axis=0, return_inverse=True)[
            1
        ].reshape(-1)
        if len(rows)
        else np.zeros(0, np.int64)
    )
    order = np.lexsort((-e, s, thread))
    parent = _tree.parents(thread[order], s[order], e[order])
    holds = np.zeros(len(rows), bool)
    holds[order[parent[parent >= 0]]] = True
    keep = np.sort(np.flatnonzero(~holds))
    keep = keep[np.argsort(s[keep], kind="stable")]
    s, e = s[keep], e[keep]
    by_end = np.argsort(end, kind="stable")
    ends = end[by_end]
    awaited = np.full(len(s), -1, np.int64)
    for k in range(len(s)):  # (syncs: a few per step)
        j = int(np.searchsorted(ends, e[k] + SYNC_SLACK_NS, side="right")) - 1
        while (
            j >= 0
            and ends[j] > s[k]
            and not (launch[by_end[j]] != NO_LAUNCH and launch[by_end[j]] < s[k])
        ):
            j -= 1
        if j >= 0 and ends[j] > s[k]:
            awaited[k] = by_end[j]
    done = np.where(awaited >= 0, end[np.maximum(awaited, 0)], s) if len(end) else s
    ret = np.maximum(e - np.maximum(s, done), 0)
    return s, e, awaited, ret


def replay(
    graph: DependencyGraph,
    duration: np.ndarray,
    *,
    latency_shift_ns: int = 0,
    delays: HostDelays | None = None,
) -> ReplayedTimeline:
    """Replay the graph with ``duration`` per item (the recorded ones reproduce the trace).

    ``latency_shift_ns``: added to every launch-bound item's latency (another runtime's launch
    latency). ``delays``: extra host time (ops the target runs on the host). The host offset
    changes only at waits and delays, so items are replayed segment by segment, each queue's
    items of a segment in one vectorised max-plus scan."""
    delays = delays or HostDelays.none()
    ev_start = np.concatenate([graph.sync_start_ns, delays.at_ns])
    ev_end = np.concatenate([graph.sync_end_ns, delays.at_ns])
    ev_awaited = np.concatenate([graph.sync_awaited, delays.awaited])
    ev_extra = np.concatenate([graph.sync_return_ns, delays.extra_ns])
    ev_sync = np.r_[np.arange(len(graph.sync_start_ns)), np.full(len(delays.at_ns), -1)]
    order = np.argsort(ev_start, kind="stable")
    ev_start, ev_end, ev_awaited, ev_extra, ev_sync = (
        ev_start[order],
        ev_end[order],
        ev_awaited[order],
        ev_extra[order],
        ev_sync[order],
    )
    anchor = np.where(graph.launch_ns != NO_LAUNCH, graph.launch_ns, graph.start_ns)
    latency = np.where(
        graph.launch_ns != NO_LAUNCH,
        np.maximum(graph.latency_ns + np.where(graph.launch_bound, latency_shift_ns, 0), 0),
        0,
    )
    # an item belongs to the segment its anchor falls in (after k events: segment k)
    seg = np.searchsorted(ev_end, anchor, side="right")
    seg = np.minimum(seg, np.searchsorted(ev_start, anchor, side="right"))
    n = len(graph)
    out_start = np.zeros(n, np.int64)
    out_end = np.zeros(n, np.int64)
    queue_free = np.full(int(graph.queue.max()) + 1 if n else 0, np.iinfo(np.int64).min // 4)
    # queues whose items wait for another queue's are scanned after the others of a segment
    dependent = np.zeros(n, bool)
    if graph.after is not None:
        dependent = np.isin(graph.queue, np.unique(graph.queue[graph.after >= 0]))
    item_order = np.lexsort((graph.start_ns, graph.queue, dependent, seg))
    bounds = np.searchsorted(seg[item_order], np.arange(len(ev_start) + 2))
    offsets = np.zeros(len(ev_start) + 1, np.int64)
    ready_base = anchor + latency
    # the loop runs once per wait (Python scalars: numpy's per-element overhead dominates here)
    starts, ends = ev_start.tolist(), ev_end.tolist()
    awaited, extra, cut = ev_awaited.tolist(), ev_extra.tolist(), bounds.tolist()
    sync_of = ev_sync.tolist()
    ptr = graph.sync_also_ptr.tolist() if graph.sync_also_ptr is not None else None
    offset = 0
    for k in range(len(starts) + 1):
        lo, hi = cut[k], cut[k + 1]
        if hi > lo:
            part = item_order[lo:hi]
            _scan(part, graph, duration, ready_base, offset, queue_free, out_start, out_end)
        offsets[k] = offset
        if k == len(starts):
            break
        a = awaited[k]
        done = int(out_end[a]) if a >= 0 else _NEVER
        j = sync_of[k]
        if ptr is not None and j >= 0 and ptr[j + 1] > ptr[j]:
            done = max(done, int(out_end[graph.sync_also_items[ptr[j] : ptr[j + 1]]].max()))
        offset = max(starts[k] + offset, done) + extra[k] - ends[k]
    step = _steps(graph, ev_end, offsets, out_end)
    return ReplayedTimeline(
        start_ns=out_start, end_ns=out_end, step_ns=step, launch_ns=anchor + offsets[seg]
    )


def replay_with_queue_depth(
    graph: DependencyGraph,
    duration: np.ndarray,
    *,
    depth: int,
    latency_shift_ns: int = 0,
    delays: HostDelays | None = None,
) -> tuple[ReplayedTimeline, int, bool]:
    """``replay`` where the runtime holds at most ``depth`` launched, unfinished items per device:
    a launch beyond that blocks the host until the item ``depth`` launches earlier has ended
    (CUDA's pending-launch queue, Neuron's in-flight execution limit: docs/chips.md). Each round
    turns the launches found too early into host waits and replays again, until none is (at
    most ``QUEUE_ROUNDS``). Returns the timeline, the number of launches that blocked, and
    whether the rounds converged (no launch left too early)."""
    delays = delays or HostDelays.none()
    n = len(graph)
    known = graph.launch_ns != NO_LAUNCH
    order = np.flatnonzero(known)
    order = order[np.lexsort((graph.launch_ns[order], graph.device[order]))]
    # items launched together (one graph execution) are one launch
    one = np.r_[
        True,
        (np.diff(graph.launch_ns[order]) != 0) | (np.diff(graph.device[order]) != 0),
    ]
    order = order[one[: len(order)]]
    blocker = np.full(n, -1, np.int64)
    if depth > 0 and len(order) > depth:
        same = graph.device[order[depth:]] == graph.device[order[:-depth]]
        blocker[order[depth:][same]] = order[:-depth][same]
    blocked = np.zeros(n, bool)
    timeline = replay(graph, duration, latency_shift_ns=latency_shift_ns, delays=delays)
    for round_ in range(QUEUE_ROUNDS + 1):
        has = blocker >= 0
        late = has & ~blocked
        late[has] &= timeline.launch_ns[has] < timeline.end_ns[blocker[has]]
        if not late.any():
            return timeline, int(blocked.sum()), True
        if round_ == QUEUE_ROUNDS:
            break
        blocked |= late
        at = graph.launch_ns[late]
        delays = delays.merge(HostDelays(at, blocker[late], np.zeros(len(at), np.int64)))
        timeline = replay(graph, duration, latency_shift_ns=latency_shift_ns, delays=delays)
    return timeline, int(blocked.sum()), False


def _scan(
    part: np.ndarray,
    graph: DependencyGraph,
    duration: np.ndarray,
    ready_base: np.ndarray,
    offset: int,
    queue_free: np.ndarray,
    out_start: np.ndarray,
    out_end: np.ndarray,
) -> None:
    """Max-plus recurrence per queue: end_i = max(ready_i, end_{i-1} + gap_i) + d_i, as
    cumsum + running max (``part`` sorted by queue, then recorded start; ready = the item's
    anchor + latency + the host offset)."""
    q = graph.queue[part]
    if q[0] == q[-1]:  # one queue (the common case): no split
        _scan_queue(
            part, int(q[0]), graph, duration, ready_base, offset, queue_free, out_start, out_end
        )
        return
    cuts = np.flatnonzero(q[1:] != q[:-1]) + 1
    edges = [0, *cuts.tolist(), len(part)]
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        items = part[lo:hi]
        _scan_queue(
            items, int(q[lo]), graph, duration, ready_base, offset, queue_free, out_start, out_end
        )


def _scan_queue(
    items: np.ndarray,
    queue: int,
    graph: DependencyGraph,
    duration: np.ndarray,
    ready_base: np.ndarray,
    offset: int,
    queue_free: np.ndarray,
    out_start: np.ndarray,
    out_end: np.ndarray,
) -> None:
    d = duration[items]
    a = ready_base[items] + offset
    if graph.after is not None:  # waits for another queue's item (scanned before this queue)
        dep = graph.after[items]
        waits = dep >= 0
        a[waits] = np.maximum(a[waits], out_end[dep[waits]])
    if len(items) == 1:  # one item: no scan
        end = max(
            int(a[0]) + int(d[0]),
            int(queue_free[queue]) + int(graph.gap_ns[items[0]]) + int(d[0]),
        )
        out_end[items[0]] = end
        out_start[items[0]] = end - int(d[0])
        queue_free[queue] = end
        return
    cum = np.cumsum(graph.gap_ns[items] + d)
    end = np.maximum(queue_free[queue] + cum, cum + np.maximum.accumulate(a + d - cum))
    out_end[items] = end
    out_start[items] = end - d
    queue_free[queue] = end[-1]


def _steps(
    graph: DependencyGraph,
    ev_end: np.ndarray,
    offsets: np.ndarray,
    item_end: np.ndarray,
) -> np.ndarray:
    """Replayed wall time per step: its host span moved by the offsets in force at its start and
    end; the last step stretched to the end of the items launched or started in it."""
    if len(graph.step_start_ns) == 0:
        return np.zeros(0, np.int64)
    at = lambda t: t + offsets[np.searchsorted(ev_end, t, side="right")]  # noqa: E731
    start = at(graph.step_start_ns)
    end = at(graph.step_host_end_ns).copy()
    if len(graph.last_step_items):
        end[-1] = max(int(end[-1]), int(item_end[graph.last_step_items].max()))
    return end - start
