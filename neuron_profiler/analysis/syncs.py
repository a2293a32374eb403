"""Host sync points that stall the device, grouped by name, with the same fields as fallbacks::

    groups = sync_groups(ctx)
    g = groups[0]; g.name, g.calls, g.host_ns, g.d2h_count, g.d2h_bytes, g.idle_ns

Syncs are the calls that really waited for the device, inside the analysed steps and not part
of a CPU fallback (``sync_calls``: runtime waits, and ``.item()`` / ``_local_scalar_dense`` /
``is_nonzero`` / ``nonzero`` when a wait or a D2H copy launch lies inside them), on a thread whose spans the idle
rules judge some device's gaps on (one that launches device work; any thread where a device's
launches are not linked). Those on other threads cost no device idle: they are counted apart
(``syncs_elsewhere``), not grouped. A call counts for the outermost
sync around it on its thread (``aten::item``, not the ``cudaStreamSynchronize`` inside it), so no
host time is counted twice. Groups are named after the call, our runtime's ``host sync: `` prefix
left out (``torch.neuron.synchronize``). Per name:

- ``calls``, ``host_ns``: the outermost calls and their summed duration;
- ``d2h_*``: the device-to-host copies the calls waited for: D2H copies launched on the call's
  thread from the start of the call (a runtime sync: of the ``cpu_op`` around it, the op that
  issued the copy, such as ``aten::copy_`` for ``.cpu()``) to its end, each copy once, a CPU
  fallback's copies left to the fallback;
- ``idle_ns``: the ``host_sync`` idle of the worst device, each gap given to the outermost sync
  containing its start.

A trace without device work has no sync groups.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.analysis import selections as sel
from neuron_profiler.analysis._copies import D2H
from neuron_profiler.analysis.callsites import call_sites
from neuron_profiler.analysis.context import AnalysisContext
from neuron_profiler.analysis.fallbacks import fallback_copies
from neuron_profiler.analysis.idle import IdleTime, idle_time
from neuron_profiler.analysis.sync_calls import sync_calls
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import Trace

EVIDENCE_RANGES = 5


@dataclass(frozen=True)
class SyncGroup:
    """Host syncs of one name (outermost calls). ``idle_ns``: the device idle of the
    ``host_sync`` gaps that began inside them (worst device); ``spans_ns``: the longest of those
    gaps; ``call_site``: the Python call site of the call before the longest gap, else of the
    longest call ("" without stacks)."""

    name: str
    calls: int
    host_ns: int
    idle_ns: int
    spans_ns: tuple[tuple[int, int], ...]
    d2h_count: int = 0
    d2h_bytes: int = 0
    d2h_ns: int = 0
    call_site: str = ""


def sync_groups(ctx: AnalysisContext) -> tuple[SyncGroup, ...]:
    """The syncs on threads whose spans the idle rules judge some device's gaps on
    (``AnalysisContext.on_any_launch_thread``). A CPU fallback's copies are left to it (its own
    ``host sync: <op>`` row waits for them)."""
    return _groups(ctx, _outermost_syncs(ctx)[0])


@dataclass(frozen=True)
class ElsewhereSyncs:
    """Syncs on threads that launch no device work (a monitor's ``synchronize``, another
    library's thread): they hold no launch up, so they cost no device idle and are not in the
    sync groups; counted here, per name (``names``: (name, calls, host_ns), by host time)."""

    calls: int = 0
    host_ns: int = 0
    names: tuple[tuple[str, int, int], ...] = ()


def syncs_elsewhere(ctx: AnalysisContext) -> ElsewhereSyncs:
    rows = _outermost_syncs(ctx)[1]
    if len(rows) == 0:
        return ElsewhereSyncs()
    c = ctx.trace.columns
    dur = c[S.DUR_NS][rows]
    ids, of_row = np.unique(c[S.NAME_ID][rows], return_inverse=True)  # one name per string
    names, of_id = np.unique(
        [sync_name(ctx.trace.strings[n]) for n in ids.tolist()], return_inverse=True
    )
    group = of_id.ravel()[of_row.ravel()]
    calls = np.bincount(group, minlength=len(names))
    host = np.bincount(group, weights=dur, minlength=len(names))
    per = [(str(n), int(k), int(h)) for n, k, h in zip(names, calls, host, strict=True)]
    per.sort(key=lambda g: (-g[2], g[0]))
    return ElsewhereSyncs(len(rows), int(dur.sum()), tuple(per))


def _outermost_syncs(ctx: AnalysisContext) -> tuple[np.ndarray, np.ndarray]:
    """The outermost syncs (none without device work), by start: (on a thread some device's
    gaps are judged on, on another thread)."""
    rows = _outermost(ctx.trace, ctx.result(sync_calls))
    if len(ctx.work) == 0:
        rows = rows[:0]
    on = ctx.on_any_launch_thread(rows)
    return rows[on], rows[~on]


def _groups(ctx: AnalysisContext, rows: np.ndarray) -> tuple[SyncGroup, ...]:
    trace = ctx.trace
    if len(rows) == 0:
        return ()
    c = trace.columns
    start = c[S.TS_NS][rows]
    end = start + c[S.DUR_NS][rows]
    gap_start, gap_end, gap_idle, owner = _gap_owners(ctx.result(idle_time), start, end)
    d2h = _d2h_per_call(ctx, rows, ctx.result(fallback_copies))
    names = sel.per_name(trace, c[S.NAME_ID][rows], sync_name, object)  # (once per name)
    out, evidence = [], []
    for name in sorted(set(names.tolist())):
        mine = np.flatnonzero(names == name)
        got = np.isin(owner, mine)
        spans = I.Intervals(gap_start[got], gap_end[got])
        first_gap = (
            owner[got][np.argmax(gap_end[got] - gap_start[got])]
            if got.any()
            else mine[np.argmax(end[mine] - start[mine])]
        )
        evidence.append(int(rows[first_gap]))
        out.append(
            SyncGroup(
                name=name,
                calls=len(mine),
                host_ns=int((end - start)[mine].sum()),
                idle_ns=int(gap_idle[got].sum()),
                spans_ns=I.longest(spans, EVIDENCE_RANGES),
                d2h_count=int(d2h[0][mine].sum()),
                d2h_bytes=int(d2h[1][mine].sum()),
                d2h_ns=int(d2h[2][mine].sum()),
            )
        )
    sites = call_sites(trace, evidence)
    out = [replace(g, call_site=s) for g, s in zip(out, sites, strict=True)]
    return tuple(sorted(out, key=lambda g: (-g.idle_ns, -g.host_ns, g.name)))


def sync_name(name: str) -> str:
    """A sync call's name as reports show it: our runtime's ``host sync: `` prefix left out."""
    return name[len(V.SYNC_PREFIX) :] if name.startswith(V.SYNC_PREFIX) else name


def _outermost(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """The rows not inside another of them on their thread (of two with one span, the first in
    the file is the outer), by start."""
    c = trace.columns
    start = c[S.TS_NS][rows]
    end = start + c[S.DUR_NS][rows]
    order = np.lexsort((rows, -end, start, c[S.TID][rows], c[S.PID][rows]))
    rows, end = rows[order], end[order]
    thread = np.stack([c[S.PID][rows], c[S.TID][rows]], axis=1)
    keep = np.ones(len(rows), bool)
    cut = np.flatnonzero((thread[1:] != thread[:-1]).any(axis=1)) + 1
    for seg in np.split(np.arange(len(rows)), cut):  # a few host threads
        if len(seg) > 1:
            reach = np.maximum.accumulate(end[seg])
            keep[seg[1:]] = end[seg[1:]] > reach[:-1]
    out = rows[keep]
    return out[np.argsort(c[S.TS_NS][out], kind="stable")]


def _gap_owners(
    idle: IdleTime, start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The worst device's whole host_sync gaps (start, end: where the sync was; their counted
    idle, inside the steps and less emulator overhead) and, per gap, the sync (index into
    start/end) whose span holds its start (the earliest such; -1: none)."""
    worst = idle.worst_device("host_sync")
    if worst is None:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty, empty
    k = idle.gap_index("host_sync", worst)
    gap_start, gap_end, gap_idle = idle.gap_start_ns[k], idle.gap_end_ns[k], idle.gap_idle_ns[k]
    owner = np.full(len(k), -1, np.int64)
    for j, gs in enumerate(gap_start.tolist()):  # one per sync gap (a few per step)
        hit = np.flatnonzero((start <= gs) & (end >= gs))
        owner[j] = hit[0] if len(hit) else -1
    return gap_start, gap_end, gap_idle, owner


def _d2h_per_call(
    ctx: AnalysisContext, rows: np.ndarray, skip: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(count, bytes, ns) of the D2H copies each call waited for (see the module docstring),
    the copies in ``skip`` (a mask over the device work) left out."""
    out = tuple(np.zeros(len(rows), np.int64) for _ in range(3))
    trace, work, copies = ctx.trace, ctx.work, ctx.copies
    if not (copies.direction == D2H).any():
        return out
    threads = ctx.threads
    c = trace.columns
    taken_until: dict[tuple[int, int], int] = {}
    d2h: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    for i, row in enumerate(rows.tolist()):  # outermost syncs, by start
        thread = (int(c[S.PID][row]), int(c[S.TID][row]))
        if thread not in d2h:  # the thread's D2H copies, by launch
            idx, launch = threads.launched(*thread)
            mine = (copies.direction[idx] == D2H) & ~skip[idx]
            d2h[thread] = idx[mine], launch[mine]
        idx, launch = d2h[thread]
        hi = int(c[S.TS_NS][row] + c[S.DUR_NS][row])
        lo = taken_until.get(thread, -1)
        taken_until[thread] = hi + 1
        end = int(np.searchsorted(launch, hi, side="right"))
        if end == int(np.searchsorted(launch, lo, side="left")):
            continue  # no D2H copy since the previous sync: no issuer to look up
        issuer = row if c[S.KIND][row] == S.EventKind.CPU_OP else threads.parent(trace, row)
        lo = max(int(c[S.TS_NS][issuer if issuer >= 0 else row]), lo)
        at = idx[int(np.searchsorted(launch, lo, side="left")) : end]
        out[0][i], out[1][i] = len(at), int(copies.nbytes[at].sum())
        out[2][i] = int((work.end[at] - work.start[at]).sum())
    return out
