"""Device idle time inside the profiled steps, per device, with one cause per gap::

    idle = idle_time(ctx)                # (ctx.options.min_gap_ns: the short-gap bound)
    idle.devices[0].by_cause_ns          # {"data_loading": ..., ..., "short_gaps": ...}
    idle.longest                         # the longest gaps, with what the host was doing

A device (a NeuronCore, a GPU) is idle when none of its queues is busy. Its gaps are the parts
of the step spans not covered by its work, kept whole across step boundaries and across the host
time between two ProfilerStep spans (a gap belongs to one cause; its time is counted only inside
the steps, split over the steps it spans).

Emulator overhead is discounted first: the parts of a gap during which the host was in the
emulator's own work (``emulator overhead: ...`` rows: an op's real math in numerics mode, the
collective arrival exchange) are removed from the gap's idle time and from every cause, and
counted apart as ``emulator_overhead_ns`` (the emulator's cost; it does not exist on real
hardware). window = busy + idle + emulator overhead. The rules below see the rest of the gap
inside the steps (its counted idle), and the host spans of the threads that launch the device's
work (every thread's where the trace links no launch to it).

A gap whose length less the emulator overhead in it is under ``min_gap_ns`` takes the first of
``causes.SHORT_RULES`` that holds (``host_bound_launch``: the host was late, however briefly, a
loop of tiny ops is made of such gaps; else ``short_gaps``: launch latency between work already
queued). Every longer gap takes exactly one cause, the first of ``causes.IDLE_RULES`` that holds
(data loading, CPU fallback, host sync, host-bound launch, profiler overhead, other): each cause's
rule, advice and docs are one record in ``causes.py``.

Final sync versus the next step's data stall: a gap that begins in step N's final sync and
runs into step N+1's DataLoader ``__next__`` satisfies the data-loading and host-sync rules when
the DataLoader covers most of it, and is then **data loading** (its rule comes first): the sync
only exposes the stall, and fixing the data pipeline recovers it, whereas removing the sync would
not. When the DataLoader covers less than half, the gap is the sync's. Its time is split over
steps N and N+1 at the boundary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.analysis import selections as sel
from neuron_profiler.analysis._axis import DeviceAxis, device_axes
from neuron_profiler.analysis._device import NO_LAUNCH
from neuron_profiler.analysis.causes import (
    ALL_CAUSES,
    Gaps,
    HostSpans,
    LaunchThreads,
    ThreadSpans,
    classify,
)
from neuron_profiler.analysis.context import AnalysisContext
from neuron_profiler.analysis.fallback_inference import fallback_calls
from neuron_profiler.analysis.sync_calls import sync_calls
from neuron_profiler.trace import schema as S

HOST_ACTIVITY_NAMES = 3  # host ops listed per long gap


@dataclass(frozen=True)
class Gap:
    """One idle gap. ``step``: index of the step its start lies in. ``host_activity``: the
    host ops overlapping it most (ProfilerStep annotations left out). ``idle_ns``: its time
    inside the steps less the emulator overhead in it (``dur_ns`` spans any hole between
    steps)."""

    device: int
    start_ns: int
    end_ns: int
    cause: str
    step: int
    host_activity: tuple[str, ...]
    idle_ns: int = -1
    emulator_overhead_ns: int = 0

    def __post_init__(self) -> None:
        if self.idle_ns < 0:
            object.__setattr__(self, "idle_ns", self.dur_ns - self.emulator_overhead_ns)

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class DeviceIdle:
    """Idle time of one device. ``per_step_by_cause_ns[i][cause]``: idle ns of that cause in
    step i; ``by_cause_ns``: the same over all steps (short_gaps included).
    ``emulator_overhead_ns``: time not busy but discounted, the emulator's own host work (in no
    cause; window = busy + idle + emulator overhead)."""

    device: int
    label: str
    window_ns: int
    busy_ns: int
    idle_ns: int
    by_cause_ns: dict[str, int]
    per_step_by_cause_ns: tuple[dict[str, int], ...]
    gaps: int
    emulator_overhead_ns: int = 0
    per_step_emulator_overhead_ns: tuple[int, ...] = ()


@dataclass(frozen=True)
class DeviceIdleColumns:
    """Every device's ``DeviceIdle`` figures as columns, row g for device ``device[g]``: a
    trace of 60,000 device queues is analysed and rendered without a Python object per device.
    ``by_cause_ns[g, c]``: cause ``ALL_CAUSES[c]``; ``per_step_*[g, i]``: step i."""

    device: np.ndarray
    labels: tuple[str, ...]
    window_ns: np.ndarray
    busy_ns: np.ndarray
    idle_ns: np.ndarray
    by_cause_ns: np.ndarray
    per_step_by_cause_ns: np.ndarray
    gaps: np.ndarray
    emulator_overhead_ns: np.ndarray
    per_step_emulator_overhead_ns: np.ndarray

    def __len__(self) -> int:
        return len(self.device)

    def cause_ns(self, cause: str) -> np.ndarray:
        """One cause's idle ns, per device."""
        return self.by_cause_ns[:, ALL_CAUSES.index(cause)]

    def row(self, g: int) -> DeviceIdle:
        steps = self.per_step_by_cause_ns[g].tolist()
        return DeviceIdle(
            device=int(self.device[g]),
            label=self.labels[g],
            window_ns=int(self.window_ns[g]),
            busy_ns=int(self.busy_ns[g]),
            idle_ns=int(self.idle_ns[g]),
            by_cause_ns=dict(zip(ALL_CAUSES, self.by_cause_ns[g].tolist(), strict=True)),
            per_step_by_cause_ns=tuple(dict(zip(ALL_CAUSES, s, strict=True)) for s in steps),
            gaps=int(self.gaps[g]),
            emulator_overhead_ns=int(self.emulator_overhead_ns[g]),
            per_step_emulator_overhead_ns=tuple(self.per_step_emulator_overhead_ns[g].tolist()),
        )

    @classmethod
    def concat(cls, parts: list[DeviceIdleColumns], steps: int) -> DeviceIdleColumns:
        if not parts:
            return cls.empty(steps)
        return cls(
            labels=tuple(x for p in parts for x in p.labels),
            **{
                k: np.concatenate([getattr(p, k) for p in parts])
                for k in cls.__dataclass_fields__
                if k != "labels"
            },
        )

    @classmethod
    def empty(cls, steps: int) -> DeviceIdleColumns:
        none = np.zeros(0, np.int64)
        causes = len(ALL_CAUSES)
        return cls(
            device=none,
            labels=(),
            window_ns=none,
            busy_ns=none,
            idle_ns=none,
            by_cause_ns=np.zeros((0, causes), np.int64),
            per_step_by_cause_ns=np.zeros((0, steps, causes), np.int64),
            gaps=none,
            emulator_overhead_ns=none,
            per_step_emulator_overhead_ns=np.zeros((0, steps), np.int64),
        )


@dataclass(frozen=True)
class IdleTime:
    """Args: per_device: every device's totals, as columns (``devices``: the same as one
    ``DeviceIdle`` per device, built on first use); longest: the longest gaps (by idle time)
    with host activity; gap_*: every gap (all devices), columnar: device pid, start, end,
    index into ALL_CAUSES, idle ns (emulator overhead left out); discount: per device, the
    emulator's own host spans discounted from its gaps (the emulator overhead, less the
    device's collective waits: a wait for a peer is the device's idle time, never the
    emulator's)."""

    min_gap_ns: int
    per_device: DeviceIdleColumns
    longest: tuple[Gap, ...]
    gap_device: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    gap_start_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    gap_end_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    gap_cause: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    gap_idle_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    discount: dict[int, I.Intervals] = field(default_factory=dict)
    window: I.Intervals = field(default_factory=lambda: I.EMPTY)

    def gap_index(self, cause: str, device: int | None = None) -> np.ndarray:
        """Indices of the whole gaps of one cause (on one device), in start order per device."""
        m = self.gap_cause == ALL_CAUSES.index(cause)
        if device is not None:
            m &= self.gap_device == device
        return np.flatnonzero(m)

    def gaps_of(self, cause: str, device: int) -> I.Intervals:
        """The idle time of one cause on one device, as an interval set: its gaps inside the
        steps, less the emulator overhead."""
        return self.counted(self.gap_index(cause, device), device)

    def counted(self, k: np.ndarray, device: int) -> I.Intervals:
        """The idle time of gaps ``k`` (all on ``device``) as an interval set."""
        return _counted(
            I.union(self.gap_start_ns[k], self.gap_end_ns[k]),
            self.window,
            self.discount.get(device, I.EMPTY),
        )

    def gap_groups(self) -> list[tuple[int, str, np.ndarray]]:
        """(device, cause, gap indices) for every device and cause with gaps: devices in
        ``per_device`` order, causes in ALL_CAUSES order, each group's gaps as ``gap_index``
        gives them; one sort, not one scan of every gap per group."""
        if len(self.gap_device) == 0:
            return []
        by_pid = np.argsort(self.per_device.device, kind="stable")
        row = by_pid[np.searchsorted(self.per_device.device, self.gap_device, sorter=by_pid)]
        key = row * len(ALL_CAUSES) + self.gap_cause
        order = np.argsort(key, kind="stable")
        cut = np.flatnonzero(np.diff(key[order])) + 1
        return [
            (int(self.gap_device[k[0]]), ALL_CAUSES[int(self.gap_cause[k[0]])], k)
            for k in np.split(order, cut)
            if len(k)
        ]

    @cached_property
    def devices(self) -> tuple[DeviceIdle, ...]:
        return tuple(self.per_device.row(g) for g in range(len(self.per_device)))

    @property
    def emulator_overhead_ns(self) -> int:
        return int(self.per_device.emulator_overhead_ns.sum())

    @property
    def by_cause_ns(self) -> dict[str, int]:
        totals = self.per_device.by_cause_ns.sum(axis=0).tolist()
        return dict(zip(ALL_CAUSES, totals, strict=True))

    def worst_device(self, cause: str) -> int | None:
        """The device with the most idle time of a cause (the first among equals); None
        when no device has any."""
        values = self.per_device.cause_ns(cause)
        if len(values) == 0 or values.max() <= 0:
            return None
        return int(self.per_device.device[int(np.argmax(values))])


def host_spans(ctx: AnalysisContext) -> HostSpans:
    """The host spans the idle rules test, as selected once per trace, each with its thread:
    DataLoader spans, the CPU-fallback calls (``fallback_inference.fallback_calls``: fallback
    rows and inferred calls, each as the whole op that dispatched it), the syncs that really
    waited (``sync_calls``) and the profiler's own work; and which threads launch each device's
    work (a gap is judged on those threads' spans alone: ``causes.LaunchThreads``)."""
    trace, names = ctx.trace, ctx.names
    c = trace.columns
    loading_rows = sel.dataloader_rows(trace, names)
    sync_rows = ctx.result(sync_calls)
    overhead_rows = sel.profiler_overhead_rows(trace, names)
    calls = ctx.result(fallback_calls)
    dev, pid, tid = ctx.launch_thread_table
    rows = np.concatenate([loading_rows, sync_rows, overhead_rows])
    code = _thread_codes(
        np.concatenate([c[S.PID][rows].astype(np.int64), calls.pid.astype(np.int64), pid]),
        np.concatenate([c[S.TID][rows].astype(np.int64), calls.tid.astype(np.int64), tid]),
    )
    cut = np.cumsum([len(loading_rows), len(sync_rows), len(overhead_rows), len(calls)])
    loading_thread, sync_thread, overhead_thread, call_thread, launch_thread = np.split(code, cut)

    def spans(picked: np.ndarray, thread: np.ndarray) -> ThreadSpans:
        s = sel.spans_of(trace, picked)
        return ThreadSpans(s.start, s.end, thread)

    # (launch_thread_table is sorted by device, then pid, tid: so is the code within a device)
    return HostSpans(
        data_loading=spans(loading_rows, loading_thread),
        cpu_fallback=ThreadSpans(calls.start, calls.end, call_thread),
        cpu_fallback_host=ThreadSpans(calls.host_start, calls.host_end, call_thread),
        sync=spans(sync_rows, sync_thread),
        profiler_overhead=spans(overhead_rows, overhead_thread),
        launchers=LaunchThreads.of(dev, launch_thread, len(ctx.work.devices)),
    )


def _thread_codes(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """A dense code per distinct (pid, tid), in (pid, tid) order."""
    if len(pid) == 0:
        return np.zeros(0, np.int64)
    _, code = np.unique(np.stack([pid, tid], axis=1), axis=0, return_inverse=True)
    return code.ravel().astype(np.int64)


def _next_launch(
    axis: DeviceAxis,
    axis_start: np.ndarray,
    launch: np.ndarray,
    launch_end: np.ndarray,
    gap_end: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Per gap: the launch call (start, end) of its device's first work starting at or after
    the gap's end (the earliest start and the earliest end among ties; NO_LAUNCH when none is
    known). ``axis_start`` / ``launch`` / ``launch_end``: the devices' work on the axis, sorted
    by axis start."""
    out = np.full(len(gap_end), NO_LAUNCH, np.int64)
    out_end = out.copy()
    if len(axis_start) == 0:
        return out, out_end
    never = np.iinfo(np.int64).max
    unknown = launch == NO_LAUNCH
    starts, first_known = _min_by_start(axis_start, np.where(unknown, never, launch))
    _, first_end = _min_by_start(axis_start, np.where(unknown, never, launch_end))
    k = np.searchsorted(starts, gap_end, side="left")
    ok = k < len(starts)
    ok[ok] = axis.group_of(starts[k[ok]]) == axis.group_of(gap_end[ok] - 1)  # same device
    out[ok], out_end[ok] = first_known[k[ok]], first_end[k[ok]]
    missing = out == never
    out[missing], out_end[missing] = NO_LAUNCH, NO_LAUNCH
    return out, out_end


def _min_by_start(start: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct starts and the least value among the rows of each; ``start`` is sorted, so
    each start's rows are one run (no hashing or sorting)."""
    first = np.flatnonzero(np.r_[True, start[1:] != start[:-1]])
    return start[first], np.minimum.reduceat(values, first)


def idle_time(ctx: AnalysisContext) -> IdleTime:
    """Every device at once, laid end to end on one time axis (``_axis``): each interval
    operation runs once, whatever the number of devices."""
    work, steps, options = ctx.work, ctx.steps, ctx.options
    window = steps.spans
    if len(work) == 0 or len(window) == 0:
        empty = DeviceIdleColumns.empty(len(steps))
        return IdleTime(min_gap_ns=options.min_gap_ns, per_device=empty, longest=(), window=window)
    spans = host_spans(ctx)
    lo = min(int(work.start.min()), int(window.start[0]))
    hi = max(int(work.end.max()), int(window.end[-1]))
    parts = [_on_axis(ctx, axis, group, spans) for axis, group in device_axes(work, lo, hi)]
    per_device = DeviceIdleColumns.concat([part.devices for part in parts], len(steps))
    discount = {k: v for part in parts for k, v in part.discount.items()}
    columns = [np.concatenate([getattr(p, k) for p in parts]) for k in _GAP_COLUMNS]
    device, gs, ge, cause, idle_ns = columns
    return IdleTime(
        min_gap_ns=options.min_gap_ns,
        per_device=per_device,
        longest=_longest(ctx, (device, gs, ge, cause, idle_ns), options.top, discount),
        gap_device=device,
        gap_start_ns=gs,
        gap_end_ns=ge,
        gap_cause=cause,
        gap_idle_ns=idle_ns,
        discount=discount,
        window=window,
    )


_GAP_COLUMNS = ("gap_device", "gap_start_ns", "gap_end_ns", "gap_cause", "gap_idle_ns")


@dataclass(frozen=True)
class _AxisIdle:
    """One axis' share of ``IdleTime`` (its devices, its gaps, its non-empty discounts)."""

    devices: DeviceIdleColumns
    discount: dict[int, I.Intervals]
    gap_device: np.ndarray
    gap_start_ns: np.ndarray
    gap_end_ns: np.ndarray
    gap_cause: np.ndarray
    gap_idle_ns: np.ndarray


def _on_axis(
    ctx: AnalysisContext, axis: DeviceAxis, group: np.ndarray, spans: HostSpans
) -> _AxisIdle:
    """The idle time of an axis' devices. Per device: the gaps in its work from the first
    step's start to the last step's end that reach into a step, kept whole (a gap is not cut
    at the host time between two ProfilerStep spans; its time counts only inside them), the
    emulator overhead in them discounted (less the device's collective waits), one cause
    each."""
    work, window = ctx.work, ctx.steps.spans
    runs = np.flatnonzero((group >= 0) & ~work.wait)
    busy = axis.union(work, runs, group[runs])
    waited = np.flatnonzero((group >= 0) & work.wait)
    waits = I.subtract(axis.union(work, waited, group[waited]), busy)
    inside = axis.replicate(window)
    discount = I.subtract(axis.replicate(ctx.emulator_overhead), waits)
    counted = I.subtract(inside, discount)
    gap = I.subtract(axis.replicate(I.window(int(window.start[0]), int(window.end[-1]))), busy)
    keep = I.overlap_per_window(inside, gap.start, gap.end) > 0
    gap = I.Intervals(gap.start[keep], gap.end[keep])
    g = axis.group_of(gap.start)
    shift = axis.shift(g)
    order = np.argsort(work.start[runs] + axis.shift(group[runs]), kind="stable")
    axis_start = (work.start[runs] + axis.shift(group[runs]))[order]
    next_launch, next_launch_end = _next_launch(
        axis, axis_start, work.launch[runs][order], work.launch_end[runs][order], gap.end
    )
    judged = I.intersect(gap, counted)  # (each piece inside one gap)
    facts = Gaps(
        start=gap.start - shift,
        end=gap.end - shift,
        idle_ns=(gap.end - gap.start) - I.overlap_per_window(discount, gap.start, gap.end),
        next_launch=next_launch,
        next_launch_end=next_launch_end,
        axis=axis,
        axis_start=gap.start,
        axis_end=gap.end,
        judged=judged,
        judged_gap=np.searchsorted(gap.start, judged.start, side="right") - 1,
        overhead=ctx.emulator_overhead,
        waits=waits,
        launchers=spans.launchers,
    )
    cause = classify(facts, spans, ctx.options.min_gap_ns)
    devices = _device_idle(ctx, axis, gap, cause, busy, inside, discount)
    pid = np.asarray(axis.devices, dtype=np.int64)
    return _AxisIdle(
        devices=devices,
        discount=axis.split(discount),
        gap_device=pid[g],
        gap_start_ns=facts.start,
        gap_end_ns=facts.end,
        gap_cause=cause,
        gap_idle_ns=facts.counted_ns,
    )


def _counted(x: I.Intervals, window: I.Intervals, discount: I.Intervals) -> I.Intervals:
    """The part of x that counts as idle time: inside the steps, not emulator overhead."""
    return I.subtract(I.intersect(x, window), discount)


def _device_idle(
    ctx: AnalysisContext,
    axis: DeviceAxis,
    gap: I.Intervals,
    cause: np.ndarray,
    busy: I.Intervals,
    inside: I.Intervals,
    discount: I.Intervals,
) -> DeviceIdleColumns:
    """Per device, cause and step: the gaps of that cause less the emulator overhead inside
    them; all on the axis, each figure one column for the axis' devices."""
    steps, n = ctx.steps, len(axis)
    ws, we = (w.ravel() for w in axis.windows(steps.start_ns, steps.end_ns))
    by_cause, per_step = _by_cause(axis, gap, cause, inside, discount, ws, we)
    in_steps = I.intersect(gap, inside)
    hidden = I.intersect(in_steps, discount)
    hidden_ns = axis.total_per_device(hidden)
    return DeviceIdleColumns(
        device=np.asarray(axis.devices, dtype=np.int64),
        labels=tuple(map(ctx.work.labels.__getitem__, axis.devices)),  # (no frame per device)
        window_ns=np.full(n, inside.total // max(n, 1), np.int64),
        busy_ns=axis.total_per_device(I.intersect(busy, inside)),
        idle_ns=axis.total_per_device(in_steps) - hidden_ns,
        by_cause_ns=by_cause,
        per_step_by_cause_ns=per_step.reshape(n, len(steps), len(ALL_CAUSES)),
        gaps=np.bincount(axis.group_of(gap.start), minlength=n).astype(np.int64),
        emulator_overhead_ns=hidden_ns,
        per_step_emulator_overhead_ns=I.overlap_per_window(hidden, ws, we)
        .astype(np.int64)
        .reshape(n, len(steps)),
    )


def _by_cause(
    axis: DeviceAxis,
    gap: I.Intervals,
    cause: np.ndarray,
    inside: I.Intervals,
    discount: I.Intervals,
    ws: np.ndarray,
    we: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Counted idle ns (``_counted``) per device and cause, and per step window (``ws`` /
    ``we``: each device's steps, device by device) and cause, as (devices x causes) and
    (windows x causes) int64 arrays.

    The gaps are disjoint, so the counted part of all of them at once is the counted parts of
    each cause's gaps side by side, each piece inside one gap: one set operation tags every
    piece with its gap's cause; the windows are measured per cause at once
    (``overlap_per_window_by_key``)."""
    causes = len(ALL_CAUSES)
    part = _counted(gap, inside, discount)
    piece_cause = cause[np.searchsorted(gap.start, part.start, side="right") - 1]
    # (the same float sums as ``axis.total_per_device`` of each cause: bins filled in order)
    key = axis.group_of(part.start) * causes + piece_cause
    by_cause = np.bincount(key, weights=part.end - part.start, minlength=len(axis) * causes)
    by_cause = by_cause.astype(np.int64).reshape(len(axis), causes)
    return by_cause, I.overlap_per_window_by_key(part, piece_cause, causes, ws, we)


def _longest(
    ctx: AnalysisContext,
    gaps: tuple[np.ndarray, ...],
    top: int,
    discount: dict[int, I.Intervals],
) -> tuple[Gap, ...]:
    device, gs, ge, cause, idle_ns = gaps
    steps = ctx.steps
    pick = I.smallest_first(-idle_ns, top)
    out = []
    for i in pick.tolist():
        step = int(np.searchsorted(steps.start_ns, gs[i], side="right") - 1)
        out.append(
            Gap(
                device=int(device[i]),
                start_ns=int(gs[i]),
                end_ns=int(ge[i]),
                cause=ALL_CAUSES[int(cause[i])],
                step=max(step, 0),
                host_activity=host_activity(ctx, int(gs[i]), int(ge[i]), int(device[i])),
                idle_ns=int(idle_ns[i]),
                emulator_overhead_ns=int(
                    I.overlap_per_window(
                        discount.get(int(device[i]), I.EMPTY), gs[i : i + 1], ge[i : i + 1]
                    )[0]
                ),
            )
        )
    return tuple(out)


def host_activity(ctx: AnalysisContext, gs: int, ge: int, device: int) -> tuple[str, ...]:
    """Names of the host ops covering most of [gs, ge) on the threads that launch the device's
    work (``ctx.launch_threads``); among equals, the innermost. Dispatch machinery and the
    emulator's own frames (``internal_frames``) are left out: the op around them is named."""
    host = ctx.host
    names: list[str] = []
    for hit in sel.covering(host, gs, ge):
        hit = hit[ctx.on_launch_threads(device, host.rows[hit])]
        hit = hit[~np.isin(host.name_id[hit], ctx.names.internal_frames)]
        for n in host.name_id[hit].tolist():
            text = ctx.trace.strings[n]
            if text not in names:
                names.append(text)
            if len(names) == HOST_ACTIVITY_NAMES:
                return tuple(names)
    return tuple(names)
