"""Step breakdown: per step and device, where the wall time went::

    b = step_breakdown(ctx)
    b.devices[0].busy_ns[i], b.devices[0].idle_ns[i]    # step i on the first device
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

import numpy as np

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.analysis._device import COLLECTIVE, COMPUTE, DMA
from neuron_profiler.analysis.context import AnalysisContext
from neuron_profiler.analysis.steps import Steps


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


@dataclass(frozen=True)
class StepBreakdown:
    names: tuple[str, ...]
    wall_ns: np.ndarray
    host_ns: np.ndarray
    devices: tuple[DeviceSteps, ...]


def _per_step(x: I.Intervals, steps: Steps) -> np.ndarray:
    return I.overlap_per_window(x, steps.start_ns, steps.end_ns).astype(np.int64)


def step_breakdown(ctx: AnalysisContext) -> StepBreakdown:
    work, steps = ctx.work, ctx.steps
    devices = []
    for device in work.devices:
        sets = {q: ctx.busy(device, (q,)) for q in (COMPUTE, DMA, COLLECTIVE)}
        busy = ctx.busy(device)
        busy_ns = _per_step(busy, steps)
        compute_ns = _per_step(sets[COMPUTE], steps)
        collective_only = I.subtract(sets[COLLECTIVE], sets[COMPUTE])
        dma_only = I.subtract(I.subtract(sets[DMA], sets[COMPUTE]), sets[COLLECTIVE])
        devices.append(
            DeviceSteps(
                device=device,
                label=work.labels[device],
                busy_ns=busy_ns,
                compute_ns=compute_ns,
                dma_ns=_per_step(sets[DMA], steps),
                collective_ns=_per_step(sets[COLLECTIVE], steps),
                collective_wait_ns=_per_step(ctx.waits(device), steps),
                overlap_ns=_per_step(I.intersect(sets[COMPUTE], sets[COLLECTIVE]), steps),
                idle_ns=steps.wall_ns - busy_ns,
                collective_only_ns=_per_step(collective_only, steps),
                dma_only_ns=_per_step(dma_only, steps),
            )
        )
    return StepBreakdown(
        names=steps.names,
        wall_ns=steps.wall_ns,
        host_ns=_per_step(I.union(ctx.host.start, ctx.host.end), steps),
        devices=tuple(devices),
    )
