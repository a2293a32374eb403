"""Device timelines small enough to draw: each device queue's busy time and each device's idle
gaps by cause, as at most ``max_segments`` segments per series::

    tl = device_timeline(ctx)                     # ctx.options.timeline_segments per series
    tl.queues[0].segments.busy_ns.sum() == tl.queues[0].busy_ns     # always
    tl.idle[0].cause, tl.idle[0].segments.exact

A series with at most ``max_segments`` intervals is kept as it is (``exact``: each segment is
one interval, busy over its whole length). A longer one is downsampled: the timeline window is
cut into ``max_segments`` equal bins and each bin becomes one segment holding the ns of the
series inside it (bins with none are left out), so the drawing is bounded whatever the trace
size and the busy (or idle) total of every series is preserved exactly (integer ns).

Queue = a device row's (pid, tid); its busy time is the union of its work (overlaps count once).
Idle series come from ``IdleTime``'s gap columns, one per (device, cause).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.analysis.context import AnalysisContext
from neuron_profiler.analysis.idle import idle_time
from neuron_profiler.trace import schema as S

DEFAULT_MAX_SEGMENTS = 2000


@dataclass(frozen=True)
class Segments:
    """Segments [start_ns, end_ns) of a series and the ns covered inside each (``busy_ns``;
    equal to end - start when ``exact``). ``intervals``: how many intervals the series had."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    busy_ns: np.ndarray
    exact: bool
    intervals: int


@dataclass(frozen=True)
class QueueSeries:
    device: int
    label: str  # the device's label (NeuronCore N, device <pid>)
    queue: int  # tid
    name: str  # the queue's thread name (else its string tid), "" when the trace has neither
    busy_ns: int
    segments: Segments


@dataclass(frozen=True)
class IdleSeries:
    device: int
    label: str
    cause: str  # one of idle.ALL_CAUSES
    idle_ns: int
    segments: Segments  # the counted idle time (inside the steps, less emulator overhead)
    gaps: int  # whole gaps of this cause (a gap cut by a step boundary or overhead is one)


@dataclass(frozen=True)
class DeviceTimeline:
    """Args: start_ns / end_ns: the window every series is drawn in (first to last device work
    or gap); max_segments: the bound per series; bin_ns: the bin width of downsampled series."""

    start_ns: int
    end_ns: int
    max_segments: int
    bin_ns: float
    queues: tuple[QueueSeries, ...]
    idle: tuple[IdleSeries, ...]

    @property
    def downsampled(self) -> bool:
        return any(not s.segments.exact for s in (*self.queues, *self.idle))


def downsample(iv: I.Intervals, start_ns: int, end_ns: int, max_segments: int) -> Segments:
    """At most ``max_segments`` segments for ``iv`` (disjoint, inside [start_ns, end_ns)),
    their ``busy_ns`` summing to ``iv.total`` (see the module docstring)."""
    if max_segments < 1:
        raise ValueError("max_segments must be at least 1")
    if len(iv) <= max_segments:
        return Segments(iv.start, iv.end, iv.end - iv.start, True, len(iv))
    edges = np.linspace(start_ns, end_ns, max_segments + 1).round().astype(np.int64)
    edges[0], edges[-1] = min(start_ns, int(iv.start[0])), max(end_ns, int(iv.end[-1]))
    lo, hi = edges[:-1], edges[1:]
    busy = I.overlap_per_window(iv, lo, hi)
    keep = busy > 0
    return Segments(lo[keep], hi[keep], busy[keep], False, len(iv))


def device_timeline(ctx: AnalysisContext) -> DeviceTimeline:
    """Every device queue's busy time and every device's gaps by cause, each series bounded
    by ``ctx.options.timeline_segments`` segments (DEFAULT_MAX_SEGMENTS when not set)."""
    trace, work, idle = ctx.trace, ctx.work, ctx.result(idle_time)
    max_segments = ctx.options.timeline_segments or DEFAULT_MAX_SEGMENTS
    ends = [a for a in (work.start, work.end, idle.gap_start_ns, idle.gap_end_ns) if len(a)]
    if not ends:
        return DeviceTimeline(0, 0, max_segments, 0.0, (), ())
    start_ns = int(min(a.min() for a in ends))
    end_ns = int(max(a.max() for a in ends))
    tid = trace.col(S.TID)[work.rows]
    keys, code = np.unique(np.stack([work.device, tid], axis=1), axis=0, return_inverse=True)
    group, start, end = I.union_by_group(code.ravel(), work.start, work.end)
    cut = np.searchsorted(group, np.arange(len(keys) + 1))
    queues = []
    for k, (device, queue) in enumerate(keys.tolist()):
        busy = I.Intervals(start[cut[k] : cut[k + 1]], end[cut[k] : cut[k + 1]])
        queues.append(
            QueueSeries(
                device,
                work.labels[device],
                queue,
                trace.thread_names.get((device, queue)) or trace.tid_labels.get(queue, ""),
                busy.total,
                downsample(busy, start_ns, end_ns, max_segments),
            )
        )
    series = []
    labels = dict(zip(idle.per_device.device.tolist(), idle.per_device.labels, strict=True))
    for device, cause, k in idle.gap_groups():
        gaps = idle.counted(k, device)
        series.append(
            IdleSeries(
                device,
                labels[device],
                cause,
                gaps.total,
                downsample(gaps, start_ns, end_ns, max_segments),
                len(k),
            )
        )
    return DeviceTimeline(
        start_ns,
        end_ns,
        max_segments,
        (end_ns - start_ns) / max_segments,
        tuple(queues),
        tuple(series),
    )
