"""Why a device waited, one record per cause: its rule, its advice, its docs anchor and its
precondition together (as torch.profiler's pattern matcher keeps one class per anti-pattern)::

    for rule in IDLE_RULES:                 # in order: a gap takes the first rule that holds
        if rule.applies(spans):
            hit = rule.match(gaps, spans)
    cause("host_sync").advice, cause("host_sync").docs

Idle causes (``IDLE_RULES``, then ``SHORT_GAPS``) classify the device's idle gaps
(``idle.py``), a collective wait first (waiting for a peer is idle time, never busy); the
busy-time patterns ``EXPOSED_COPIES`` and ``EXPOSED_COMMUNICATION`` are findings about copies
and collectives nothing hides (``findings.py``); the memory patterns ``MEMORY_NEAR_CAPACITY``
and ``MEMORY_LEAK`` are findings about a device's memory (``memory.py``). How each cause reaches the findings
is its ``finding``: one ``idle:<name>`` finding, per-op / per-name groups (CPU fallbacks,
host syncs), or none (profiler overhead is the profiler's, not the user's). The rules are
stated with a worked example in docs/analysis.md, each under a heading named after the cause.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar, Literal

import numpy as np

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.analysis._axis import DeviceAxis
from neuron_profiler.analysis._device import NO_LAUNCH
from neuron_profiler.analysis.selections import NameClasses

DOCS = "docs/analysis.md"
Reported = Literal["idle", "groups", "memory", "none"]


@dataclass(frozen=True)
class ThreadSpans:
    """Host spans of one kind, each with its thread (``thread``: a code shared with the
    ``LaunchThreads`` of the same ``HostSpans``)."""

    start: np.ndarray
    end: np.ndarray
    thread: np.ndarray

    def __len__(self) -> int:
        return len(self.start)


_NONE = np.zeros(0, np.int64)
NO_SPANS = ThreadSpans(_NONE, _NONE, _NONE)


@dataclass(frozen=True)
class LaunchThreads:
    """Whose host spans a device's gaps are judged on: the threads that launched its work
    (``AnalysisContext.launch_thread_table``: a DataLoader, a sync or a fallback on a thread
    that launches nothing there kept no launch of that device waiting), every thread for a
    device whose launches the trace does not link. Devices with the same threads share a set,
    so that a span is placed once per set, not once per device. ``of_device``: per device
    (index into ``DeviceWork.devices``) its set, -1 for every thread; ``member_thread`` /
    ``member_set``: the sets' threads as (thread, set) pairs sorted by thread."""

    of_device: np.ndarray
    member_thread: np.ndarray
    member_set: np.ndarray

    @classmethod
    def of(cls, device: np.ndarray, thread: np.ndarray, n_devices: int) -> LaunchThreads:
        """From the (device, thread) pairs, sorted by device then thread, each once."""
        counts = np.bincount(device, minlength=n_devices)
        first = np.r_[0, np.cumsum(counts)[:-1]].astype(np.int64)
        # a set's identity, built one position at a time (as many passes as the most threads
        # one device has): its size, then each (identity so far, next thread) renumbered
        key = counts.astype(np.int64)
        for j in range(int(counts.max()) if len(counts) else 0):
            has = np.flatnonzero(counts > j)
            pair = np.stack([key[has], thread[first[has] + j]], axis=1)
            _, renumbered = np.unique(pair, axis=0, return_inverse=True)
            key[has] = int(key.max()) + 1 + renumbered.ravel()
        linked = counts > 0
        of_device = np.full(n_devices, -1, np.int64)
        _, of_device[linked] = np.unique(key[linked], return_inverse=True)
        _, rep = np.unique(of_device[linked], return_index=True)
        rep = np.flatnonzero(linked)[rep]  # one device per set, in set order
        n = counts[rep]
        at = np.repeat(first[rep] - np.r_[0, np.cumsum(n)[:-1]], n) + np.arange(int(n.sum()))
        member_set = np.repeat(np.arange(len(rep), dtype=np.int64), n)
        order = np.argsort(thread[at], kind="stable")
        return cls(of_device, thread[at][order], member_set[order])


@dataclass(frozen=True)
class HostSpans:
    """The host's time in each kind of work the rules test, span by span with its thread
    (``sync``: the sync calls themselves, for rule 3's "begins in one"); ``launchers``: which
    threads' spans count for each device's gaps. Kineto's profiler overhead counts on every
    thread: Kineto writes it on a process of its own (pid -1), and its buffer handling holds up
    the whole process."""

    data_loading: ThreadSpans
    cpu_fallback: ThreadSpans  # the calls with their copies on the device (rule: covers)
    cpu_fallback_host: ThreadSpans  # the calls on the host (rule: the gap begins in one)
    sync: ThreadSpans
    profiler_overhead: ThreadSpans
    launchers: LaunchThreads


# How long after its launch call returned a work item may start and still count as launched
# late by the host: ASSUMPTION, 100 µs, well above the launch latencies runtimes show (CUDA's
# few µs, the Neuron runtime's ~15 µs: docs/chips.md), well below the wait behind a queue of work.
LAUNCH_LATENCY_ALLOWANCE_NS = 100_000


@dataclass(frozen=True)
class Gaps:
    """The gaps being classified, one entry each, of every device of a device axis
    (``_axis``). ``start`` / ``end``: real times; ``idle_ns``: the gap less the emulator
    overhead in it (what ``--min-gap`` is compared with); ``next_launch`` / ``next_launch_end``:
    when the launch call of the work ending it began and returned (NO_LAUNCH: unknown). On the
    axis, where each device's own sets live: ``axis_start`` / ``axis_end`` (the gaps),
    ``judged`` (each gap's counted idle: its parts inside the steps, less the emulator overhead
    not waited; ``judged_gap``: the gap of each piece), ``waits`` (when the devices waited at a
    collective for their peers); ``overhead``: the emulator's own host work (real time).

    A gap's cause is judged on its counted idle alone: a gap kept whole across the host time
    between two steps (``idle.py``) is not handed to what the host did outside the steps."""

    start: np.ndarray
    end: np.ndarray
    idle_ns: np.ndarray
    next_launch: np.ndarray
    next_launch_end: np.ndarray
    axis: DeviceAxis
    axis_start: np.ndarray
    axis_end: np.ndarray
    judged: I.Intervals
    judged_gap: np.ndarray
    overhead: I.Intervals = I.EMPTY
    waits: I.Intervals = I.EMPTY
    launchers: LaunchThreads | None = None  # None: every device, every thread

    @cached_property
    def _lead(self) -> np.ndarray:
        """Per device of the axis: the first device of the axis with its launching threads,
        where the spans on those threads are placed (each set once on the axis)."""
        axis = self.axis
        if self.launchers is None:
            return np.zeros(len(axis), np.int64)
        sets = self.launchers.of_device[axis.index]
        distinct, first = np.unique(sets, return_index=True)
        return first[np.searchsorted(distinct, sets)].astype(np.int64)

    def _to_lead(self, t: np.ndarray) -> np.ndarray:
        """Axis times of the gaps' devices moved to their leads' places."""
        g = self.axis.group_of(t)
        return t + (self._lead[g] - g) * self.axis.width

    def place(self, spans: ThreadSpans) -> tuple[np.ndarray, np.ndarray]:
        """The spans on the axis, at each lead whose devices' launching threads ran them (the
        lead of devices with no known launching thread takes them all): one copy per set of
        threads, not per device. (start, end), in no order; clipped to the axis' span, its last
        ns left out (a span reaching it would touch the next lead's first gap)."""
        axis = self.axis
        lo, hi = axis.base, axis.base + axis.width - 1
        keep = (spans.end > lo) & (spans.start < hi) & (spans.end > spans.start)
        start, end = np.maximum(spans.start[keep], lo), np.minimum(spans.end[keep], hi)
        if self.launchers is None:
            return start + axis.shift(0), end + axis.shift(0)
        leads = np.unique(self._lead)
        lead_set = self.launchers.of_device[axis.index[leads]]
        by_set = np.argsort(lead_set)
        leads, lead_set = leads[by_set], lead_set[by_set]
        # (span, set) pairs: the sets holding each span's thread, joined by thread
        thread, members = spans.thread[keep], self.launchers.member_thread
        a = np.searchsorted(members, thread, side="left")
        n = np.searchsorted(members, thread, side="right") - a
        span = np.repeat(np.arange(len(start)), n)
        at = np.repeat(a - np.r_[0, np.cumsum(n)[:-1]], n) + np.arange(int(n.sum()))
        member_set = self.launchers.member_set[at].astype(np.int64)
        k = np.minimum(np.searchsorted(lead_set, member_set), len(lead_set) - 1)
        here = lead_set[k] == member_set  # (sets of this axis' devices only)
        span, lead = span[here], leads[k[here]]
        if lead_set[0] == -1:  # devices with no known launching thread: every span
            span = np.r_[span, np.arange(len(start))]
            lead = np.r_[lead, np.full(len(start), leads[0], np.int64)]
        shift = axis.shift(lead)
        return start[span] + shift, end[span] + shift

    def per_gap(self, piece_ns: np.ndarray) -> np.ndarray:
        """Per gap, the sum of a figure of each of its ``judged`` pieces (they are in gap
        order: one cumulative sum, exact in int64)."""
        cum = np.r_[0, np.cumsum(piece_ns, dtype=np.int64)]
        bounds = np.searchsorted(self.judged_gap, np.arange(len(self.start) + 1))
        return cum[bounds[1:]] - cum[bounds[:-1]]

    @cached_property
    def counted_ns(self) -> np.ndarray:
        """Per gap: its counted idle (inside the steps, less the emulator overhead)."""
        return self.per_gap(self.judged.end - self.judged.start)

    def covered_by(self, spans: ThreadSpans, any_thread: bool = False) -> np.ndarray:
        """Do the host spans on the threads that launch each gap's device's work (on any
        thread: ``any_thread``) cover at least half of the gap's counted idle (those threads
        spent most of the gap's idle time inside the steps there)? What they cover outside the
        steps or in the emulator's overhead counts no more than the gap's own time there."""
        start, end = self.judged.start, self.judged.end
        if any_thread:  # (real time: one union for every device)
            shift = self.axis.shift(self.axis.group_of(start))
            on, start, end = I.union(spans.start, spans.end), start - shift, end - shift
        else:
            on, start, end = I.union(*self.place(spans)), self._to_lead(start), self._to_lead(end)
        return 2 * self.per_gap(I.overlap_per_window(on, start, end)) >= self.counted_ns

    def waited(self) -> np.ndarray:
        """Did the gap's device wait at a collective for at least half of its counted idle?"""
        on = I.overlap_per_window(self.waits, self.judged.start, self.judged.end)
        return 2 * self.per_gap(on) >= self.counted_ns

    def begins_in(self, spans: ThreadSpans) -> np.ndarray:
        """Does each gap begin inside one of the host spans on the threads that launch its
        device's work (one that began at or before the gap and ended at or after its start)?"""
        start, end = self.place(spans)
        at = self._to_lead(self.axis_start)
        return I.any_overlap(start, end, at - 1, at + 1)

    @cached_property
    def launched_late(self) -> np.ndarray:
        """Did the host keep the device waiting: the launch of the work ending each gap began
        after the gap did, and that work started soon after the host had handed it over (its
        launch call returned): within launch latency (``LAUNCH_LATENCY_ALLOWANCE_NS``) or the
        second half of the gap's counted idle (a gap across the host time between two steps
        has its midpoint there, which every launch in the next step would pass). Work that
        starts long after its launch returned waited for something else (work the trace does
        not hold, e.g. launched before the profile began; a dependency), which is no host
        lateness."""
        late = (self.next_launch != NO_LAUNCH) & (self.next_launch > self.start)
        handed = np.maximum(self.next_launch_end, self.start)
        soon = self.end - handed <= LAUNCH_LATENCY_ALLOWANCE_NS
        # the counted idle after the launch returned, piece by piece on the axis
        lo = (self.axis_start + (handed - self.start))[self.judged_gap]
        hi = self.axis_end[self.judged_gap]
        after = np.minimum(self.judged.end, hi) - np.maximum(self.judged.start, lo)
        after = self.per_gap(np.maximum(after, 0))
        return late & (soon | (after <= self.counted_ns // 2))


class Cause:
    """One cause. ``name``: its key in reports and ``--json`` (``title``: the same in words);
    ``advice``: what to do (fields in braces are filled per finding); ``finding``: how it
    reaches the findings; ``docs``: where its rule is explained."""

    name: ClassVar[str]
    advice: ClassVar[str]
    finding: ClassVar[Reported] = "idle"

    @property
    def title(self) -> str:
        return self.name.replace("_", " ")

    @property
    def docs(self) -> str:
        return f"{DOCS}#{self.name}"

    def applies(self, spans: HostSpans) -> bool:
        """Precondition: can the trace show this cause at all? (When not, the rule is not
        tried.)"""
        return True

    def advice_for(self, shows: NameClasses) -> str:
        """The advice for a trace that shows this set-up (compiled graphs, DataLoader workers,
        pinned memory: ``selections.NameClasses``): never what it already does."""
        return self.advice

    def match(self, gaps: Gaps, spans: HostSpans) -> np.ndarray:
        """Which gaps this rule holds for."""
        raise NotImplementedError


class DataLoading(Cause):
    name = "data_loading"
    advice = (
        "The device waits for input: use DataLoader(num_workers>0, pin_memory=True, "
        "persistent_workers=True) or prefetch the next batch."
    )

    def advice_for(self, shows: NameClasses) -> str:
        if not len(shows.worker_loader):
            pinned = "" if len(shows.pinned) else ", pin_memory=True"
            return (
                f"The device waits for input: use DataLoader(num_workers>0{pinned}, "
                "persistent_workers=True) or prefetch the next batch."
            )
        return (
            "The device waits for input although the DataLoader has worker processes: raise "
            "num_workers or prefetch_factor, make __getitem__ and collate cheaper, or keep the "
            "data in memory."
        )

    def applies(self, spans: HostSpans) -> bool:
        return len(spans.data_loading) > 0

    def match(self, gaps: Gaps, spans: HostSpans) -> np.ndarray:
        return gaps.covered_by(spans.data_loading)


class CpuFallback(Cause):
    name, finding = "cpu_fallback", "groups"
    advice = (
        "{op} runs on the host ({reason}): replace it by a supported op, move it out of "
        "the step, or keep its inputs on the host."
    )

    def applies(self, spans: HostSpans) -> bool:
        return len(spans.cpu_fallback) > 0

    def match(self, gaps: Gaps, spans: HostSpans) -> np.ndarray:
        # the gap begins while the host is in a fallback call (its copies, its wait for them,
        # releasing them: the idle lasts up to the next launch), or fallback calls cover it
        return gaps.begins_in(spans.cpu_fallback_host) | gaps.covered_by(spans.cpu_fallback)


class HostSync(Cause):
    name, finding = "host_sync", "groups"
    advice = (
        "The host waits for the device here, then the queue is empty: drop it from the "
        "step (log every N steps, keep values on the device, non_blocking copies)."
    )

    def applies(self, spans: HostSpans) -> bool:
        return len(spans.sync) > 0

    def match(self, gaps: Gaps, spans: HostSpans) -> np.ndarray:
        return gaps.begins_in(spans.sync)


class HostBoundLaunch(Cause):
    name = "host_bound_launch"
    advice = (
        "The host launches work too slowly: fewer, larger ops per step (torch.compile, "
        "fused ops, larger batches)."
    )

    def advice_for(self, shows: NameClasses) -> str:
        if not len(shows.compiled):
            return self.advice
        return (
            "The host launches work too slowly, compiled graphs included: fewer graph breaks "
            "and larger compiled regions, fewer host-side ops between them, larger batches."
        )

    def match(self, gaps: Gaps, spans: HostSpans) -> np.ndarray:
        return gaps.launched_late


class ProfilerOverhead(Cause):
    name, finding = "profiler_overhead", "none"
    advice = "The profiler's own work: absent when not profiling."

    def applies(self, spans: HostSpans) -> bool:
        return len(spans.profiler_overhead) > 0

    def match(self, gaps: Gaps, spans: HostSpans) -> np.ndarray:
        return gaps.covered_by(spans.profiler_overhead, any_thread=True)


class Other(Cause):
    name = "other"
    advice = "Idle time with no host cause found: look at the longest gaps in the trace."

    def match(self, gaps: Gaps, spans: HostSpans) -> np.ndarray:
        return np.ones(len(gaps.start), dtype=bool)


class ShortGaps(Cause):
    """Gaps shorter than ``--min-gap`` that were not launched late: launch latency between work
    already queued. (A short gap launched late is ``host_bound_launch``; no other rule is
    tried on short gaps.)"""

    name = "short_gaps"
    advice = "Many gaps shorter than --min-gap between launches: fuse small ops."

    def match(self, gaps: Gaps, spans: HostSpans) -> np.ndarray:
        return ~gaps.launched_late


class ExposedCopies(Cause):
    """Busy time: a device's DMA queue busy while none of its compute or collective queues is
    (the copy is not hidden behind work), fallback copies left out."""

    name = "exposed_copies"
    advice = (
        "Copies run while the compute queue waits: overlap them with compute "
        "(non_blocking=True with pinned memory, prefetch earlier)."
    )

    def advice_for(self, shows: NameClasses) -> str:
        if not len(shows.pinned):
            return self.advice
        return (
            "Copies run while the compute queue waits: start them earlier (prefetch the next "
            "batch with non_blocking=True) so that compute hides them."
        )


class ExposedCommunication(Cause):
    """Busy time: a device's collective queue busy while its compute queue is not (the
    collective is not hidden behind compute), per FSDP unit (``communication.py``). The advice
    follows what was exposed in the flagged units."""

    name = "exposed_communication"
    advice = (
        "Collectives run while the compute queue waits: overlap them with compute "
        "(prefetch, larger units, larger buckets)."
    )
    by_kind: ClassVar[dict[str, str]] = {
        "all_gather backward": (
            "prefetch the backward all-gathers (FSDP2 set_modules_to_backward_prefetch; FSDP1 "
            "backward_prefetch=BACKWARD_PRE), and keep the last units gathered after forward "
            "(reshard_after_forward=False for them: they are the first to run backward)"
        ),
        "all_gather forward": (
            "prefetch the forward all-gathers further ahead (FSDP2 "
            "set_modules_to_forward_prefetch; FSDP1 forward_prefetch=True); the first unit's "
            "all-gather has no compute before it: reshard_after_forward=False on the root"
        ),
        "reduce_scatter": (
            "give the reduce-scatters compute to hide behind: larger units (wrap fewer, "
            "larger modules), the last unit's gradients reduced with the optimizer step"
        ),
        "all_reduce": (
            "start the all-reduces earlier in backward: smaller buckets (DDP bucket_cap_mb) "
            "or, if many small ones are exposed, larger ones"
        ),
    }

    def advice_for_units(self, units: tuple[str, ...], kinds: tuple[str, ...]) -> str:
        """The advice for these flagged units, from the collective kinds exposed in them."""
        parts = [self.by_kind[k] for k in kinds if k in self.by_kind]
        if not parts:
            return self.advice
        where = f" in {', '.join(units)}" if units else ""
        return f"Collectives{where} run while the compute queue waits: " + "; ".join(parts) + "."


class CollectiveWait(Cause):
    """Rule 0: the device's collective-wait slices (``CC wait: ...``, a barrier) cover the gap:
    it waits at a collective for a peer that arrives later. Waiting is not work: the time is
    idle, the peer's (see the cross-rank analysis for who arrived last and why)."""

    name = "collective_wait"
    advice = (
        "The device waits at collectives for a peer that arrives later: see the straggler in "
        "the cross-rank analysis (analyze every rank's trace) and balance the work or fix "
        "what delays it."
    )

    def match(self, gaps: Gaps, spans: HostSpans) -> np.ndarray:
        return gaps.waited() if len(gaps.waits) else np.zeros(len(gaps.start), bool)


class MemoryNearCapacity(Cause):
    """Memory: a device's peak (what its allocator reserved from the device, else what it
    allocated) came within ``margin`` of its capacity (``memory.py``). Precondition: the trace
    gives the device's capacity."""

    name, finding = "memory_near_capacity", "memory"
    margin = 0.10  # issue 28: "within 10% of the capacity"
    advice = (
        "The peak leaves {headroom} of {capacity} free: a larger batch or input will not fit. "
        "Free activations early (activation checkpointing), keep optimizer state and "
        "gradients sharded or in lower precision, or lower the batch size."
    )

    def applies_to(self, capacity_bytes: int | None) -> bool:
        return capacity_bytes is not None and capacity_bytes > 0

    def holds(self, peak_bytes: int, capacity_bytes: int) -> bool:
        return peak_bytes >= (1 - self.margin) * capacity_bytes


class MemoryLeak(Cause):
    """Memory: the least a device held in each step (its floor, the level carried in
    included) rose in every step after the first (which may set up for the others) over at
    least ``min_steps`` steps (``memory.py``), by at least ``min_peak_share`` of the device's
    peak in all: something allocated in each step outlives it (a few bytes a step of
    bookkeeping is no finding). Precondition: that many steps."""

    name, finding = "memory_leak", "memory"
    min_steps = 3
    min_peak_share = 0.01
    advice = (
        "Memory held between steps grows by {growth} a step: a tensor made in the step "
        "outlives it (appended to a list, a loss kept with its graph: use loss.item() or "
        ".detach(), clear caches). The allocations live at the peak show where."
    )

    def applies_to(self, n_steps: int) -> bool:
        return n_steps >= self.min_steps

    def rises(self, floors: np.ndarray) -> np.ndarray:
        """The floor's rise from each step to the next, the first step's left out when more
        follow (it may set up for the others)."""
        rises = np.diff(floors)
        return rises[1:] if len(rises) >= 2 else rises

    def holds(self, floors: np.ndarray, peak_bytes: int) -> bool:
        rises = self.rises(floors)
        return bool(
            len(rises) and np.all(rises > 0) and rises.sum() >= self.min_peak_share * peak_bytes
        )


COLLECTIVE_WAIT = CollectiveWait()
DATA_LOADING, CPU_FALLBACK, HOST_SYNC = DataLoading(), CpuFallback(), HostSync()
HOST_BOUND_LAUNCH, PROFILER_OVERHEAD, OTHER = HostBoundLaunch(), ProfilerOverhead(), Other()
SHORT_GAPS = ShortGaps()
EXPOSED_COPIES = ExposedCopies()
EXPOSED_COMMUNICATION = ExposedCommunication()
MEMORY_NEAR_CAPACITY, MEMORY_LEAK = MemoryNearCapacity(), MemoryLeak()

IDLE_RULES: tuple[Cause, ...] = (
    COLLECTIVE_WAIT,
    DATA_LOADING,
    CPU_FALLBACK,
    HOST_SYNC,
    HOST_BOUND_LAUNCH,
    PROFILER_OVERHEAD,
    OTHER,
)
SHORT_RULES: tuple[Cause, ...] = (HOST_BOUND_LAUNCH, SHORT_GAPS)  # gaps under --min-gap
IDLE_CAUSES: tuple[Cause, ...] = (*IDLE_RULES, SHORT_GAPS)
ALL_CAUSES: tuple[str, ...] = tuple(c.name for c in IDLE_CAUSES)  # the idle causes' keys
BUSY_PATTERNS: tuple[Cause, ...] = (EXPOSED_COPIES, EXPOSED_COMMUNICATION)
MEMORY_PATTERNS: tuple[Cause, ...] = (MEMORY_NEAR_CAPACITY, MEMORY_LEAK)
_BY_NAME = {c.name: c for c in (*IDLE_CAUSES, *BUSY_PATTERNS, *MEMORY_PATTERNS)}


def cause(name: str) -> Cause:
    return _BY_NAME[name]


def classify(gaps: Gaps, spans: HostSpans, min_gap_ns: int) -> np.ndarray:
    """Index into ALL_CAUSES per gap: for a gap whose idle time is under ``min_gap_ns``, the
    first of SHORT_RULES that holds; for the others, the first of IDLE_RULES."""
    short = gaps.idle_ns < min_gap_ns
    out = np.full(len(gaps.start), -1, dtype=np.int64)
    for rules, among in ((IDLE_RULES, ~short), (SHORT_RULES, short)):
        undecided = among.copy()
        for rule in rules:
            if not undecided.any():
                break
            if rule.applies(spans):
                take = undecided & rule.match(gaps, spans)
                out[take] = ALL_CAUSES.index(rule.name)
                undecided &= ~take
    return out
