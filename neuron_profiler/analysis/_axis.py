"""Every device's time laid end to end on one int64 axis, so that a per-device interval
operation runs once for all devices (a trace may have tens of thousands of device processes,
one per queue)::

    for axis in device_axes(work, lo, hi):          # one axis unless the span is absurd
        busy = axis.union(rows)                      # each device's union, on the axis
        window = axis.replicate(steps.spans)         # the steps, once per device
        idle = I.subtract(window, busy)              # every device's idle time at once
        axis.group_of(idle.start)                    # which device (index into axis.devices)

Device ``g`` of an axis maps time ``t`` to ``t - base + g * width``: its times never meet
another device's, so unions, intersections and differences on the axis are each device's own.
``width`` covers every time the analyses place (work, steps, host spans), and the devices are
split over several axes only when ``devices x width`` would not fit in int64.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.analysis._device import DeviceWork

_LIMIT = 2**62  # the axis stays clear of int64's end


@dataclass(frozen=True)
class DeviceAxis:
    """Args: devices: the device pids on this axis, in order (group g = devices[g]); index:
    their positions in ``DeviceWork.devices``; base / width: see the module docstring."""

    devices: tuple[int, ...]
    index: np.ndarray
    base: int
    width: int

    def __len__(self) -> int:
        return len(self.devices)

    def shift(self, group: np.ndarray | int) -> np.ndarray | int:
        """What adds to a real time of that group to place it on the axis."""
        return group * self.width - self.base

    def group_of(self, t: np.ndarray) -> np.ndarray:
        """The group (index into ``devices``) of axis times."""
        return t // self.width

    def union(self, work: DeviceWork, entries: np.ndarray, group: np.ndarray) -> I.Intervals:
        """The union of work entries (indices into ``work``) of each device, on the axis;
        ``group``: each entry's group."""
        shift = self.shift(group)
        return I.union(work.start[entries] + shift, work.end[entries] + shift)

    def replicate(self, x: I.Intervals) -> I.Intervals:
        """``x`` (real time, the same for every device) once per device, on the axis (the part
        of it inside the axis' span: outside, it would reach into the next device's)."""
        x = I.intersect(x, I.window(self.base, self.base + self.width))
        if len(x) == 0 or len(self) == 0:
            return I.EMPTY
        shift = self.shift(np.arange(len(self), dtype=np.int64))[:, None]
        return I.Intervals((x.start[None, :] + shift).ravel(), (x.end[None, :] + shift).ravel())

    def windows(self, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Windows (real time, the same for every device) once per device, on the axis, as
        (devices x windows) arrays: e.g. each device's steps."""
        shift = self.shift(np.arange(len(self), dtype=np.int64))[:, None]
        return start[None, :] + shift, end[None, :] + shift

    def split(self, x: I.Intervals) -> dict[int, I.Intervals]:
        """``x`` cut per device, back in real time: {device: its part} for the devices whose
        part is not empty (in device order; the others cost nothing)."""
        group = self.group_of(x.start)
        shift = self.shift(group)
        start, end = x.start - shift, x.end - shift
        first = np.flatnonzero(np.r_[True, group[1:] != group[:-1]]) if len(group) else group
        bounds = np.r_[first, len(group)].tolist()
        return {
            self.devices[int(group[a])]: I.Intervals(start[a:b], end[a:b])
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)
        }

    def total_per_device(self, x: I.Intervals) -> np.ndarray:
        """ns of an axis set per device (one entry per device, in order)."""
        group = self.group_of(x.start)
        return np.bincount(group, weights=x.end - x.start, minlength=len(self)).astype(np.int64)


def device_axes(work: DeviceWork, lo: int, hi: int) -> Iterator[tuple[DeviceAxis, np.ndarray]]:
    """The axes of all devices for times in [lo, hi) (every time the caller places must lie
    there), each with its work entries' groups: yields (axis, group per work entry, -1 for
    entries of other axes)."""
    width = max(int(hi) - int(lo) + 1, 1)
    per_axis = max(1, _LIMIT // width)
    devices = work.devices
    dense = np.searchsorted(work.device_ids, work.device)
    for first in range(0, len(devices), per_axis):
        chosen = np.arange(first, min(first + per_axis, len(devices)), dtype=np.int64)
        group = np.where((dense >= first) & (dense < first + len(chosen)), dense - first, -1)
        axis = DeviceAxis(
            devices=tuple(devices[first : first + len(chosen)]),
            index=chosen,
            base=int(lo),
            width=width,
        )
        yield axis, group
