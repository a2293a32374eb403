"""``analyze(trace) -> Report``: every analysis of one trace, composed; renderers only format it::

    from neuron_profiler.analysis import analyze
    report = analyze(load_trace("trace.json"), min_gap_ns=50_000)
    report.idle.by_cause_ns, report.breakdown.wall_ns, report.tb_breakdown.rows()

Times are absolute ns; ``to_trace_us`` gives the trace's own µs (what Perfetto and
chrome://tracing show) for evidence ranges.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from neuron_profiler.analysis._device import device_work
from neuron_profiler.analysis.breakdown import StepBreakdown, step_breakdown
from neuron_profiler.analysis.fallback_inference import infer_fallbacks
from neuron_profiler.analysis.findings import Findings, findings
from neuron_profiler.analysis.hta_compat import (
    HtaIdle,
    HtaTemporal,
    hta_breakdowns,
    rank_of,
)
from neuron_profiler.analysis.idle import DEFAULT_MIN_GAP_NS, IdleTime, idle_time
from neuron_profiler.analysis.steps import Steps, find_steps
from neuron_profiler.analysis.summary import OpKernelSummary, op_kernel_summary
from neuron_profiler.analysis.tb_profiler import TbBreakdown, tb_profiler_breakdown
from neuron_profiler.trace.model import Trace, file_base_ns

DEFAULT_TOP = 10
NOTE_NO_STEPS = "no ProfilerStep annotation: the whole trace is analysed as one step"
NOTE_HOST_ONLY = "no device events: host-only report (no device idle time or breakdown)"


@dataclass(frozen=True)
class Options:
    """Args: min_gap_ns: shortest idle gap given a cause; top: longest gaps listed; hta / tb:
    also compute the HTA-compatible and tb-profiler breakdowns."""

    min_gap_ns: int = DEFAULT_MIN_GAP_NS
    top: int = DEFAULT_TOP
    hta: bool = True
    tb: bool = True


@dataclass(frozen=True)
class Report:
    """Everything known about one trace. ``notes``: what the reader must know about the input
    (no steps, no device events)."""

    source: str
    rank: int
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

    def to_trace_us(self, ns: int) -> float:
        """An absolute ns time as the trace file writes it (µs, relative to its base)."""
        return (ns - self.base_ns) / 1e3


def analyze(trace: Trace, options: Options | None = None) -> Report:
    options = options or Options()
    work = device_work(trace)
    steps = find_steps(trace, work)
    hta_temporal, hta_idle = hta_breakdowns(trace) if options.hta else (None, None)
    inferred = infer_fallbacks(trace, work)
    idle = idle_time(trace, work, steps, min_gap_ns=options.min_gap_ns, top=options.top,
                     fallback_spans=(inferred.span_start_ns, inferred.span_end_ns))
    notes = (NOTE_NO_STEPS,) * (not steps.from_profiler_steps) + (NOTE_HOST_ONLY,) * (
        len(work) == 0)
    return Report(
        source=trace.source, rank=rank_of(trace), base_ns=file_base_ns(trace.metadata),
        has_device=len(work) > 0, steps=steps, breakdown=step_breakdown(trace, work, steps),
        idle=idle, findings=findings(trace, work, steps, idle, inferred),
        summary=op_kernel_summary(trace, work),
        hta_temporal=hta_temporal, hta_idle=hta_idle,
        tb_breakdown=tb_profiler_breakdown(trace) if options.tb else None,
        options=options, notes=notes)
