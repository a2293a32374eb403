"""The host syncs that really waited for the device: the calls the host-sync rule and the sync
groups count (docs/analysis.md#host_sync)::

    rows = ctx.result(sync_calls)        # host rows, by start

A sync is a host call that blocked until device work was done:

- a **runtime wait** (``selections.is_wait_name``: stream / device / event synchronize, a
  synchronous copy, our runtime's ``host sync: ...`` rows) is one by itself, except our
  runtime's waits for room in its full launch queue (backpressure from a busy device);
- an **op that may sync** (``vocabulary.SYNC_OP_NAMES``: ``aten::item``,
  ``_local_scalar_dense``, ``is_nonzero``, ``nonzero``) is one only
  when it really waited: a runtime wait, or the launch of a device-to-host copy, lies inside it
  on its thread. ``.item()`` of a host tensor (an optimizer's step counter) does neither.

A sync counts only when it begins inside the analysed steps on the host (the profiler's own
synchronize when it stops never does, even while the last step's device work still runs), and
never when it is part of a CPU fallback call (a
fallback's wait for its copies is the fallback's: ``fallback_inference.fallback_calls``).
"""

from __future__ import annotations

import numpy as np

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.analysis import selections as sel
from neuron_profiler.analysis._args import arg_values
from neuron_profiler.analysis._copies import D2H
from neuron_profiler.analysis._launches import launch_sites
from neuron_profiler.analysis.context import AnalysisContext
from neuron_profiler.analysis.fallback_inference import fallback_calls
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import Trace


def sync_calls(ctx: AnalysisContext) -> np.ndarray:
    trace = ctx.trace
    c = trace.columns
    rows = ctx.sync_candidates
    if len(rows) == 0:
        return rows
    start = c[S.TS_NS][rows]
    end = start + c[S.DUR_NS][rows]
    pid, tid = c[S.PID][rows], c[S.TID][rows]
    is_wait = np.isin(c[S.NAME_ID][rows], ctx.names.wait) & ~_backpressure(trace, rows)
    really = is_wait | _holds(pid, tid, start, end, *_waits_and_d2h_launches(ctx, rows, is_wait))
    window = ctx.steps.host_spans  # the steps on the host: not the last one's device spill-over
    inside = I.overlap_per_window(window, start, start + 1) > 0  # begins inside a step
    calls = ctx.result(fallback_calls)
    theirs = calls.holding(pid, tid, start, end) if len(calls) else np.zeros(len(rows), bool)
    keep = really & inside & ~theirs
    return rows[keep][np.argsort(start[keep], kind="stable")]


def _backpressure(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Our runtime's waits because its launch queue was full (``sync`` arg ``queue_full``):
    the host got ahead of a busy device, which is no sync."""
    ours = np.flatnonzero(sel.per_name(trace, trace.col(S.NAME_ID)[rows], _is_ours))
    out = np.zeros(len(rows), bool)
    if len(ours):
        why = arg_values(trace, rows[ours], (V.ARG_SYNC,))[V.ARG_SYNC]
        out[ours] = np.array([w == V.SYNC_QUEUE_FULL for w in why], bool)
    return out


def _is_ours(name: str) -> bool:
    return name.startswith(V.SYNC_PREFIX)


def _waits_and_d2h_launches(
    ctx: AnalysisContext, rows: np.ndarray, is_wait: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pid, tid, time) of every runtime wait's start and every D2H copy's launch."""
    c = ctx.trace.columns
    waits = rows[is_wait]
    pid, tid, at = c[S.PID][waits], c[S.TID][waits], c[S.TS_NS][waits]
    d2h = np.flatnonzero(ctx.copies.direction == D2H)
    if len(d2h):
        sites = launch_sites(ctx.trace, ctx.work.rows[d2h], ctx.runtime_calls)
        known = sites.known
        pid = np.concatenate([pid, sites.pid[known]])
        tid = np.concatenate([tid, sites.tid[known]])
        at = np.concatenate([at, sites.start_ns[known]])
    return pid, tid, at


def _holds(
    pid: np.ndarray,
    tid: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    at_pid: np.ndarray,
    at_tid: np.ndarray,
    at: np.ndarray,
) -> np.ndarray:
    """Per span: does a point (at_pid, at_tid, at) lie inside it, on its thread?"""
    out = np.zeros(len(start), bool)
    if len(at) == 0:
        return out
    order = np.lexsort((at, at_tid, at_pid))
    keys = np.stack([at_pid[order], at_tid[order]], axis=1)
    times = at[order]
    for p, t in {(int(a), int(b)) for a, b in zip(pid.tolist(), tid.tolist(), strict=True)}:
        lo = np.searchsorted(keys[:, 0], p, side="left")
        hi = np.searchsorted(keys[:, 0], p, side="right")
        sub = slice(lo, hi)
        lo2 = lo + np.searchsorted(keys[sub, 1], t, side="left")
        hi2 = lo + np.searchsorted(keys[sub, 1], t, side="right")
        mine = (pid == p) & (tid == t)
        first = np.searchsorted(times[lo2:hi2], start[mine], side="left")
        last = np.searchsorted(times[lo2:hi2], end[mine], side="right")
        out[mine] = last > first
    return out
