"""Training steps of a trace, from torch.profiler's ``ProfilerStep#N`` annotations::

    steps = find_steps(trace, work, names)       # (AnalysisContext.steps)
    steps.names, steps.start_ns, steps.end_ns    # one entry per step, in time order
    steps.from_profiler_steps                   # False: no annotation, the whole trace is one step

A step is the host span of its annotation (the earliest start and latest end when several
threads carry the same step). The last step is stretched to the end of the device work launched
or started inside its host span, so work it queued is not cut off (a launch queue can hold work
that starts well after the host left the step); earlier steps need no stretching, since the next
step's span covers their spill-over. Without any annotation the trace is one step
"0" over the user's activity: from the first to the last of the user's ops (never the
profiler's own start and stop work), stretched in the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from neuron_profiler.analysis._device import NO_LAUNCH, DeviceWork
from neuron_profiler.analysis._intervals import Intervals, union
from neuron_profiler.analysis.selections import NameClasses, user_rows
from neuron_profiler.trace import schema as S
from neuron_profiler.trace.model import Trace

STEP_KINDS = (S.EventKind.USER_ANNOTATION, S.EventKind.CPU_OP)


@dataclass(frozen=True)
class Steps:
    """Args:
    names: step numbers as text ("5"), as torch and tb-profiler label them.
    start_ns / end_ns: absolute ns per step, sorted by start.
    from_profiler_steps: False when the trace has no ProfilerStep (then one step "0").
    host_end_ns: where each step ends on the host (``end_ns`` before the last step is
        stretched over its device work): a host call counts for the steps when it begins
        inside these spans (the profiler's synchronize at stop, while the last step's work
        still runs, does not).
    """

    names: tuple[str, ...]
    start_ns: np.ndarray
    end_ns: np.ndarray
    from_profiler_steps: bool
    host_end_ns: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.names)

    @property
    def wall_ns(self) -> np.ndarray:
        return self.end_ns - self.start_ns

    @property
    def spans(self) -> Intervals:
        return union(self.start_ns, self.end_ns)

    @property
    def host_spans(self) -> Intervals:
        end = self.end_ns if self.host_end_ns is None else self.host_end_ns
        return union(self.start_ns, end)


def step_rows(trace: Trace, names: NameClasses) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ProfilerStep annotations and their step numbers (a number beyond int64 is no
    step)."""
    ids = {i: n for i, n in names.step_numbers.items() if n < 2**63}
    if not ids:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    name_id = trace.col(S.NAME_ID)
    keys = np.fromiter(ids, np.int64, len(ids))
    rows = np.flatnonzero(
        trace.mask(kind=list(STEP_KINDS), ph=S.Phase.COMPLETE) & np.isin(name_id, keys)
    )
    order = np.argsort(keys)
    values = np.fromiter(ids.values(), np.int64, len(ids))[order]
    return rows, values[np.searchsorted(keys[order], name_id[rows])]


def find_steps(trace: Trace, work: DeviceWork, names: NameClasses) -> Steps:
    rows, numbers = step_rows(trace, names)
    ts, dur = trace.col(S.TS_NS), trace.col(S.DUR_NS)
    if len(rows) == 0:
        return _whole_trace(trace, work, names)
    uniq, code = np.unique(numbers, return_inverse=True)
    start = np.full(len(uniq), np.iinfo(np.int64).max)
    end = np.full(len(uniq), np.iinfo(np.int64).min)
    np.minimum.at(start, code, ts[rows])
    np.maximum.at(end, code, ts[rows] + dur[rows])
    order = np.argsort(start, kind="stable")
    start, end, uniq = start[order], end[order], uniq[order]
    host_end = end.copy()
    spill = work.end[in_span(work.start, work.launch, start[-1], host_end[-1])]
    if len(spill):
        end[-1] = max(end[-1], int(spill.max()))
    return Steps(
        names=tuple(str(n) for n in uniq.tolist()),
        start_ns=start,
        end_ns=end,
        from_profiler_steps=True,
        host_end_ns=host_end,
    )


def _whole_trace(trace: Trace, work: DeviceWork, names: NameClasses) -> Steps:
    """One step "0" over the user's activity: from the first to the last of the user's ops
    (``selections.user_rows``: not the profiler's own start and stop work) and launches of
    device work, stretched to the end of the device work launched or started in it; the whole
    trace when it has no op at all."""
    rows = user_rows(trace, names)
    if len(rows) == 0:
        rows = trace.select(ph=S.Phase.COMPLETE)
    if len(rows) == 0:
        return Steps(
            names=("0",), start_ns=np.array([0]), end_ns=np.array([0]), from_profiler_steps=False
        )
    ts = trace.col(S.TS_NS)[rows]
    lo, hi = int(ts.min()), int((ts + trace.col(S.DUR_NS)[rows]).max())
    launched = work.launch != NO_LAUNCH
    if launched.any():  # launching device work is the user's activity too
        hi = max(hi, int(work.launch[launched].max()))
    host_hi = hi
    mine = in_span(work.start, work.launch, lo, hi)
    if mine.any():
        hi = max(hi, int(work.end[mine].max()))
    return Steps(
        names=("0",),
        start_ns=np.array([lo]),
        end_ns=np.array([hi]),
        from_profiler_steps=False,
        host_end_ns=np.array([host_hi]),
    )


def in_span(start: np.ndarray, launch: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Device work (its start and launch ns, NO_LAUNCH when unknown) that belongs to the host
    span from lo to hi, so a step is stretched over it: started in [lo, hi), or launched in
    [lo, hi] (queued work may start well after the host has left the span; a launch is the
    user's activity, so a span can end at one). The steps and their replay share this rule."""
    started = (start >= lo) & (start < hi)
    launched = (launch != NO_LAUNCH) & (launch >= lo) & (launch <= hi)
    return started | launched
