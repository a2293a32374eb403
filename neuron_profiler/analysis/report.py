"""``analyze(trace) -> Report``: every analysis of one trace, composed; renderers only format it::

    from neuron_profiler.analysis import analyze
    report = analyze(load_trace("trace.json"), Options(min_gap_ns=50_000))
    report.idle.by_cause_ns, report.breakdown.wall_ns, report.tb_breakdown.rows()

Times are absolute ns; ``to_trace_us`` gives the trace's own µs (what Perfetto and
chrome://tracing show) for evidence ranges.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from neuron_profiler.analysis.breakdown import StepBreakdown, step_breakdown
from neuron_profiler.analysis.communication import NONE as NO_COMMUNICATION
from neuron_profiler.analysis.communication import Communication, communication
from neuron_profiler.analysis.compat.hta import HtaIdle, HtaTemporal, HtaTooLarge, hta_breakdowns
from neuron_profiler.analysis.compat.tb_profiler import TbBreakdown, tb_profiler_breakdown
from neuron_profiler.analysis.context import AnalysisContext, Options
from neuron_profiler.analysis.findings import Findings, findings
from neuron_profiler.analysis.idle import IdleTime, idle_time
from neuron_profiler.analysis.memory import MemoryUsage, memory_usage
from neuron_profiler.analysis.pareto import FallbackPareto, fallback_pareto
from neuron_profiler.analysis.rank_summary import RankSummary, rank_summary
from neuron_profiler.analysis.steps import Steps
from neuron_profiler.analysis.summary import OpKernelSummary, op_kernel_summary
from neuron_profiler.analysis.syncs import ElsewhereSyncs, syncs_elsewhere
from neuron_profiler.analysis.timeline import DeviceTimeline, device_timeline
from neuron_profiler.forked import ForkedCall, usable_cores
from neuron_profiler.heap import TRIM_ROWS, gc_paused, return_freed_heap
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import Trace, file_base_ns

__all__ = ["Options", "Report", "analyze", "summaries_of"]

# traces this large get the compatibility breakdowns, then the op and kernel summary, on a
# second core (``analyze``)
THREADED_ROWS = 200_000
NOTE_NO_STEPS = "no ProfilerStep annotation: the whole trace is analysed as one step"
NOTE_HOST_ONLY = "no device events: host-only report (no device idle time or breakdown)"
NOTE_MODELLED = (
    "emulated device: device timings are modelled by the emulator, not measured "
    f"({V.META_MODELLED})"
)
NOTE_SYNCS_ELSEWHERE = (
    "{calls} host sync call{s} ({names}; {ms:.3f} ms on the host) on threads that launch no "
    "device work: they hold no launch up, so they cost no device idle and are not in the sync "
    "table"
)
NOTE_EMULATOR_OVERHEAD = (
    "emulator overhead: {ms:.3f} ms of device time not busy was the "
    "emulator's own host work (absent on real hardware); discounted from "
    "idle time and from every cause"
)


NO_RANK = "no rank"  # what the reports show for a trace without a distributedInfo rank


def rank_text(rank: int | None) -> str:
    """A trace's rank as the reports' headers show it: ``rank 3``, or ``no rank`` for a trace
    without one (a rank-less trace is not rank 0)."""
    return NO_RANK if rank is None else f"rank {rank}"


@dataclass(frozen=True)
class Report:
    """Everything known about one trace. ``notes``: what the reader must know about the input
    (no steps, no device events, modelled timings). ``load_warnings``: what loading the file
    changed or left out (``Trace.load_warnings``), without the file name. ``fallback_pareto``:
    the CPU-fallback groups as the HTML report's Pareto chart draws them. ``memory``: device
    memory (peaks, live allocations, findings), None when the trace recorded none. ``rank``:
    ``distributedInfo``'s rank, None where the trace has none (not a torch.distributed run):
    never a made-up 0, which a real rank 0 would be mistaken for (``rank_text``)."""

    source: str
    rank: int | None
    base_ns: int
    has_device: bool
    steps: Steps
    breakdown: StepBreakdown
    idle: IdleTime
    hta_temporal: HtaTemporal | None
    hta_idle: HtaIdle | None
    tb_breakdown: TbBreakdown | None
    findings: Findings = field(default_factory=lambda: Findings((), ()))
    summary: OpKernelSummary = field(default_factory=lambda: OpKernelSummary((), ()))
    options: Options = field(default_factory=Options)
    notes: tuple[str, ...] = ()
    load_warnings: tuple[str, ...] = ()
    timeline: DeviceTimeline | None = None
    rank_summary: RankSummary | None = None  # what the cross-rank analysis needs (small)
    fallback_pareto: FallbackPareto = field(default_factory=FallbackPareto)
    communication: Communication = NO_COMMUNICATION
    memory: MemoryUsage | None = None  # None: the trace has no memory events

    def to_trace_us(self, ns: int) -> float:
        """An absolute ns time as the trace file writes it (µs, relative to its base)."""
        return (ns - self.base_ns) / 1e3

    def position(self, ns: int) -> Position:
        """Where an absolute ns time lies for a reader: the step it falls in (the last step
        starting at or before it) and how far into that step, e.g. step "7" +12.3 ms. Before
        the first step: the first step, with a negative offset."""
        starts = self.steps.start_ns
        if len(starts) == 0:
            return Position(step="", offset_ns=int(ns - self.base_ns))
        k = max(int(np.searchsorted(starts, ns, side="right")) - 1, 0)
        return Position(step=self.steps.names[k], offset_ns=int(ns - starts[k]))


@dataclass(frozen=True)
class Position:
    """A time as a reader finds it: ``step`` (its name, "" when the trace has no step) and
    ``offset_ns`` from that step's start (from the trace's base when there is no step)."""

    step: str
    offset_ns: int

    def text(self) -> str:
        """``"step 7 +12.3 ms"``."""
        where = f"step {self.step} " if self.step else ""
        return f"{where}{self.offset_ns / 1e6:+.1f} ms"


# the HTA and tb-profiler breakdowns, and notes on what was left out of them
Compatibility = tuple[HtaTemporal | None, HtaIdle | None, TbBreakdown | None, tuple[str, ...]]


def _compatibility(trace: Trace, options: Options) -> Compatibility:
    """The HTA and tb-profiler breakdowns (they read the trace alone)."""
    hta_temporal = hta_idle = None
    notes: tuple[str, ...] = ()
    if options.hta:
        try:
            hta_temporal, hta_idle = hta_breakdowns(trace)
        except HtaTooLarge as err:
            notes = (f"HTA breakdowns left out: {err}",)
    tb = tb_profiler_breakdown(trace) if options.tb else None
    return hta_temporal, hta_idle, tb, notes


def note_syncs_elsewhere(e: ElsewhereSyncs) -> str:
    """The note counting syncs on threads that launch no device work, with their names."""
    names = ", ".join(f"{name} x{calls}" for name, calls, _ in e.names[:3])
    more = len(e.names) - 3
    return NOTE_SYNCS_ELSEWHERE.format(
        calls=e.calls,
        s="s" * (e.calls != 1),
        names=names + (f", {more} more name{'s' * (more != 1)}" if more > 0 else ""),
        ms=e.host_ns / 1e6,
    )


def _beside(ctx: AnalysisContext) -> tuple[Compatibility, OpKernelSummary]:
    """What a large trace's analysis computes beside the rest: the compatibility breakdowns and
    the op and kernel summary (they need nothing the rest computes but the device work and
    the host rows)."""
    return _compatibility(ctx.trace, ctx.options), ctx.result(op_kernel_summary)


def analyze(trace: Trace, options: Options | None = None) -> Report:
    """Every analysis of ``trace``. A large trace's compatibility breakdowns and op and kernel
    summary (``_beside``) are computed on a second core meanwhile: in a forked child process
    where forking is safe and a second core is there (``forked.py``: their Python work would
    otherwise hold the GIL this thread needs; the meta shape's analysis 0.34 -> 0.29 s), else
    in a second thread (their numpy work runs while the GIL is released)."""
    options = options or Options()
    if len(trace) < THREADED_ROWS:
        with gc_paused():
            ctx = AnalysisContext(trace, options)
            return _analyze(
                ctx, lambda: _compatibility(trace, options), lambda: ctx.result(op_kernel_summary)
            )
    with gc_paused():
        ctx = AnalysisContext(trace, options)
        child = ForkedCall.start(_beside, ctx) if usable_cores() > 1 else None
        report = _in_threads(ctx) if child is None else _beside_child(ctx, child)
    if len(trace) >= TRIM_ROWS:
        return_freed_heap()
    return report


def _beside_child(ctx: AnalysisContext, child: ForkedCall) -> Report:
    """``_analyze``, ``_beside`` from the child (computed here, in turn, if the child failed)."""
    beside = functools.cache(lambda: child.result() or _beside(ctx))
    try:
        return _analyze(ctx, lambda: beside()[0], lambda: beside()[1])
    finally:
        child.close()


def _in_threads(ctx: AnalysisContext) -> Report:
    """``_analyze``, ``_beside`` from a second thread."""
    from concurrent.futures import ThreadPoolExecutor  # (not at startup: small traces)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="compat") as pool:
        compatibility = pool.submit(_compatibility, ctx.trace, ctx.options)
        # the op and kernel summary reads the device work and the host rows (selected here
        # first, as every analysis here needs them) and nothing else: after the compatibility
        # breakdowns it balances the two threads (a 5M-event trace: ~2 s there, ~4 s here)
        ctx.work, ctx.host  # noqa: B018
        summary = pool.submit(ctx.result, op_kernel_summary)
        return _analyze(ctx, compatibility.result, summary.result)


def _analyze(
    ctx: AnalysisContext,
    compatibility: Callable[[], Compatibility],
    summary: Callable[[], OpKernelSummary],
) -> Report:
    """Every analysis of one context; ``compatibility`` gives the HTA and tb-profiler
    breakdowns and ``summary`` the op and kernel summary (computed here, or awaited from the
    thread that computes them), asked for last."""
    trace, options, steps = ctx.trace, ctx.options, ctx.steps
    idle = ctx.result(idle_time)
    notes = (
        (NOTE_NO_STEPS,) * (not steps.from_profiler_steps)
        + (NOTE_HOST_ONLY,) * (len(ctx.work) == 0)
        + (NOTE_MODELLED,) * (trace.metadata.get(V.META_MODELLED) is True)
    )
    if idle.emulator_overhead_ns:
        notes += (NOTE_EMULATOR_OVERHEAD.format(ms=idle.emulator_overhead_ns / 1e6),)
    found = ctx.result(findings)
    elsewhere = ctx.result(syncs_elsewhere)
    if elsewhere.calls:
        notes += (note_syncs_elsewhere(elsewhere),)
    timeline = None if options.timeline_segments is None else ctx.result(device_timeline)
    ranks = ctx.result(rank_summary)
    hta_temporal, hta_idle, tb, compat_notes = compatibility()
    notes += compat_notes
    ops_and_kernels = summary()
    return Report(
        source=trace.source,
        rank=ranks.rank,
        base_ns=file_base_ns(trace.metadata),
        has_device=len(ctx.work) > 0,
        steps=steps,
        breakdown=ctx.result(step_breakdown),
        idle=idle,
        findings=found,
        summary=ops_and_kernels,
        fallback_pareto=fallback_pareto(found.fallbacks),
        hta_temporal=hta_temporal,
        hta_idle=hta_idle,
        tb_breakdown=tb,
        options=options,
        notes=notes,
        load_warnings=trace.load_warnings(),
        timeline=timeline,
        rank_summary=ranks,
        communication=ctx.result(communication),
        memory=ctx.result(memory_usage),
    )


def summaries_of(reports: Iterable[Report]) -> list[RankSummary]:
    """The reports' rank summaries (for ``distributed``), under the reports' own source names
    (a caller may rename a report, e.g. to a path relative to a log directory)."""
    return [
        dataclasses.replace(r.rank_summary, source=r.source)
        for r in reports
        if r.rank_summary is not None
    ]
