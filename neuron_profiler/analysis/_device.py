"""Device work of a trace, read once for every analysis: who ran what, on which queue, when, and
when its launch call began::

    work = device_work(trace, names.collective_kernel)   # (AnalysisContext.work)
    work.device, work.queue, work.start, work.end, work.launch   # one entry per device row

Device = the row's process (a NeuronCore, a GPU); a device is busy when any of its queues runs
work. Queue classes: compute (kernels), DMA (memcpy, memset), collective (collective kernels:
our ``CC: ...`` rows and their barrier waits, NCCL/RCCL kernels: ``selections``' name rule).
``wait``: the collective-wait slices (``CC wait: ...``, or a row whose ``collective wait`` arg is
true): the device waiting for its peers is not busy (docs/analysis.md#collective_wait).
``launch`` / ``launch_end``: the start and end of the host runtime call that launched the row:
the one with the same correlation id, else the one its ac2g flow or External id links it to
(``_correlation``; NO_LAUNCH when the trace has none).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from neuron_profiler.analysis._args import arg_values
from neuron_profiler.analysis._correlation import RuntimeCalls
from neuron_profiler.analysis._intervals import dense_codes
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import Trace

COMPUTE, DMA, COLLECTIVE = 0, 1, 2
NO_LAUNCH = np.iinfo(np.int64).min
_NONE = np.zeros(0, np.int64)
# the collective rows' args the analyses read, decoded once (a collective per step or more)
COLLECTIVE_ARGS = (V.ARG_COLLECTIVE_WAIT, V.ARG_COLLECTIVE, V.ARG_GROUP_RANKS)


@dataclass(frozen=True)
class DeviceWork:
    """Columns over device rows, sorted by start. ``devices``: every device pid, sorted."""

    rows: np.ndarray
    device: np.ndarray
    queue: np.ndarray
    start: np.ndarray
    end: np.ndarray
    launch: np.ndarray
    launch_end: np.ndarray  # when that call returned: the work was handed over by then
    devices: tuple[int, ...]
    labels: dict[int, str]
    wait: np.ndarray  # collective-wait slices: the device waits for its peers, no work
    by_device: np.ndarray  # entries grouped by device (in ``devices`` order), in start order
    bounds: list[int]  # device k's entries: by_device[bounds[k] : bounds[k + 1]]
    collective: np.ndarray  # the collective-queue entries, in order
    collective_args: Mapping[str, np.ndarray]  # COLLECTIVE_ARGS per ``collective`` entry

    def __len__(self) -> int:
        return len(self.rows)

    @cached_property
    def device_ids(self) -> np.ndarray:
        """``devices`` as one int64 array, made once (a trace may have tens of thousands)."""
        return np.asarray(self.devices, np.int64)

    def of(self, device: int) -> np.ndarray:
        """Indices of one device's work, in start order: per-device work in O(its rows), not a
        mask over every row (a trace may have tens of thousands of device processes)."""
        k = bisect_left(self.devices, device)  # (devices: sorted)
        if k == len(self.devices) or self.devices[k] != device:
            return _NONE
        return self.by_device[self.bounds[k] : self.bounds[k + 1]]

    def collective_arg(self, key: str, entries: np.ndarray) -> np.ndarray:
        """A ``COLLECTIVE_ARGS`` key's value (None: absent) per collective-queue entry."""
        return self.collective_args[key][np.searchsorted(self.collective, entries)]


def work_rows(trace: Trace) -> np.ndarray:
    """Rows of device work (``schema.WORK_KINDS``, complete, not of negative length), in file
    order."""
    return np.flatnonzero(
        trace.mask(kind=list(S.WORK_KINDS), ph=S.Phase.COMPLETE) & (trace.col(S.DUR_NS) >= 0)
    )


def device_work(
    trace: Trace, collective_names: np.ndarray, wait_names: np.ndarray, calls: RuntimeCalls
) -> DeviceWork:
    """``collective_names`` / ``wait_names``: string ids of collective kernel names and of
    collective-wait names (``selections.NameClasses``). A collective-queue row is a wait when
    its name says so (``CC wait: ...``) or its ``collective wait`` arg is true. ``calls``: the
    trace's runtime calls by correlation id (``_correlation``)."""
    c = trace.columns
    rows = work_rows(trace)
    rows = rows[np.argsort(c[S.TS_NS][rows], kind="stable")]
    kind = c[S.KIND][rows]
    queue = np.full(len(rows), COMPUTE, dtype=np.uint8)
    queue[(kind == S.EventKind.MEMCPY) | (kind == S.EventKind.MEMSET)] = DMA
    queue[
        (kind == S.EventKind.COLLECTIVE)
        | ((kind == S.EventKind.KERNEL) & np.isin(c[S.NAME_ID][rows], collective_names))
    ] = COLLECTIVE
    collective = np.flatnonzero(queue == COLLECTIVE)
    wait = np.zeros(len(rows), bool)
    wait[collective] = np.isin(c[S.NAME_ID][rows[collective]], wait_names)
    args = arg_values(trace, rows[collective], COLLECTIVE_ARGS)
    wait[collective] |= np.array([v is True for v in args[V.ARG_COLLECTIVE_WAIT]], bool)
    device = c[S.PID][rows]
    launch, launch_end = launch_spans(trace, rows, calls)
    codes, dense = dense_codes(device)  # (device pids are small ints: no sort)
    devices = tuple(codes.tolist())
    order = np.argsort(dense, kind="stable")  # by device, start order kept within each
    bounds = np.searchsorted(dense[order], np.arange(len(devices) + 1)).tolist()
    names = trace.process_names
    labels = {d: _label(names.get(d, ""), trace.pid_labels.get(d, d)) for d in devices}
    return DeviceWork(
        rows=rows,
        device=device,
        queue=queue,
        start=c[S.TS_NS][rows],
        end=c[S.TS_NS][rows] + c[S.DUR_NS][rows],
        launch=launch,
        launch_end=launch_end,
        wait=wait,
        by_device=order,
        bounds=bounds,
        devices=devices,
        labels=labels,
        collective=collective,
        collective_args=args,
    )


def _label(process_name: str, pid: int | str) -> str:
    """A NeuronCore's process name; else "device <pid>" (CUDA traces name the device process
    after the host program; a pid written as text, or beyond int64, is shown as written)."""
    return process_name if process_name.startswith(V.CORE_PROCESS_PREFIX) else f"device {pid}"


def launch_spans(
    trace: Trace, rows: np.ndarray, calls: RuntimeCalls
) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of the runtime call that launched each row
    (``RuntimeCalls.launching_call``); NO_LAUNCH for both where there is none."""
    start = np.full(len(rows), NO_LAUNCH, dtype=np.int64)
    end = start.copy()
    call = calls.launching_call(trace, rows)
    hit = call >= 0
    start[hit] = trace.col(S.TS_NS)[call[hit]]
    end[hit] = start[hit] + trace.col(S.DUR_NS)[call[hit]]
    return start, end
