"""Step breakdown: per step and device, where the wall time went::

    b = step_breakdown(ctx)
    b.busy_ns[0, i], b.not_busy_ns[0, i]     # step i on the first device (b.device[0])
    b.emulator_overhead_ns[0, i]             # the emulator's own host work in not_busy_ns
    b.host_ns[i]                             # host ops busy in step i

Per device and step (every figure is a union, clipped to the step, so overlapping work on
several queues counts once): busy = any queue busy; compute / DMA / collective = that queue
class busy (collective: the collectives' own transfer); collective wait = the device waiting at
a collective for its peers, which is not busy time (docs/analysis.md#collective_wait);
not_busy = wall - busy: the device's idle time (the waits included) and, on an emulated device,
the emulator's own host work (``emulator_overhead``, ``idle.py``'s figure per step: not idle
time, absent on real hardware), so not_busy = idle by cause + emulator overhead. It is not named
idle because the idle-by-cause figures (``idle.py``) leave the emulator overhead out. overlap =
compute and collective at once (the communication hidden behind computation). Host time is the
union of host ops on all host threads (ProfilerStep annotations left out).

For a stacked chart the busy time is also split into parts that do not overlap:
compute + collective_only (collectives while no compute runs) + dma_only (copies while neither
compute nor collectives run) = busy, so with not_busy they add up to the wall time.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.analysis._axis import DeviceAxis, device_axes
from neuron_profiler.analysis._device import COLLECTIVE, COMPUTE, DMA
from neuron_profiler.analysis.context import AnalysisContext
from neuron_profiler.analysis.idle import idle_time


@dataclass(frozen=True)
class DeviceSteps:
    """One device: arrays of ns, one entry per step. ``collective_only_ns`` / ``dma_only_ns``:
    the busy time not already counted by compute (then collectives); ``not_busy_ns`` = wall -
    busy, ``emulator_overhead_ns`` of it the emulator's own work: see the module docstring."""

    device: int
    label: str
    busy_ns: np.ndarray
    compute_ns: np.ndarray
    dma_ns: np.ndarray
    collective_ns: np.ndarray
    collective_wait_ns: np.ndarray
    overlap_ns: np.ndarray
    not_busy_ns: np.ndarray
    emulator_overhead_ns: np.ndarray
    collective_only_ns: np.ndarray
    dma_only_ns: np.ndarray


FIGURES = (
    "busy_ns",
    "compute_ns",
    "dma_ns",
    "collective_ns",
    "collective_wait_ns",
    "overlap_ns",
    "not_busy_ns",
    "emulator_overhead_ns",
    "collective_only_ns",
    "dma_only_ns",
)  # DeviceSteps' arrays, each a (devices x steps) column of StepBreakdown


@dataclass(frozen=True)
class StepBreakdown:
    """Per step: ``wall_ns``, ``host_ns``. Per device g and step i: ``busy_ns[g, i]`` and the
    other ``FIGURES``, device ``device[g]`` (``devices``: the same as one ``DeviceSteps`` per
    device, built on first use; a trace of 60,000 device queues needs no object per device).
    ``has_emulator_overhead``: some device's ``not_busy_ns`` holds emulator overhead, so a
    renderer shows it apart (its label comes from here, never from the idle result)."""

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
    not_busy_ns: np.ndarray
    emulator_overhead_ns: np.ndarray
    collective_only_ns: np.ndarray
    dma_only_ns: np.ndarray

    @property
    def has_emulator_overhead(self) -> bool:
        return bool(self.emulator_overhead_ns.any())

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
    """Every device at once, laid end to end on one time axis (``_axis``). The emulator
    overhead per step is the idle analysis' (one rule: ``idle.py`` decides what is discounted)."""
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
    figures = {
        name: np.concatenate([p[name] for p in parts]) if parts else none
        for name in FIGURES
        if name != "emulator_overhead_ns"
    }
    idle = ctx.result(idle_time).per_device
    overhead = np.zeros((len(devices), len(steps)), np.int64)
    if len(idle):  # (none where the steps span no time: no idle, no overhead)
        if idle.device.tolist() != devices:  # (both walk work.devices in order)
            raise RuntimeError("the idle analysis and the step breakdown order devices apart")
        overhead = idle.per_step_emulator_overhead_ns
    return StepBreakdown(
        names=steps.names,
        wall_ns=steps.wall_ns,
        host_ns=I.overlap_per_window(
            I.union(ctx.host.start, ctx.host.end), steps.start_ns, steps.end_ns
        ).astype(np.int64),
        device=np.asarray(devices, dtype=np.int64),
        labels=tuple(map(work.labels.__getitem__, devices)),  # (no Python frame per device)
        emulator_overhead_ns=overhead,
        **figures,
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
        "not_busy_ns": steps.wall_ns[np.newaxis, :] - busy_ns,
        "collective_only_ns": per_step(I.subtract(sets[COLLECTIVE], sets[COMPUTE])),
        "dma_only_ns": per_step(I.subtract(I.subtract(sets[DMA], sets[COMPUTE]), sets[COLLECTIVE])),
    }
