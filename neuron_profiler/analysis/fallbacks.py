"""CPU-fallback calls grouped by op and input signature, with what they cost and what running
them on the device would save::

    groups = fallback_groups(ctx)
    g = groups[0]; g.op, g.calls, g.d2h_count, g.idle_ns, g.native_ns, g.recoverable_ns

A call is a fallback row (the emulator's ``CPU fallback: <op>``: its copies are the DMA rows with
its ``External id``) or a host op inferred to be one (``fallback_inference``: its copies are the
pattern's; ``inferred`` is set on its group). Per group:

- ``idle_ns``: the ``cpu_fallback`` idle time of the worst device, each whole gap (its counted
  idle) given to the group whose calls cover most of it, so the groups add up to the cause;
- measured cost = ``idle_ns`` + the time of its D2H and H2D copies;
- ``native_ns``: the op's modelled device time, Σ over calls of max(flops / peak FLOP/s,
  bytes / HBM bandwidth), from the row's ``flops`` and ``bytes`` args and the peak of the row's
  ``dtype`` on its ``engine`` in ``deviceProperties`` (``peak_tflops``; a dtype the table lacks,
  integers and float64 among them, at that engine's float32 figure, as the emulator models them;
  without a table, ``peak_bf16_tflops`` for bfloat16/float16 or no dtype, else
  ``peak_fp32_tflops``). An inferred call (real hardware: no such args, no peaks) is priced by
  the cost model instead, as the projection prices it (``costmodel.ops`` from its recorded
  shapes, on the profile of the chip the trace names, ``peaks.device_chip``). None when a call
  has neither;
- ``recoverable_ns`` = max(0, measured - native) (native unknown: 0, an upper bound).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.analysis._args import arg_values, as_float
from neuron_profiler.analysis._copies import D2H, H2D, CopyInfo
from neuron_profiler.analysis._device import DMA, DeviceWork
from neuron_profiler.analysis.callsites import call_sites
from neuron_profiler.analysis.context import AnalysisContext
from neuron_profiler.analysis.fallback_inference import (
    REASON,
    InferredFallbacks,
    fallback_calls,
    infer_fallbacks,
)
from neuron_profiler.analysis.idle import IdleTime, idle_time
from neuron_profiler.analysis.peaks import device_chip, native_time, profile_native_time
from neuron_profiler.costmodel.ops import op_cost
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import Trace

EVIDENCE_RANGES = 5


@dataclass(frozen=True)
class FallbackGroup:
    """CPU-fallback calls of one op with one input signature. ``native_ns``: modelled device
    time, None when the trace has no flops/bytes or no peaks for it. ``inferred``: the calls
    were inferred (no fallback rows). ``call_site``: the Python call site of its longest call
    ("" without stacks)."""

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
    inferred: bool = False
    call_site: str = ""


@dataclass(frozen=True)
class _Calls:
    """One entry per call: the host row, its span, its copies (indices into the work) and its
    native time (NaN: unknown)."""

    key: list[tuple[str, str, str, bool]]
    reason: list[str]
    row: np.ndarray
    host_ns: np.ndarray
    start: np.ndarray
    end: np.ndarray
    copies: list[np.ndarray]
    native_ns: np.ndarray


def fallback_groups(ctx: AnalysisContext) -> tuple[FallbackGroup, ...]:
    trace, work, rows = ctx.trace, ctx.work, ctx.fallback_rows
    inferred = ctx.result(infer_fallbacks)
    if len(rows) == 0 and len(inferred) == 0:
        return ()
    idle, copies = ctx.result(idle_time), ctx.copies
    calls = _merge(_fallback_rows(ctx, rows), _inferred_calls(trace, inferred))
    whole = ctx.result(fallback_calls)  # the same calls in the same order, as whole ops
    calls = replace(calls, start=whole.start, end=whole.end)
    members: dict[tuple[str, str, str, bool], list[int]] = {}
    for i, key in enumerate(calls.key):
        members.setdefault(key, []).append(i)
    spans = [I.union(calls.start[m], calls.end[m]) for m in map(np.asarray, members.values())]
    on_host = [
        I.union(whole.host_start[m], whole.host_end[m]) for m in map(np.asarray, members.values())
    ]
    owned = _idle_per_group(idle, spans, on_host)
    groups = [
        _group(key, np.asarray(m), calls, copies, work, span, int(owned[g]))
        for g, ((key, m), span) in enumerate(zip(members.items(), spans, strict=True))
    ]
    longest = [
        int(calls.row[m[int(np.argmax(calls.end[m] - calls.start[m]))]])
        for m in map(np.asarray, members.values())
    ]
    groups = [
        replace(g, call_site=site)
        for g, site in zip(groups, call_sites(trace, longest), strict=True)
    ]
    return tuple(sorted(groups, key=lambda g: -g.recoverable_ns))


def fallback_copies(ctx: AnalysisContext) -> np.ndarray:
    """Mask over the device work: the copies of fallback calls (rows' External ids, inferred
    calls' patterns)."""
    work = ctx.work
    ext = ctx.trace.col(S.EXTERNAL_ID)
    fb_ext = ext[ctx.fallback_rows]
    out = (work.queue == DMA) & np.isin(ext[work.rows], fb_ext[fb_ext > 0])
    out[ctx.result(infer_fallbacks).copies()] = True
    return out


def _idle_per_group(
    idle: IdleTime, spans: list[I.Intervals], on_host: list[I.Intervals]
) -> np.ndarray:
    """Counted idle of the worst device's cpu_fallback gaps per group: each whole gap to the
    group whose call it began in, else to the group covering most of it (the fallback rule
    made it a fallback gap, so one of the two holds)."""
    out = np.zeros(len(spans), np.int64)
    worst = idle.worst_device("cpu_fallback")
    if worst is None or not spans:
        return out
    k = idle.gap_index("cpu_fallback", worst)
    gs, ge = idle.gap_start_ns[k], idle.gap_end_ns[k]
    cover = np.stack([I.overlap_per_window(x, gs, ge) for x in spans])  # groups x gaps
    began = np.stack([I.any_overlap(x.start, x.end, gs - 1, gs + 1) for x in on_host])
    owner = np.where(began.any(axis=0), began.argmax(axis=0), cover.argmax(axis=0))
    hit = began.any(axis=0) | (cover.max(axis=0) > 0)
    return np.bincount(owner[hit], weights=idle.gap_idle_ns[k][hit], minlength=len(spans)).astype(
        np.int64
    )


def _group(
    key: tuple[str, str, str, bool],
    m: np.ndarray,
    calls: _Calls,
    copies: CopyInfo,
    work: DeviceWork,
    spans: I.Intervals,
    idle_ns: int,
) -> FallbackGroup:
    op, shapes, dtypes, inferred = key
    mine = np.unique(np.concatenate([calls.copies[i] for i in m.tolist()])).astype(np.int64)
    figures = {}
    for name, code in (("d2h", D2H), ("h2d", H2D)):
        at = mine[copies.direction[mine] == code]
        figures[name] = (
            len(at),
            int(copies.nbytes[at].sum()),
            int((work.end[at] - work.start[at]).sum()),
        )
    native = calls.native_ns[m]
    native_ns = None if np.isnan(native).any() else int(native.sum())
    measured = idle_ns + figures["d2h"][2] + figures["h2d"][2]
    return FallbackGroup(
        op=op,
        shapes=shapes,
        dtypes=dtypes,
        reason=calls.reason[int(m[0])],
        calls=len(m),
        host_ns=int(calls.host_ns[m].sum()),
        d2h_count=figures["d2h"][0],
        d2h_bytes=figures["d2h"][1],
        d2h_ns=figures["d2h"][2],
        h2d_count=figures["h2d"][0],
        h2d_bytes=figures["h2d"][1],
        h2d_ns=figures["h2d"][2],
        idle_ns=idle_ns,
        native_ns=native_ns,
        recoverable_ns=max(0, measured - (native_ns or 0)),
        spans_ns=I.longest(spans, EVIDENCE_RANGES),
        inferred=inferred,
    )


def _fallback_rows(ctx: AnalysisContext, rows: np.ndarray) -> _Calls:
    """The fallback rows as calls; their copies: the DMA rows with their External id."""
    trace, work = ctx.trace, ctx.work
    keys = (
        V.ARG_OP,
        V.ARG_SHAPES,
        V.ARG_DTYPES,
        V.ARG_FALLBACK_REASON,
        V.ARG_FLOPS,
        V.ARG_BYTES,
        V.ARG_DTYPE,
        V.ARG_ENGINE,
    )
    a = arg_values(trace, rows, keys)
    ts, dur, ext = (trace.col(c)[rows] for c in (S.TS_NS, S.DUR_NS, S.EXTERNAL_ID))
    dma = np.flatnonzero(work.queue == DMA)
    dma_ext = trace.col(S.EXTERNAL_ID)[work.rows[dma]]
    by_ext = np.argsort(dma_ext, kind="stable")  # each call's copies: one slice, in dma order
    lo = np.searchsorted(dma_ext[by_ext], ext, side="left")
    hi = np.searchsorted(dma_ext[by_ext], ext, side="right")
    props = ctx.peaks
    flops, nbytes = as_float(a[V.ARG_FLOPS]), as_float(a[V.ARG_BYTES])
    key, reason, copies, native = [], [], [], []
    for i in range(len(rows)):  # one entry per fallback call (a few hundred at most)
        op = a[V.ARG_OP][i] or V.fallback_op(trace.name(int(rows[i])))
        key.append((str(op), _text(a[V.ARG_SHAPES][i]), _text(a[V.ARG_DTYPES][i]), False))
        reason.append(str(a[V.ARG_FALLBACK_REASON][i] or ""))
        copies.append(dma[by_ext[lo[i] : hi[i]]] if ext[i] > 0 else np.zeros(0, np.int64))
        native.append(
            native_time(flops[i], nbytes[i], a[V.ARG_DTYPE][i], a[V.ARG_ENGINE][i], props)
        )
    return _Calls(key, reason, rows, dur, ts, ts + dur, copies, np.asarray(native, float))


def _inferred_calls(trace: Trace, inferred: InferredFallbacks) -> _Calls:
    rows = inferred.rows
    a = arg_values(trace, rows, (*V.ARG_INPUT_DIMS_KEYS, V.ARG_INPUT_TYPE))
    dims = [
        next((x for x in values if x is not None), None)
        for values in zip(*(a[k] for k in V.ARG_INPUT_DIMS_KEYS), strict=True)
    ]
    key = [
        (trace.name(int(r)), _text(d), _text(t), True)
        for r, d, t in zip(rows.tolist(), dims, a[V.ARG_INPUT_TYPE], strict=True)
    ]
    copies = [np.concatenate([d, h]) for d, h in zip(inferred.d2h, inferred.h2d, strict=True)]
    return _Calls(
        key,
        [REASON] * len(rows),
        rows,
        trace.col(S.DUR_NS)[rows],
        inferred.span_start_ns,
        inferred.span_end_ns,
        copies,
        _inferred_native(trace, rows, dims, a[V.ARG_INPUT_TYPE]),
    )


def _inferred_native(trace: Trace, rows: np.ndarray, dims: list, types: np.ndarray) -> np.ndarray:
    """Each inferred call's native device time by the cost model (the projection's: the op's
    flops and bytes from its recorded shapes, on the profile of the chip the trace names); NaN
    when the trace names no known chip or the call recorded no shapes."""
    spec = device_chip(trace)
    out = np.full(len(rows), np.nan)
    if spec is None:
        return out
    for i, (row, d, t) in enumerate(zip(rows.tolist(), dims, types, strict=True)):  # (few calls)
        if not isinstance(d, list):
            continue
        try:
            cost = op_cost(trace.name(row), d, t if isinstance(t, list) else ["float"] * len(d))
        except (TypeError, ValueError, IndexError):
            continue
        if cost.bytes_moved > 0:
            out[i] = profile_native_time(cost, spec)
    return out


def _merge(a: _Calls, b: _Calls) -> _Calls:
    cat = lambda x, y: np.concatenate([x, y])  # noqa: E731
    return _Calls(
        a.key + b.key,
        a.reason + b.reason,
        cat(a.row, b.row).astype(np.int64),
        cat(a.host_ns, b.host_ns).astype(np.int64),
        cat(a.start, b.start),
        cat(a.end, b.end),
        a.copies + b.copies,
        cat(a.native_ns, b.native_ns),
    )


def _text(value: object) -> str:
    return "" if value is None else str(value).replace(" ", "")
