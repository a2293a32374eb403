"""Findings ranked by recoverable time: what to fix first, and how much it wins::

    f = ctx.result(findings)
    f.findings[0].kind, f.findings[0].recoverable_ns_per_step, f.findings[0].suggestion
    f.fallbacks                          # CPU-fallback ops grouped by op and input signature

Recoverable time, per kind (per step = total / number of steps; % = of the mean step wall time):
- ``cpu_fallback`` (one finding per op and input signature, ``fallbacks.py``; inferred on real
  hardware by ``fallback_inference.py``): the idle time of the device's ``cpu_fallback`` gaps
  its calls cover most of (each whole gap to one group) plus the time of the group's copies,
  minus the op's native device time when the trace lets us model it (``flops`` / ``bytes`` args
  against the ``deviceProperties`` peak of its dtype; unknown: 0, so the figure is an upper
  bound);
- ``host_sync:<name>`` (``syncs.py``): the ``host_sync`` idle time of the gaps that began in
  that sync;
- ``idle:<cause>`` (the causes whose record says ``finding = "idle"``: collective_wait,
  data_loading, host_bound_launch, other, short_gaps): that cause's idle time (``cpu_fallback``
  and ``host_sync`` idle belong to their groups' findings; profiler overhead is never a
  finding; emulator overhead is discounted from idle time, in no cause);
- ``exposed_communication`` (``communication.py``): the exposed collective time (collective
  queue busy, compute queue not) of the FSDP units it flags, or all of it when it flags none,
  when the device's exposed collective time is at least ``EXPOSED_FINDING_SHARE`` of its
  collective time;
- ``exposed_copies``: time when a device's DMA queue is busy and none of its compute or
  collective queues is (the copy is not hidden behind work), fallback copies left out.

Each finding carries its evidence: the longest occurrences, the host op and, when the trace
recorded stacks, the host op's Python call site (``callsites.py``). Its advice and docs anchor
come from its cause's record (``causes.py``).

Over several devices the worst device counts. No time is counted twice: idle time belongs to
one cause (and cpu_fallback idle only to fallback findings; waiting for a peer at a collective is
idle, never busy), exposed copies are busy time, never idle, and fallback copies are not
exposed copies.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.analysis import causes as C
from neuron_profiler.analysis import selections as sel
from neuron_profiler.analysis._axis import device_axes
from neuron_profiler.analysis._device import COLLECTIVE, COMPUTE, DMA
from neuron_profiler.analysis.callsites import call_sites
from neuron_profiler.analysis.communication import EXPOSED_FINDING_SHARE, communication
from neuron_profiler.analysis.context import AnalysisContext
from neuron_profiler.analysis.fallbacks import FallbackGroup, fallback_copies, fallback_groups
from neuron_profiler.analysis.idle import host_activity, idle_time
from neuron_profiler.analysis.syncs import SyncGroup, sync_groups

__all__ = ["FallbackGroup", "Finding", "Findings", "SyncGroup", "findings"]

EVIDENCE_RANGES = 5


@dataclass(frozen=True)
class Finding:
    """One thing to fix. ``ranges_ns``: the longest occurrences (absolute ns; the report gives
    them in the trace's µs); ``host_op``: what the host ran there; ``docs``: where the rule
    behind it is explained (its cause's anchor)."""

    kind: str
    title: str
    recoverable_ns: int
    recoverable_ns_per_step: int
    recoverable_pct: float
    ranges_ns: tuple[tuple[int, int], ...]
    host_op: str
    suggestion: str
    call_site: str = ""  # the host op's Python call site, "file:line function" ("" unknown)
    docs: str = ""

    @property
    def host_op_news(self) -> str:
        """``host_op`` where the title does not already name it ("" otherwise): what a report
        adds after the title, so a sync's call is not named twice."""
        return "" if self.host_op in self.title else self.host_op


@dataclass(frozen=True)
class Findings:
    findings: tuple[Finding, ...]
    fallbacks: tuple[FallbackGroup, ...]
    syncs: tuple[SyncGroup, ...] = ()


def findings(ctx: AnalysisContext) -> Findings:
    fallback_list = ctx.result(fallback_groups)
    fallback = C.CPU_FALLBACK
    found = [
        _finding(
            ctx,
            fallback,
            f"cpu_fallback:{g.op}",
            f"CPU fallback {g.op} {g.shapes} {g.dtypes} ({_calls(g.calls)}; {g.reason})",
            g.recoverable_ns,
            g.spans_ns,
            g.op,
            fallback.advice.format(op=g.op, reason=g.reason),
            g.call_site,
        )
        for g in fallback_list
    ]
    syncs = ctx.result(sync_groups)
    found += [
        _finding(
            ctx,
            C.HOST_SYNC,
            f"host_sync:{g.name}",
            f"host sync {g.name} ({_calls(g.calls)})",
            g.idle_ns,
            g.spans_ns,
            g.name,
            C.HOST_SYNC.advice_for(ctx.names),
            g.call_site,
        )
        for g in syncs
    ]
    found += _idle_findings(ctx)
    work = ctx.work
    for pattern, worst in ((C.EXPOSED_COPIES, _most_exposed_copies(ctx)),):
        if worst is not None:
            device, x = worst
            found.append(
                _finding(
                    ctx,
                    pattern,
                    pattern.name,
                    f"{pattern.title} ({work.labels[device]})",
                    x.total,
                    _longest_ranges(x),
                    "",
                    pattern.advice_for(ctx.names),
                )
            )
    found += _communication_findings(ctx)
    found.sort(key=lambda f: -f.recoverable_ns)
    return Findings(
        findings=tuple(f for f in found if f.recoverable_ns > 0),
        fallbacks=fallback_list,
        syncs=syncs,
    )


def _communication_findings(ctx: AnalysisContext) -> list[Finding]:
    """One ``exposed_communication`` finding when the device's exposed collective time reaches
    ``EXPOSED_FINDING_SHARE`` of its collective time: the flagged units' exposed time (all of
    it when no unit is flagged), their longest exposed collectives as evidence."""
    comm = ctx.result(communication)
    total = comm.total
    if comm.device is None or total.exposed_ns < EXPOSED_FINDING_SHARE * total.collective_ns:
        return []
    pattern = C.EXPOSED_COMMUNICATION
    flagged = [u for u in comm.units if u.name in comm.flagged]
    exposed = sum(u.exposed_ns for u in flagged) if flagged else total.exposed_ns
    where = f": {', '.join(comm.flagged)}" if comm.flagged else ""
    kinds = comm.exposed_kinds or tuple(k for k, _ in total.exposed_by_kind)
    return [
        _finding(
            ctx,
            pattern,
            pattern.name,
            f"{pattern.title} ({comm.device_label}{where})",
            exposed,
            _longest_ranges(comm.exposed_ranges),
            "",
            pattern.advice_for_units(comm.flagged, kinds),
        )
    ]


def _idle_findings(ctx: AnalysisContext) -> list[Finding]:
    """One finding per idle cause reported as such (``causes``' ``finding == "idle"``); its host
    op and call site are those of the host op covering most of the longest gap."""
    idle = ctx.result(idle_time)
    out, evidence = [], []
    for cause in (c for c in C.IDLE_CAUSES if c.finding == "idle"):
        worst = idle.worst_device(cause.name)
        if worst is None:
            continue
        gaps = idle.gaps_of(cause.name, worst)
        ranges = _longest_ranges(gaps)
        what = "; ".join(host_activity(ctx, *ranges[0], worst)) if ranges else ""
        evidence.append(_covering_row(ctx, *ranges[0], worst) if ranges else -1)
        out.append(
            _finding(
                ctx,
                cause,
                f"idle:{cause.name}",
                f"device idle: {cause.title}",
                gaps.total,
                ranges,
                what,
                cause.advice_for(ctx.names),
            )
        )
    known = [r for r in evidence if r >= 0]
    sites = dict(zip(known, call_sites(ctx.trace, known), strict=True)) if known else {}
    return [replace(f, call_site=sites.get(r, "")) for f, r in zip(out, evidence, strict=True)]


def _covering_row(ctx: AnalysisContext, gs: int, ge: int, device: int) -> int:
    """The host row covering most of [gs, ge) on the device's launching threads (the innermost
    among equals), the one ``idle.host_activity`` names first; -1: none."""
    for hit in sel.covering(ctx.host, gs, ge):
        rows = ctx.host.rows[hit]
        rows = rows[ctx.on_launch_threads(device, rows)]
        if len(rows):
            return int(rows[0])
    return -1


def _finding(
    ctx: AnalysisContext,
    cause: C.Cause,
    kind: str,
    title: str,
    total: int,
    ranges: tuple[tuple[int, int], ...],
    host: str,
    suggestion: str,
    call_site: str = "",
) -> Finding:
    per_step = int(total // ctx.n_steps)
    mean_wall = ctx.mean_step_ns
    return Finding(
        kind=kind,
        title=title,
        recoverable_ns=int(total),
        recoverable_ns_per_step=per_step,
        recoverable_pct=round(100 * per_step / mean_wall, 3) if mean_wall else 0.0,
        ranges_ns=ranges,
        host_op=host,
        suggestion=suggestion,
        call_site=call_site,
        docs=cause.docs,
    )


def _calls(n: int) -> str:
    return f"{n} call{'s' * (n != 1)}"


def _longest_ranges(x: I.Intervals) -> tuple[tuple[int, int], ...]:
    return I.longest(x, EVIDENCE_RANGES)


def _most_exposed_copies(ctx: AnalysisContext) -> tuple[int, I.Intervals] | None:
    """The device whose copies (a fallback's own copies left out) ran longest while it had
    no compute or collective to hide them, inside the steps, and that exposed time (the first
    such device among equals); None when no copy was exposed. Totals for every device at once
    on the device axis, the intervals for that one device."""
    work, skip, window = ctx.work, ctx.result(fallback_copies), ctx.steps.spans
    copies = (work.queue == DMA) & ~skip
    if not copies.any() or len(window) == 0:
        return None
    hiding = ~work.wait & ((work.queue == COMPUTE) | (work.queue == COLLECTIVE))
    lo = min(int(work.start.min()), int(window.start[0]))
    hi = max(int(work.end.max()), int(window.end[-1]))
    best, best_ns = None, 0
    for axis, group in device_axes(work, lo, hi):
        on = group >= 0
        dma, busy = np.flatnonzero(on & copies), np.flatnonzero(on & hiding)
        exposed = I.subtract(axis.union(work, dma, group[dma]), axis.union(work, busy, group[busy]))
        totals = axis.total_per_device(I.intersect(exposed, axis.replicate(window)))
        g = int(np.argmax(totals))
        if totals[g] > best_ns:
            best, best_ns = axis.devices[g], int(totals[g])
    if best is None:
        return None
    on = work.of(best)
    dma = on[copies[on]]
    exposed = I.subtract(
        I.union(work.start[dma], work.end[dma]), ctx.busy(best, (COMPUTE, COLLECTIVE))
    )
    return best, I.intersect(exposed, window)
