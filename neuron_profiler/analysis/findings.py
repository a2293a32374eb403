"""Findings ranked by recoverable time: what to fix first, and how much it wins::

    f = findings(trace, work, steps, idle)
    f.findings[0].kind, f.findings[0].recoverable_ns_per_step, f.findings[0].suggestion
    f.fallbacks                          # CPU-fallback ops grouped by op and input signature

Recoverable time, per kind (per step = total / number of steps; % = of the mean step wall time):
- ``cpu_fallback`` (one finding per op and input signature): the idle time of the device's
  ``cpu_fallback`` gaps inside this group's fallback spans plus the time of the group's copies
  (DMA rows with the fallback's External id), minus the op's native device time when the trace
  lets us model it (``flops`` / ``bytes`` args against ``deviceProperties`` peaks; unknown: 0,
  so the figure is an upper bound);
- ``idle:<cause>`` (data_loading, host_sync, host_bound_launch, other, short_gaps): that cause's
  idle time (the ``cpu_fallback`` cause belongs to the fallback findings; profiler overhead is
  never a finding; emulator overhead is discounted from idle time, in no cause);
- ``exposed_copies``: time when a device's DMA queue is busy and none of its compute or
  collective queues is (the copy is not hidden behind work), fallback copies left out;
- ``collective_wait``: time in collective-wait (barrier) slices while no compute runs.

Over several devices the worst device counts. No time is counted twice: idle time belongs to
one cause (and cpu_fallback idle only to fallback findings), exposed copies and collective waits
are busy time, never idle, and fallback copies are not exposed copies.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.analysis._args import arg_values, as_float
from neuron_profiler.analysis._device import COLLECTIVE, COMPUTE, DMA, DeviceWork, device_peaks
from neuron_profiler.analysis.idle import IdleTime, host_activity, host_rows, sync_mask
from neuron_profiler.analysis.steps import Steps
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import Trace

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
class FallbackGroup:
    """CPU-fallback calls of one op with one input signature. ``native_ns``: modelled device
    time, None when the trace has no flops/bytes or no peaks for it."""

    op: str
    shapes: str
    dtypes: str
    reason: str
    calls: int
    host_ns: int
    d2h_count: int
    d2h_bytes: int
    d2h_ns: int
    h2d_count: int
    h2d_bytes: int
    h2d_ns: int
    idle_ns: int
    native_ns: int | None
    recoverable_ns: int
    spans_ns: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class SyncGroup:
    """Host syncs of one name (the outermost sync around each gap: ``aten::item`` rather than
    the ``cudaStreamSynchronize`` inside it). ``idle_ns``: the device idle of the ``host_sync``
    gaps that began inside them (worst device)."""

    name: str
    calls: int
    host_ns: int
    idle_ns: int
    spans_ns: tuple[tuple[int, int], ...]


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


@dataclass(frozen=True)
class Findings:
    findings: tuple[Finding, ...]
    fallbacks: tuple[FallbackGroup, ...]
    syncs: tuple[SyncGroup, ...] = ()


def findings(trace: Trace, work: DeviceWork, steps: Steps, idle: IdleTime) -> Findings:
    n_steps = max(len(steps), 1)
    mean_wall = float(steps.wall_ns.mean()) if len(steps) else 0.0
    fallback_groups = fallbacks(trace, work, idle)
    found = [_finding(f"cpu_fallback:{g.op}", f"CPU fallback {g.op} {g.shapes} {g.dtypes} "
                      f"({g.calls} calls; {g.reason})", g.recoverable_ns, g.spans_ns, g.op,
                      f"{g.op} runs on the host ({g.reason}): replace it by a supported op, "
                      "move it out of the step, or keep its inputs on the host.",
                      n_steps, mean_wall) for g in fallback_groups]
    syncs = sync_groups(trace, idle)
    found += [_finding(f"host_sync:{g.name}", f"host sync {g.name} ({g.calls} calls)", g.idle_ns,
                       g.spans_ns, g.name, SUGGESTIONS["host_sync"], n_steps, mean_wall)
              for g in syncs]
    host = host_rows(trace)
    for cause in IDLE_FINDINGS:
        worst = _worst_device(idle, cause)
        if worst is None:
            continue
        gaps = idle.gaps_of(cause, worst)
        ranges = _longest_ranges(gaps)
        what = "; ".join(host_activity(trace, host, *ranges[0])) if ranges else ""
        found.append(_finding(f"idle:{cause}", f"device idle: {cause.replace('_', ' ')}",
                              gaps.total, ranges, what, SUGGESTIONS[f"idle:{cause}"], n_steps,
                              mean_wall))
    fallback_copies = _fallback_copy_rows(trace, work)
    for kind, sets in (("exposed_copies", _exposed_copies(work, steps, fallback_copies)),
                       ("collective_wait", _collective_waits(trace, work, steps))):
        if sets:
            device, x = max(sets.items(), key=lambda kv: kv[1].total)
            if x.total:
                found.append(_finding(kind, f"{kind.replace('_', ' ')} ({work.labels[device]})",
                                      x.total, _longest_ranges(x), "", SUGGESTIONS[kind],
                                      n_steps, mean_wall))
    found.sort(key=lambda f: -f.recoverable_ns)
    return Findings(findings=tuple(f for f in found if f.recoverable_ns > 0),
                    fallbacks=fallback_groups, syncs=syncs)


def sync_groups(trace: Trace, idle: IdleTime) -> tuple[SyncGroup, ...]:
    """Each host_sync gap (worst device) goes to the outermost sync containing its start; the
    groups are by that sync's name."""
    device = _worst_device(idle, "host_sync")
    rows = np.flatnonzero(sync_mask(trace))
    if device is None or len(rows) == 0:
        return ()
    start = trace.col(S.TS_NS)[rows]
    end = start + trace.col(S.DUR_NS)[rows]
    order = np.lexsort((-end, start))  # outermost first among equal starts
    rows, start, end = rows[order], start[order], end[order]
    k = idle.gap_index("host_sync", device)  # whole gaps: the start is where the sync was
    gap_start, gap_end, gap_idle = idle.gap_start_ns[k], idle.gap_end_ns[k], idle.gap_idle_ns[k]
    owner = np.full(len(k), -1, np.int64)
    for j, gs in enumerate(gap_start.tolist()):  # one per sync gap (a few per step)
        hit = np.flatnonzero((start[: np.searchsorted(start, gs, side="right")] <= gs)
                             & (end[: np.searchsorted(start, gs, side="right")] >= gs))
        owner[j] = hit[0] if len(hit) else -1
    name_id = trace.col(S.NAME_ID)[rows]
    out = []
    for nid in np.unique(name_id).tolist():
        mine = name_id == nid
        got = np.isin(owner, np.flatnonzero(mine))
        idle_ns = int(gap_idle[got].sum())  # emulator overhead left out
        if idle_ns == 0:
            continue
        spans = I.Intervals(gap_start[got], gap_end[got])
        out.append(SyncGroup(name=trace.strings[nid], calls=int(mine.sum()),
                             host_ns=int((end - start)[mine].sum()), idle_ns=idle_ns,
                             spans_ns=_longest_ranges(spans)))
    return tuple(sorted(out, key=lambda g: -g.idle_ns))


def _finding(kind: str, title: str, total: int, ranges: tuple[tuple[int, int], ...], host: str,
             suggestion: str, n_steps: int, mean_wall: float) -> Finding:
    per_step = int(total // n_steps)
    return Finding(kind=kind, title=title, recoverable_ns=int(total),
                   recoverable_ns_per_step=per_step,
                   recoverable_pct=round(100 * per_step / mean_wall, 3) if mean_wall else 0.0,
                   ranges_ns=ranges, host_op=host, suggestion=suggestion)


def _worst_device(idle: IdleTime, cause: str) -> int | None:
    best = max(idle.devices, key=lambda d: d.by_cause_ns[cause], default=None)
    return best.device if best is not None and best.by_cause_ns[cause] > 0 else None


def _longest_ranges(x: I.Intervals) -> tuple[tuple[int, int], ...]:
    pick = np.argsort(x.start - x.end, kind="stable")[:EVIDENCE_RANGES]
    return tuple((int(x.start[i]), int(x.end[i])) for i in pick.tolist())


def _in_steps(x: I.Intervals, steps: Steps) -> I.Intervals:
    return I.intersect(x, steps.spans)


def _fallback_copy_rows(trace: Trace, work: DeviceWork) -> np.ndarray:
    """Device rows that are a fallback's copies (their External id is a fallback's)."""
    ext = trace.col(S.EXTERNAL_ID)
    fb_ext = ext[trace.select(kind=S.EventKind.FALLBACK)]
    fb_ext = fb_ext[fb_ext > 0]
    return (work.queue == DMA) & np.isin(ext[work.rows], fb_ext)


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


def fallbacks(trace: Trace, work: DeviceWork, idle: IdleTime) -> tuple[FallbackGroup, ...]:
    """CPU-fallback rows grouped by (op, input shapes, input dtypes)."""
    rows = trace.select(kind=S.EventKind.FALLBACK, ph=S.Phase.COMPLETE)
    if len(rows) == 0:
        return ()
    keys = (V.ARG_OP, V.ARG_SHAPES, V.ARG_DTYPES, V.ARG_FALLBACK_REASON, V.ARG_FLOPS,
            V.ARG_BYTES)
    a = arg_values(trace, rows, keys)
    ts, dur, ext = (trace.col(c)[rows] for c in (S.TS_NS, S.DUR_NS, S.EXTERNAL_ID))
    groups: dict[tuple[str, str, str], list[int]] = {}
    for i in range(len(rows)):  # one entry per fallback call (a few hundred at most)
        op = a[V.ARG_OP][i] or trace.name(int(rows[i]))[len(V.FALLBACK_PREFIX):]
        key = (str(op), _text(a[V.ARG_SHAPES][i]), _text(a[V.ARG_DTYPES][i]))
        groups.setdefault(key, []).append(i)
    copies = _copies(trace, work)
    fallback_idle = {d.device: idle.gaps_of("cpu_fallback", d.device) for d in idle.devices}
    peaks = device_peaks(trace)
    out = []
    for (op, shapes, dtypes), members in groups.items():
        m = np.asarray(members)
        spans = I.union(ts[m], ts[m] + dur[m])
        idle_ns = max((I.intersect(g, spans).total for g in fallback_idle.values()), default=0)
        d2h, h2d = (copies.get(d, {}) for d in ("d2h", "h2d"))
        mine = set(ext[m].tolist())
        c_d2h = [v for k, v in d2h.items() if k in mine]
        c_h2d = [v for k, v in h2d.items() if k in mine]
        native = _native_ns(as_float(a[V.ARG_FLOPS]), as_float(a[V.ARG_BYTES]), m, peaks)
        measured = idle_ns + sum(c[2] for c in c_d2h + c_h2d)
        out.append(FallbackGroup(
            op=op, shapes=shapes, dtypes=dtypes,
            reason=str(a[V.ARG_FALLBACK_REASON][members[0]] or ""), calls=len(members),
            host_ns=int(dur[m].sum()), d2h_count=sum(c[0] for c in c_d2h),
            d2h_bytes=sum(c[1] for c in c_d2h), d2h_ns=sum(c[2] for c in c_d2h),
            h2d_count=sum(c[0] for c in c_h2d), h2d_bytes=sum(c[1] for c in c_h2d),
            h2d_ns=sum(c[2] for c in c_h2d), idle_ns=idle_ns, native_ns=native,
            recoverable_ns=max(0, measured - (native or 0)), spans_ns=_longest_ranges(spans)))
    return tuple(sorted(out, key=lambda g: -g.recoverable_ns))


def _text(value: object) -> str:
    return "" if value is None else str(value).replace(" ", "")


def _copies(trace: Trace, work: DeviceWork) -> dict[str, dict[int, tuple[int, int, int]]]:
    """Per direction, per External id: (count, bytes, ns) of its copies."""
    dma = work.rows[work.queue == DMA]
    if len(dma) == 0:
        return {}
    a = arg_values(trace, dma, (V.ARG_DIRECTION, V.ARG_BYTES))
    nbytes = np.nan_to_num(as_float(a[V.ARG_BYTES])).astype(np.int64)
    ext = trace.col(S.EXTERNAL_ID)[dma]
    dur = trace.col(S.DUR_NS)[dma]
    out: dict[str, dict[int, tuple[int, int, int]]] = {"d2h": {}, "h2d": {}}
    for i, e in enumerate(ext.tolist()):
        given = a[V.ARG_DIRECTION][i]
        direction = given if isinstance(given, str) else _direction(trace.name(int(dma[i])))
        if direction not in out or e <= 0:
            continue
        n, b, t = out[direction].get(e, (0, 0, 0))
        out[direction][e] = (n + 1, b + int(nbytes[i]), t + int(dur[i]))
    return out


def _direction(name: str) -> str:
    return "d2h" if "DtoH" in name else "h2d" if "HtoD" in name else ""


def _native_ns(flops: np.ndarray, nbytes: np.ndarray, members: np.ndarray,
               peaks: tuple[float, float] | None) -> int | None:
    """Roofline time of the calls on the device: max(flops / peak, bytes / bandwidth)."""
    if peaks is None:
        return None
    f, b = flops[members], nbytes[members]
    if np.isnan(f).any() or np.isnan(b).any():
        return None
    flop_per_ns, bytes_per_ns = peaks[0] * 1e3, peaks[1]  # TFLOPS -> FLOP/ns; GB/s = B/ns
    return int(sum(max(float(x) / flop_per_ns, float(y) / bytes_per_ns)
                   for x, y in zip(f, b, strict=True)))
