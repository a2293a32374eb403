"""Findings ranked by recoverable time: what to fix first, and how much it wins::

    f = findings(trace, work, steps, idle)
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
- ``idle:<cause>`` (data_loading, host_sync, host_bound_launch, other, short_gaps): that cause's
  idle time (the ``cpu_fallback`` cause belongs to the fallback findings; profiler overhead is
  never a finding; emulator overhead is discounted from idle time, in no cause);
- ``exposed_copies``: time when a device's DMA queue is busy and none of its compute or
  collective queues is (the copy is not hidden behind work), fallback copies left out;
- ``collective_wait``: time in collective-wait (barrier) slices while no compute runs.

Each finding carries its evidence: the longest occurrences, the host op and, when the trace
recorded stacks, the host op's Python call site (``callsites.py``).

Over several devices the worst device counts. No time is counted twice: idle time belongs to
one cause (and cpu_fallback idle only to fallback findings), exposed copies and collective waits
are busy time, never idle, and fallback copies are not exposed copies.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.analysis._device import COLLECTIVE, COMPUTE, DMA, DeviceWork
from neuron_profiler.analysis.callsites import call_sites
from neuron_profiler.analysis.fallback_inference import InferredFallbacks, infer_fallbacks
from neuron_profiler.analysis.fallbacks import FallbackGroup, fallback_copies, fallback_groups
from neuron_profiler.analysis.idle import HOST_KINDS, IdleTime, host_activity, host_rows
from neuron_profiler.analysis.steps import Steps
from neuron_profiler.analysis.syncs import SyncGroup, sync_groups
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import Trace

__all__ = ["FallbackGroup", "Finding", "Findings", "SyncGroup", "findings"]

EVIDENCE_RANGES = 5
IDLE_FINDINGS = ("data_loading", "host_bound_launch", "other", "short_gaps")
SUGGESTIONS = {
    "idle:data_loading": "The device waits for input: use DataLoader(num_workers>0, "
                         "pin_memory=True, persistent_workers=True) or prefetch the next batch.",
    "host_sync": "The host waits for the device here, then the queue is empty: drop it from "
                 "the step (log every N steps, keep values on the device, non_blocking copies).",
    "idle:host_bound_launch": "The host launches work too slowly: fewer, larger ops per step "
                              "(torch.compile, fused ops, larger batches).",
    "idle:other": "Idle time with no host cause found: look at the longest gaps in the trace.",
    "idle:short_gaps": "Many gaps shorter than --min-gap between launches: fuse small ops.",
    "exposed_copies": "Copies run while the compute queue waits: overlap them with compute "
                      "(non_blocking=True with pinned memory, prefetch earlier).",
    "collective_wait": "Cores wait at collectives for their peers: balance the work across "
                       "ranks and look for a straggler.",
}


@dataclass(frozen=True)
class Finding:
    """One thing to fix. ``ranges_ns``: the longest occurrences (absolute ns; the report gives
    them in the trace's µs); ``host_op``: what the host ran there."""

    kind: str
    title: str
    recoverable_ns: int
    recoverable_ns_per_step: int
    recoverable_pct: float
    ranges_ns: tuple[tuple[int, int], ...]
    host_op: str
    suggestion: str
    call_site: str = ""  # the host op's Python call site, "file:line function" ("" unknown)


@dataclass(frozen=True)
class Findings:
    findings: tuple[Finding, ...]
    fallbacks: tuple[FallbackGroup, ...]
    syncs: tuple[SyncGroup, ...] = ()


def findings(trace: Trace, work: DeviceWork, steps: Steps, idle: IdleTime,
             inferred: InferredFallbacks | None = None) -> Findings:
    """``inferred``: the fallbacks inferred for this trace (computed here when not given)."""
    n_steps = max(len(steps), 1)
    mean_wall = float(steps.wall_ns.mean()) if len(steps) else 0.0
    inferred = infer_fallbacks(trace, work) if inferred is None else inferred
    fallback_list = fallback_groups(trace, work, idle, inferred)
    found = [_finding(f"cpu_fallback:{g.op}", f"CPU fallback {g.op} {g.shapes} {g.dtypes} "
                      f"({g.calls} calls; {g.reason})", g.recoverable_ns, g.spans_ns, g.op,
                      f"{g.op} runs on the host ({g.reason}): replace it by a supported op, "
                      "move it out of the step, or keep its inputs on the host.",
                      n_steps, mean_wall, g.call_site) for g in fallback_list]
    skip = fallback_copies(trace, work, inferred)
    syncs = sync_groups(trace, work, idle, skip)
    found += [_finding(f"host_sync:{g.name}", f"host sync {g.name} ({g.calls} calls)", g.idle_ns,
                       g.spans_ns, g.name, SUGGESTIONS["host_sync"], n_steps, mean_wall,
                       g.call_site) for g in syncs]
    found += _idle_findings(trace, idle, n_steps, mean_wall)
    for kind, sets in (("exposed_copies", _exposed_copies(work, steps, skip)),
                       ("collective_wait", _collective_waits(trace, work, steps))):
        if sets:
            device, x = max(sets.items(), key=lambda kv: kv[1].total)
            if x.total:
                found.append(_finding(kind, f"{kind.replace('_', ' ')} ({work.labels[device]})",
                                      x.total, _longest_ranges(x), "", SUGGESTIONS[kind],
                                      n_steps, mean_wall))
    found.sort(key=lambda f: -f.recoverable_ns)
    return Findings(findings=tuple(f for f in found if f.recoverable_ns > 0),
                    fallbacks=fallback_list, syncs=syncs)


def _idle_findings(trace: Trace, idle: IdleTime, n_steps: int, mean_wall: float
                   ) -> list[Finding]:
    """One finding per idle cause left to the idle table; its host op and call site are those
    of the host op covering most of the longest gap."""
    host = host_rows(trace)
    rows = _host_op_rows(trace)
    out, evidence = [], []
    for cause in IDLE_FINDINGS:
        worst = _worst_device(idle, cause)
        if worst is None:
            continue
        gaps = idle.gaps_of(cause, worst)
        ranges = _longest_ranges(gaps)
        what = "; ".join(host_activity(trace, host, *ranges[0])) if ranges else ""
        evidence.append(_covering_row(trace, rows, *ranges[0]) if ranges else -1)
        out.append(_finding(f"idle:{cause}", f"device idle: {cause.replace('_', ' ')}",
                            gaps.total, ranges, what, SUGGESTIONS[f"idle:{cause}"], n_steps,
                            mean_wall))
    known = [r for r in evidence if r >= 0]
    sites = dict(zip(known, call_sites(trace, known), strict=True)) if known else {}
    return [replace(f, call_site=sites.get(r, "")) for f, r in zip(out, evidence, strict=True)]


def _host_op_rows(trace: Trace) -> np.ndarray:
    """Host rows that can explain a gap (``idle.host_rows``' selection, as row indices)."""
    step_ids = [i for i, s in enumerate(trace.strings) if s.startswith(V.PROFILER_STEP_PREFIX)]
    return np.flatnonzero(trace.mask(kind=list(HOST_KINDS), ph=S.Phase.COMPLETE)
                          & ~np.isin(trace.col(S.NAME_ID), step_ids))


def _covering_row(trace: Trace, rows: np.ndarray, gs: int, ge: int) -> int:
    """The row covering most of [gs, ge) (the innermost among equals), as
    ``idle.host_activity`` names it first; -1: none."""
    start = trace.col(S.TS_NS)[rows]
    end = start + trace.col(S.DUR_NS)[rows]
    cover = np.minimum(end, ge) - np.maximum(start, gs)
    hit = np.flatnonzero(cover > 0)
    if len(hit) == 0:
        return -1
    return int(rows[hit[np.lexsort((end[hit] - start[hit], -cover[hit]))[0]]])


def _finding(kind: str, title: str, total: int, ranges: tuple[tuple[int, int], ...], host: str,
             suggestion: str, n_steps: int, mean_wall: float, call_site: str = "") -> Finding:
    per_step = int(total // n_steps)
    return Finding(kind=kind, title=title, recoverable_ns=int(total),
                   recoverable_ns_per_step=per_step,
                   recoverable_pct=round(100 * per_step / mean_wall, 3) if mean_wall else 0.0,
                   ranges_ns=ranges, host_op=host, suggestion=suggestion, call_site=call_site)


def _worst_device(idle: IdleTime, cause: str) -> int | None:
    best = max(idle.devices, key=lambda d: d.by_cause_ns[cause], default=None)
    return best.device if best is not None and best.by_cause_ns[cause] > 0 else None


def _longest_ranges(x: I.Intervals) -> tuple[tuple[int, int], ...]:
    return I.longest(x, EVIDENCE_RANGES)


def _in_steps(x: I.Intervals, steps: Steps) -> I.Intervals:
    return I.intersect(x, steps.spans)


def _exposed_copies(work: DeviceWork, steps: Steps, skip: np.ndarray) -> dict[int, I.Intervals]:
    out = {}
    for device in work.devices:
        on = work.device == device
        dma = on & (work.queue == DMA) & ~skip
        busy = on & (work.queue != DMA)
        out[device] = _in_steps(I.subtract(I.union(work.start[dma], work.end[dma]),
                                           I.union(work.start[busy], work.end[busy])), steps)
    return out


def _collective_waits(trace: Trace, work: DeviceWork, steps: Steps) -> dict[int, I.Intervals]:
    # "CC wait: barrier" (a real capture) or "CC wait: <collective>" (the emulator)
    wait_ids = [i for i, s in enumerate(trace.strings) if s.startswith(V.COLLECTIVE_WAIT_PREFIX)]
    is_wait = (work.queue == COLLECTIVE) & np.isin(trace.col(S.NAME_ID)[work.rows], wait_ids)
    if not is_wait.any():
        return {}
    out = {}
    for device in work.devices:
        on = work.device == device
        w, c = on & is_wait, on & (work.queue == COMPUTE)
        out[device] = _in_steps(I.subtract(I.union(work.start[w], work.end[w]),
                                           I.union(work.start[c], work.end[c])), steps)
    return out
