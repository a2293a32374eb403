"""Step breakdown: per step and device, where the wall time went::

    b = step_breakdown(ctx)
    b.busy_ns[0, i], b.idle_ns[0, i]     # step i on the first device (b.device[0])
    b.host_ns[i]                                         # host ops busy in step i

Per device and step (every figure is a union, clipped to the step, so overlapping work on
several queues counts once): busy = any queue busy; compute / DMA / collective = that queue
class busy (collective: the collectives' own transfer); collective wait = the device waiting at
a collective for its peers, which is not busy time (docs/analysis.md#collective_wait); idle =
wall - busy (the waits included); overlap = compute and collective at once (the communication
hidden behind computation). Host time is the union of host ops on all host threads
(ProfilerStep annotations left out).

For a stacked chart the busy time is also split into parts that do not overlap:
compute + collective_only (collectives while no compute runs) + dma_only (copies while neither
compute nor collectives run) = busy, so with idle they add up to the wall time.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.analysis._axis import DeviceAxis, device_axes
from neuron_profiler.analysis._device import COLLECTIVE, COMPUTE, DMA
from neuron_profiler.analysis.context import AnalysisContext


@dataclass(frozen=True)
class DeviceSteps:
    """One device: arrays of ns, one entry per step. ``collective_only_ns`` / ``dma_only_ns``:
    the busy time not already counted by compute (then collectives): see the module docstring."""

    device: int
    label: str
    busy_ns: np.ndarray
    compute_ns: np.ndarray
    dma_ns: np.ndarray
    collective_ns: np.ndarray
    collective_wait_ns: np.ndarray
    overlap_ns: np.ndarray
    idle_ns: np.ndarray
    collective_only_ns: np.ndarray
    dma_only_ns: np.ndarray


FIGURES = (
    "busy_ns",
    "compute_ns",
    "dma_ns",
    "collective_ns",
    "collective_wait_ns",
    "overlap_ns",
    "idle_ns",
    "collective_only_ns",
    "dma_only_ns",
)  # DeviceSteps' arrays, each a (devices x steps) column of StepBreakdown


@dataclass(frozen=True)
class StepBreakdown:
    """Per step: ``wall_ns``, ``host_ns``. Per device g and step i: ``busy_ns[g, i]`` and the
    other ``FIGURES``, device ``device[g]`` (``devices``: the same as one ``DeviceSteps`` per
    device, built on first use; a trace of 60,000 device queues needs no object per device)."""

    names: tuple[str, ...]
    wall_ns: np.ndarray
    host_ns: np.ndarray
    device: np.ndarray
    labels: tuple[str, ...]
    busy_ns: np.ndarray
    compute_ns: np.ndarray
    dma_ns: np.ndarray
    collective_ns: np.ndarray
    collective_wait_ns: np.ndarray
    overlap_ns: np.ndarray
    idle_ns: np.ndarray
    collective_only_ns: np.ndarray
    dma_only_ns: np.ndarray

    @cached_property
    def devices(self) -> tuple[DeviceSteps, ...]:
        return tuple(
            DeviceSteps(
                device=device,
                label=label,
                **{name: getattr(self, name)[g] for name in FIGURES},
            )
            for g, (device, label) in enumerate(zip(self.device.tolist(), self.labels, strict=True))
        )


def step_breakdown(ctx: AnalysisContext) -> StepBreakdown:
    """Every device at once, laid end to end on one time axis (``_axis``)."""
    work, steps = ctx.work, ctx.steps
    parts: list[dict[str, np.ndarray]] = []
    devices: list[int] = []
    if len(work) and len(steps):
        lo = min(int(work.start.min()), int(steps.start_ns.min()))
        hi = max(int(work.end.max()), int(steps.end_ns.max()))
        for axis, group in device_axes(work, lo, hi):
            parts.append(_on_axis(ctx, axis, group))
            devices += axis.devices
    none = np.zeros((0, len(steps)), np.int64)
    return StepBreakdown(
        names=steps.names,
        wall_ns=steps.wall_ns,
        host_ns=I.overlap_per_window(
            I.union(ctx.host.start, ctx.host.end), steps.start_ns, steps.end_ns
        ).astype(np.int64),
        device=np.asarray(devices, dtype=np.int64),
        labels=tuple(map(work.labels.__getitem__, devices)),  # (no Python frame per device)
        **{name: np.concatenate([p[name] for p in parts]) if parts else none for name in FIGURES},
    )


def _on_axis(ctx: AnalysisContext, axis: DeviceAxis, group: np.ndarray) -> dict[str, np.ndarray]:
    """The breakdown of an axis' devices: each figure one interval operation for all of them,
    cut per device and step (one row per device)."""
    work, steps = ctx.work, ctx.steps
    mine = group >= 0

    def union(keep: np.ndarray) -> I.Intervals:
        entries = np.flatnonzero(keep)
        return axis.union(work, entries, group[entries])

    runs = mine & ~work.wait
    busy = union(runs)
    sets = {q: union(runs & (work.queue == q)) for q in (COMPUTE, DMA, COLLECTIVE)}
    waits = I.subtract(union(mine & work.wait), busy)
    ws, we = (w.ravel() for w in axis.windows(steps.start_ns, steps.end_ns))

    def per_step(x: I.Intervals) -> np.ndarray:
        return I.overlap_per_window(x, ws, we).astype(np.int64).reshape(len(axis), len(steps))

    busy_ns = per_step(busy)
    return {
        "busy_ns": busy_ns,
        "compute_ns": per_step(sets[COMPUTE]),
        "dma_ns": per_step(sets[DMA]),
        "collective_ns": per_step(sets[COLLECTIVE]),
        "collective_wait_ns": per_step(waits),
        "overlap_ns": per_step(I.intersect(sets[COMPUTE], sets[COLLECTIVE])),
        "idle_ns": steps.wall_ns[np.newaxis, :] - busy_ns,
        "collective_only_ns": per_step(I.subtract(sets[COLLECTIVE], sets[COMPUTE])),
        "dma_only_ns": per_step(I.subtract(I.subtract(sets[DMA], sets[COMPUTE]), sets[COLLECTIVE])),
    }
