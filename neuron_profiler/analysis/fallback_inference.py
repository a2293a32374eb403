"""CPU fallbacks inferred where the runtime emits no fallback rows (real Trainium hardware)::

    inferred = ctx.result(infer_fallbacks)
    inferred.rows[i], inferred.d2h[i], inferred.h2d[i]    # the host op, its copies (work indices)

TorchNeuron runs an op it has no device kernel for through ``at::native::cpu_fallback``: the
inputs are copied to the host, the CPU kernel runs, the results are copied back. No fallback event
reaches the profiler; what it shows are the host ops and the copies, and the collector writes the
names ``torch_neuronx.get_fallback_ops()`` returns into the trace metadata (``META_FALLBACK_OPS``).
A host op is an inferred fallback when all of these hold:

1. its name is in that set (``aten::`` added to a name without a namespace, an overload suffix
   such as ``.default`` dropped);
2. it is a complete ``cpu_op`` that launched no device work itself and overlaps no fallback row
   on its thread (a trace with fallback rows, the emulator's, keeps those);
3. on its thread, the device work launched last at or before its start is one or more D2H copies
   that ended by then, and the work launched first at or after its end is one or more H2D copies
   (D2H -> host op -> H2D, nothing launched in between);
4. those copies are its own: they carry its ``External id`` or its parent's, or their launching
   call lies inside its parent ``cpu_op`` (``cpu_fallback`` runs inside the op's device dispatch,
   so the copies and the CPU kernel nest under one op); a copy launched elsewhere on the thread,
   such as a user's ``.cpu()`` before a host-side op of the same name, is not.

Each call's span, used for the idle time it caused, runs from its first D2H copy's launch to its
last H2D copy's end.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from neuron_profiler.analysis._copies import D2H, H2D, NONE, CopyInfo
from neuron_profiler.analysis._device import DeviceWork
from neuron_profiler.analysis._threads import HostThreads
from neuron_profiler.analysis.context import AnalysisContext
from neuron_profiler.costmodel.fallbacks import normalise_op
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import Trace

REASON = "inferred: listed by torch_neuronx.get_fallback_ops(), D2H -> host op -> H2D"
_EMPTY = np.zeros(0, np.int64)


@dataclass(frozen=True)
class InferredFallbacks:
    """Args: listed: the op names the metadata lists (normalised); rows: the host op of each
    inferred call; span_*: its D2H launch to its H2D end; d2h / h2d: per call, indices into the
    device work of its copies."""

    listed: tuple[str, ...] = ()
    rows: np.ndarray = field(default_factory=lambda: _EMPTY)
    span_start_ns: np.ndarray = field(default_factory=lambda: _EMPTY)
    span_end_ns: np.ndarray = field(default_factory=lambda: _EMPTY)
    d2h: tuple[np.ndarray, ...] = ()
    h2d: tuple[np.ndarray, ...] = ()

    def __len__(self) -> int:
        return len(self.rows)

    def copies(self) -> np.ndarray:
        """Indices into the device work of every inferred call's copies."""
        return np.concatenate([_EMPTY, *self.d2h, *self.h2d]).astype(np.int64)


def listed_fallback_ops(trace: Trace) -> tuple[str, ...]:
    """The normalised op names of the metadata's fallback set (entries that are not text are
    left out)."""
    given = trace.metadata.get(V.META_FALLBACK_OPS)
    if not isinstance(given, list):
        return ()
    return tuple(sorted({normalise_op(x) for x in given if isinstance(x, str) and x.strip()}))


def infer_fallbacks(ctx: AnalysisContext) -> InferredFallbacks:
    """The inferred calls (none, at no cost, when the metadata lists no fallback op)."""
    trace = ctx.trace
    listed = listed_fallback_ops(trace)
    names = set(listed)
    ids = [i for i, s in enumerate(trace.strings) if s in names] if names else []
    rows = (
        np.flatnonzero(
            trace.mask(kind=S.EventKind.CPU_OP, ph=S.Phase.COMPLETE)
            & np.isin(trace.col(S.NAME_ID), ids)
        )
        if ids
        else _EMPTY
    )
    rows = rows[~_holds_fallback_row(trace, ctx.fallback_rows, rows)]
    copies = ctx.copies if len(rows) else None
    if copies is None or not (copies.direction != NONE).any():
        return InferredFallbacks(listed=listed)
    work, sites, threads = ctx.work, ctx.launch_sites, ctx.threads
    found: list[tuple[int, np.ndarray, np.ndarray]] = []
    for row in rows.tolist():  # ops in the set: a few per step
        got = _pattern(trace, row, threads, copies, work)
        if got is not None:
            found.append((row, *got))
    if not found:
        return InferredFallbacks(listed=listed)
    d2h = tuple(f[1] for f in found)
    h2d = tuple(f[2] for f in found)
    return InferredFallbacks(
        listed=listed,
        rows=np.array([f[0] for f in found], np.int64),
        span_start_ns=np.array([sites.start_ns[d].min() for d in d2h], np.int64),
        span_end_ns=np.array([work.end[h].max() for h in h2d], np.int64),
        d2h=d2h,
        h2d=h2d,
    )


def _pattern(
    trace: Trace, row: int, threads: HostThreads, copies: CopyInfo, work: DeviceWork
) -> tuple[np.ndarray, np.ndarray] | None:
    """The D2H and H2D copies around a host op when rules 3 and 4 hold, else None."""
    c = trace.columns
    start = int(c[S.TS_NS][row])
    end = start + int(c[S.DUR_NS][row])
    idx, launch = threads.launched(int(c[S.PID][row]), int(c[S.TID][row]))
    before = int(np.searchsorted(launch, start, side="right"))  # launched at or before start
    after = int(np.searchsorted(launch, end, side="left"))  # launched at or after end
    if after > before:  # it launched device work itself: not a host op
        return None
    d2h = _run(idx, copies.direction, D2H, range(before - 1, -1, -1))
    h2d = _run(idx, copies.direction, H2D, range(after, len(idx)))
    if not len(d2h) or not len(h2d) or (work.end[d2h] > start).any():
        return None
    parent = threads.parent(trace, row)
    own = {int(c[S.EXTERNAL_ID][r]) for r in (row, parent) if r >= 0} - {-1, 0}
    if parent >= 0:
        inside = (int(c[S.TS_NS][parent]), int(c[S.TS_NS][parent] + c[S.DUR_NS][parent]))
    else:
        inside = (1, 0)  # no parent: only the External id links
    d2h, h2d = (_linked(x, trace, work, threads, own, inside) for x in (d2h, h2d))
    return (d2h, h2d) if len(d2h) and len(h2d) else None


def _run(idx: np.ndarray, direction: np.ndarray, want: int, order: range) -> np.ndarray:
    """The consecutive copies of one direction, nearest first, walking ``order``."""
    out = []
    for j in order:
        if direction[idx[j]] != want:
            break
        out.append(int(idx[j]))
    return np.array(out, np.int64)


def _linked(
    found: np.ndarray,
    trace: Trace,
    work: DeviceWork,
    threads: HostThreads,
    own: set[int],
    inside: tuple[int, int],
) -> np.ndarray:
    """The leading copies (nearest the op first) that are the op's own (rule 4)."""
    ext = trace.col(S.EXTERNAL_ID)[work.rows[found]]
    launch = threads.launch_of(found)
    ok = np.isin(ext, list(own)) | ((launch >= inside[0]) & (launch <= inside[1]))
    stop = np.flatnonzero(~ok)
    return found[: stop[0] if len(stop) else len(found)]


def _holds_fallback_row(trace: Trace, fb: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Which rows overlap a fallback row (``fb``) on their thread (rule 2)."""
    if len(fb) == 0:
        return np.zeros(len(rows), bool)
    c = trace.columns
    fs, fe = c[S.TS_NS][fb], c[S.TS_NS][fb] + c[S.DUR_NS][fb]
    out = np.zeros(len(rows), bool)
    for j, r in enumerate(rows.tolist()):
        s, e = c[S.TS_NS][r], c[S.TS_NS][r] + c[S.DUR_NS][r]
        out[j] = bool(
            (
                (c[S.PID][fb] == c[S.PID][r]) & (c[S.TID][fb] == c[S.TID][r]) & (fs < e) & (fe > s)
            ).any()
        )
    return out


@dataclass(frozen=True)
class FallbackCalls:
    """Every CPU-fallback call of the trace, one entry each: the fallback rows (the emulator's
    ``CPU fallback: <op>``), then the inferred calls. ``row``: the host row naming the call;
    ``pid`` / ``tid``: its thread.

    ``host_start`` / ``host_end``: the call on the host, i.e. the op that dispatched it (the
    outermost enclosing ``cpu_op`` reached through dispatch frames and ops of the same name;
    an inferred call's host op) joined with its copies' launches. Whatever the host does in it
    (its copies, its wait for them, releasing them) is the fallback's, and so is device idle
    that begins in it. ``start`` / ``end``: the same, joined with the copies on the device
    (to the last H2D copy's end): the span whose cover of a gap makes it the fallback's."""

    row: np.ndarray = field(default_factory=lambda: _EMPTY)
    pid: np.ndarray = field(default_factory=lambda: _EMPTY)
    tid: np.ndarray = field(default_factory=lambda: _EMPTY)
    host_start: np.ndarray = field(default_factory=lambda: _EMPTY)
    host_end: np.ndarray = field(default_factory=lambda: _EMPTY)
    start: np.ndarray = field(default_factory=lambda: _EMPTY)
    end: np.ndarray = field(default_factory=lambda: _EMPTY)

    def __len__(self) -> int:
        return len(self.row)

    def holding(
        self, pid: np.ndarray, tid: np.ndarray, start: np.ndarray, end: np.ndarray
    ) -> np.ndarray:
        """Which of the given host spans overlap a call on the host, on their thread (a few
        hundred calls: one vectorised test per call)."""
        out = np.zeros(len(start), bool)
        calls = (self.pid, self.tid, self.host_start, self.host_end)
        for p, t, s, e in zip(*(a.tolist() for a in calls), strict=True):
            out |= (pid == p) & (tid == t) & (start <= e) & (end >= s)
        return out


def fallback_calls(ctx: AnalysisContext) -> FallbackCalls:
    trace, rows = ctx.trace, ctx.fallback_rows
    inferred = ctx.result(infer_fallbacks)
    if len(rows) == 0 and len(inferred) == 0:
        return FallbackCalls()
    c = trace.columns
    every = np.concatenate([rows, inferred.rows]).astype(np.int64)
    host_start = c[S.TS_NS][every].copy()
    host_end = host_start + c[S.DUR_NS][every]
    for j, row in enumerate(every.tolist()):  # a few hundred calls
        outer = _dispatching_op(ctx, row)
        host_start[j] = min(host_start[j], c[S.TS_NS][outer])
        host_end[j] = max(host_end[j], c[S.TS_NS][outer] + c[S.DUR_NS][outer])
    start, end = host_start.copy(), host_end.copy()
    k = len(rows)
    if len(inferred):
        last_h2d_launch = [int(ctx.threads.launch_of(h).max()) for h in inferred.h2d]
        host_start[k:] = np.minimum(host_start[k:], inferred.span_start_ns)
        host_end[k:] = np.maximum(host_end[k:], last_h2d_launch)
        start[k:] = np.minimum(host_start[k:], inferred.span_start_ns)
        end[k:] = np.maximum(host_end[k:], inferred.span_end_ns)
    return FallbackCalls(
        row=every,
        pid=c[S.PID][every],
        tid=c[S.TID][every],
        host_start=host_start,
        host_end=host_end,
        start=start,
        end=end,
    )


def _dispatching_op(ctx: AnalysisContext, row: int) -> int:
    """The op that dispatched a fallback call (a fallback row, or an inferred call's host op):
    climb the enclosing ``cpu_op`` rows through dispatch frames and ops named like the call's
    op; the outermost such op (the row itself when none encloses it)."""
    trace, frames = ctx.trace, ctx.names.dispatch_frames
    name = trace.name(row)
    op = V.fallback_op(name)
    found, at = row, ctx.threads.parent(trace, row)
    while at >= 0:
        name_id = int(trace.col(S.NAME_ID)[at])
        if trace.strings[name_id] == op:
            found = at
        elif name_id not in frames:
            break
        at = ctx.threads.parent(trace, at)
    return found
