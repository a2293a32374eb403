"""What every analysis of one trace starts from, computed once: the shared selections (device
work, steps, host rows, name classes, copies, launch sites, busy unions) and the results other
analyses build on. Every analysis is a function ``(ctx) -> Result``, as pyinstrument passes one
options object to every processor::

    ctx = AnalysisContext(trace, Options(min_gap_ns=50_000))
    ctx.work, ctx.steps, ctx.host          # selected on first use, then kept
    idle = ctx.result(idle_time)           # computed once, whoever asks first

``result`` memoises by analysis function, so ``findings`` can ask for ``idle_time`` and
``analyze`` for both without computing the gaps twice. The context reads the trace and never
changes it; the HTA and tb-profiler reproductions take the trace alone (their rules are those
tools', not these selections).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar

import numpy as np

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.analysis import selections as sel
from neuron_profiler.analysis._args import arg_values, as_float
from neuron_profiler.analysis._copies import CopyInfo, copy_info
from neuron_profiler.analysis._correlation import RuntimeCalls, runtime_calls
from neuron_profiler.analysis._device import DeviceWork, device_work
from neuron_profiler.analysis._launches import LaunchSites, launch_sites
from neuron_profiler.analysis._threads import HostThreads
from neuron_profiler.analysis.peaks import peak_properties
from neuron_profiler.analysis.steps import Steps, find_steps
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import Trace

DEFAULT_MIN_GAP_NS = 50_000
DEFAULT_TOP = 10
# the most an overhead span's before/after figure is read as: the emulator's are µs (a boundary,
# a few size queries; the largest, an op given hundreds of tensors, under a millisecond)
_REACH_NS = 10_000_000
R = TypeVar("R")


@dataclass(frozen=True)
class Options:
    """Args: min_gap_ns: shortest idle gap given a cause; top: longest gaps listed; hta / tb:
    also compute the HTA-compatible and tb-profiler breakdowns; timeline_segments: also compute
    the drawable device timeline (``analysis.timeline``), at most this many segments a series
    (None: not computed; the TensorBoard plugin asks for it)."""

    min_gap_ns: int = DEFAULT_MIN_GAP_NS
    top: int = DEFAULT_TOP
    hta: bool = True
    tb: bool = True
    timeline_segments: int | None = None


class AnalysisContext:
    """One trace, its options, its shared selections (each computed on first use) and the
    analysis results computed so far."""

    def __init__(self, trace: Trace, options: Options | None = None) -> None:
        self.trace = trace
        self.options = options or Options()
        self._results: dict[Callable[..., Any], Any] = {}
        self._busy: dict[int, I.Intervals] = {}
        self._waits: dict[int, I.Intervals] = {}
        self._launch_threads: dict[int, np.ndarray] = {}

    def result(self, analysis: Callable[[AnalysisContext], R]) -> R:
        """``analysis(self)``, computed once per context."""
        if analysis not in self._results:
            self._results[analysis] = analysis(self)
        return self._results[analysis]

    @cached_property
    def names(self) -> sel.NameClasses:
        return sel.NameClasses.of(self.trace)

    @cached_property
    def runtime_calls(self) -> RuntimeCalls:
        return runtime_calls(self.trace)

    @cached_property
    def work(self) -> DeviceWork:
        names = self.names
        return device_work(
            self.trace, names.collective_kernel, names.collective_wait, self.runtime_calls
        )

    @cached_property
    def steps(self) -> Steps:
        return find_steps(self.trace, self.work, self.names)

    @cached_property
    def host(self) -> sel.HostRows:
        return sel.host_rows(self.trace, self.names)

    @cached_property
    def copies(self) -> CopyInfo:
        return copy_info(self.trace, self.work)

    @cached_property
    def launch_sites(self) -> LaunchSites:
        return launch_sites(self.trace, self.work.rows, self.runtime_calls)

    @cached_property
    def threads(self) -> HostThreads:
        return HostThreads(self.trace, self.launch_sites)

    @cached_property
    def peaks(self) -> Mapping[str, Any] | None:
        return peak_properties(self.trace)

    @cached_property
    def fallback_rows(self) -> np.ndarray:
        return sel.fallback_rows(self.trace)

    @cached_property
    def sync_candidates(self) -> np.ndarray:
        """Host rows that may be syncs by name (``sync_calls`` keeps those that waited)."""
        return sel.sync_rows(self.trace, self.names)

    @cached_property
    def emulator_overhead(self) -> I.Intervals:
        """The emulator's own host work, as one interval set (discounted from idle time): each
        overhead span with the time its args say lies just before and after it (drawn apart
        so that the span nests in the host calls around it: emulator/host_cost.py)."""
        rows = sel.emulator_overhead_rows(self.trace, self.names)
        s = sel.spans_of(self.trace, rows)
        keys = (V.ARG_OVERHEAD_BEFORE, V.ARG_OVERHEAD_AFTER)
        reach = arg_values(self.trace, rows, keys)
        # (a hostile figure is bounded: _REACH_NS)
        before, after = (
            np.clip(np.nan_to_num(as_float(reach[k])), -_REACH_NS, _REACH_NS).astype(np.int64)
            for k in keys
        )
        start = s.start - np.maximum(before, 0)
        end = np.maximum(s.end + after, start)
        keep = end > start
        return I.union(start[keep], end[keep])

    @cached_property
    def launch_thread_table(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every (device, host thread) pair where the thread's runtime call launched the
        device's work, for all devices at once: (device index into ``work.devices``, pid,
        tid), sorted by device, then pid, tid. Each device row has one launching call
        (``RuntimeCalls.launching_call``): a correlation id that a hostile trace repeats on
        thousands of rows and calls must not pair each row with each call."""
        w, c = self.work, self.trace.columns
        call = self.runtime_calls.launching_call(self.trace, w.rows)
        linked = np.flatnonzero(call >= 0)
        rows = call[linked]
        dev = np.searchsorted(w.device_ids, w.device)[linked]
        pid, tid = c[S.PID][rows].astype(np.int64), c[S.TID][rows].astype(np.int64)
        order = np.lexsort((tid, pid, dev))  # (a sort: np.unique over rows is far slower)
        dev, pid, tid = dev[order], pid[order], tid[order]
        new = np.ones(len(dev), bool)
        new[1:] = (dev[1:] != dev[:-1]) | (pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1])
        return dev[new].astype(np.int64), pid[new], tid[new]

    def launch_threads(self, device: int) -> np.ndarray:
        """(pid, tid) of the host threads whose runtime calls launched ``device``'s work (the
        host activity a gap on that device can be blamed on: not a monitor thread asleep
        beside it); empty when the trace links no launch to that device's work."""
        if device not in self._launch_threads:
            dev, pid, tid = self.launch_thread_table
            k = int(np.searchsorted(self.work.device_ids, device))
            a, b = np.searchsorted(dev, k, side="left"), np.searchsorted(dev, k, side="right")
            known = k < len(self.work.devices) and self.work.devices[k] == device
            self._launch_threads[device] = (
                np.stack([pid[a:b], tid[a:b]], axis=1) if known else np.zeros((0, 2), np.int64)
            )
        return self._launch_threads[device]

    def on_launch_threads(self, device: int, rows: np.ndarray) -> np.ndarray:
        """Which of these host rows ran on a thread that launched ``device``'s work (all of
        them when the trace links no launch to it)."""
        threads = self.launch_threads(device)
        if len(threads) == 0:
            return np.ones(len(rows), bool)
        c = self.trace.columns
        pid, tid = c[S.PID][rows], c[S.TID][rows]
        out = np.zeros(len(rows), bool)
        for p, t in threads.tolist():  # the launching threads: one or a few
            out |= (pid == p) & (tid == t)
        return out

    def on_any_launch_thread(self, rows: np.ndarray) -> np.ndarray:
        """Which of these host rows ran on a thread whose spans some device's gaps are judged
        on (``on_launch_threads``' rule for every device at once): a thread that launched some
        device's work, or any thread when some device's launches are not linked."""
        dev, pid, tid = self.launch_thread_table
        linked = len(np.unique(dev))
        if len(rows) == 0 or linked < len(self.work.devices):
            return np.ones(len(rows), bool)
        c = self.trace.columns
        threads = np.unique(np.stack([pid, tid], axis=1), axis=0)
        mine = np.stack([c[S.PID][rows], c[S.TID][rows]], axis=1).astype(np.int64)
        _, code = np.unique(np.concatenate([threads, mine]), axis=0, return_inverse=True)
        code = code.ravel()
        return np.isin(code[len(threads) :], code[: len(threads)])

    def waits(self, device: int) -> I.Intervals:
        """When ``device`` waited at a collective for its peers (its collective-wait slices,
        less any time it had work), as one union over all time."""
        if device not in self._waits:
            w = self.work
            on = w.of(device)
            on = on[w.wait[on]]
            self._waits[device] = I.subtract(I.union(w.start[on], w.end[on]), self.busy(device))
        return self._waits[device]

    @property
    def n_steps(self) -> int:
        return max(len(self.steps), 1)

    @property
    def mean_step_ns(self) -> float:
        return float(self.steps.wall_ns.mean()) if len(self.steps) else 0.0

    def busy(self, device: int, queues: tuple[int, ...] | None = None) -> I.Intervals:
        """When ``device`` had work on any of ``queues`` (queue classes; None: any queue), as
        one union over all time. Collective waits are not work. The whole device's union,
        which several analyses read, is kept; a union of some queue classes is computed for
        the one analysis that asks (they can be as large as the trace's work)."""
        if queues is None and device in self._busy:
            return self._busy[device]
        w = self.work
        on = w.of(device)
        keep = ~w.wait[on]
        if queues is not None:
            keep &= np.isin(w.queue[on], queues)
        on = on[keep]
        union = I.union(w.start[on], w.end[on])
        if queues is None:
            self._busy[device] = union
        return union
