"""Operator and kernel summary, the tables the TensorBoard view renders::

    s = op_kernel_summary(ctx)
    s.ops[0].name, s.ops[0].host_self_ns, s.ops[0].device_total_ns
    s.kernels[0].name, s.kernels[0].achieved_tflops, s.kernels[0].pct_of_peak

Operators (``cpu_op`` rows, grouped by name; torch-tb-profiler's operator view): calls; host total
= Σ dur; host self = Σ (dur − direct children's dur), children being the ops and runtime calls
contained on the same thread (so an op's launches are not its self time, as in ``key_averages``);
rows that are annotations today are left out (``_op_names``); device self = Σ device time
of the work carrying the op's ``External id`` (what ``key_averages`` calls self device time);
device total = device self plus its descendants'; the most frequent input shapes (``Input Dims``)
of the top ops, counted over at most ``SHAPE_SAMPLE_CALLS`` calls per op spread evenly over its
calls (a ranking of shapes, not a count: a 5M-event trace would otherwise decode every call).
Kernels (device rows grouped by name): calls, total / mean / min / max time,
achieved TFLOPS (Σ flops / Σ time) or GB/s (Σ bytes / Σ time) when the rows carry ``flops`` /
``bytes`` args, and the % of peak when ``deviceProperties`` gives it: the rows' time at the peak
for each one's ``dtype`` on its ``engine`` (``analysis.peaks``) over their measured time, or GB/s
over HBM bandwidth.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from neuron_profiler.analysis._args import arg_values, args_spelling, as_float
from neuron_profiler.analysis._device import DeviceWork
from neuron_profiler.analysis._intervals import dense_codes
from neuron_profiler.analysis._keys import index_of
from neuron_profiler.analysis._tree import parents, subtree_sums
from neuron_profiler.analysis.context import AnalysisContext
from neuron_profiler.analysis.peaks import bandwidth_gbps, peak_tflops
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import Trace

TOP_SHAPES = 3
SHAPED_OPS = 20  # ops (by host total) whose input shapes are read
SHAPE_SAMPLE_CALLS = 5_000  # calls per op whose shapes are decoded


@dataclass(frozen=True)
class OpRow:
    name: str
    calls: int
    host_total_ns: int
    host_self_ns: int
    device_self_ns: int
    device_total_ns: int
    input_shapes: tuple[str, ...]


@dataclass(frozen=True)
class KernelRow:
    name: str
    calls: int
    total_ns: int
    mean_ns: int
    min_ns: int
    max_ns: int
    achieved_tflops: float | None
    achieved_gbps: float | None
    pct_of_peak: float | None


@dataclass(frozen=True)
class OpKernelSummary:
    ops: tuple[OpRow, ...]  # by device total, then host total
    kernels: tuple[KernelRow, ...]  # by total time


def op_kernel_summary(ctx: AnalysisContext) -> OpKernelSummary:
    return OpKernelSummary(ops=_ops(ctx), kernels=_kernels(ctx))


def _ops(ctx: AnalysisContext) -> tuple[OpRow, ...]:
    trace, work, host = ctx.trace, ctx.work, ctx.host
    c = trace.columns
    # ops (host rows: no ProfilerStep) and runtime calls, the leaves of the op tree: an op's
    # host self time excludes its launches
    tree_rows = (host.kind == S.EventKind.CPU_OP) | (host.kind == S.EventKind.RUNTIME)
    rows = host.rows[tree_rows]
    ops = np.zeros(len(trace), dtype=bool)
    ops[host.rows[host.kind == S.EventKind.CPU_OP]] = True
    if not ops.any():
        return ()
    # (arrays as long as the trace's ops are released as soon as they are used: a 5M-event
    # trace's peak memory is set here)
    start, dur = c[S.TS_NS][rows], c[S.DUR_NS][rows]
    order = np.lexsort((-(start + dur), start, c[S.TID][rows], c[S.PID][rows]))
    rows, start, dur = rows[order], start[order], dur[order]
    del order, tree_rows
    pid, tid = c[S.PID][rows], c[S.TID][rows]
    thread = np.cumsum(np.r_[False, (np.diff(pid) != 0) | (np.diff(tid) != 0)])
    del pid, tid
    is_op = ops[rows]
    del ops
    name_id = c[S.NAME_ID][rows]
    direct = parents(thread, start, start + dur)
    del thread, start
    parent, merged, absorbing = _merge_repeats(direct, is_op, name_id)
    # runtime calls of an op that merged a child are replaced by the child's
    dropped = ~is_op & (direct >= 0) & absorbing[np.maximum(direct, 0)]
    del direct
    dev_self = np.where(is_op, _device_self(trace, work, c[S.EXTERNAL_ID][rows]), 0)
    inner = np.flatnonzero(merged & ~absorbing)  # the last op of each chain of repeats
    dev_self[parent[inner]] = dev_self[inner]  # the chain's head takes the innermost's launches
    dev_self[merged] = 0
    counted = (parent >= 0) & ~merged & ~dropped
    child_dur = np.bincount(parent[counted], weights=dur[counted], minlength=len(rows)).astype(
        np.int64
    )
    del counted, inner, absorbing
    tree = np.where(merged | dropped, -1, parent)
    del parent, dropped
    dev_total = subtree_sums(tree, dev_self)
    del tree
    reported = np.flatnonzero(is_op & ~merged & _op_names(trace)[name_id])
    if len(reported) == 0:
        return ()
    rows, dur, child_dur = rows[reported], dur[reported], child_dur[reported]
    dev_self, dev_total = dev_self[reported], dev_total[reported]
    name_id = name_id[reported]
    uniq, code = np.unique(name_id, return_inverse=True)
    sums = {
        k: np.bincount(code, weights=v, minlength=len(uniq)).astype(np.int64)
        for k, v in (
            ("host", dur),
            ("self", dur - child_dur),
            ("dself", dev_self),
            ("dtotal", dev_total),
        )
    }
    calls = np.bincount(code, minlength=len(uniq))
    ranked = np.lexsort((-sums["host"], -sums["dtotal"]))
    shapes = _shapes(trace, rows, code, ranked[:SHAPED_OPS])
    return tuple(
        OpRow(
            name=trace.strings[int(uniq[k])],
            calls=int(calls[k]),
            host_total_ns=int(sums["host"][k]),
            host_self_ns=int(sums["self"][k]),
            device_self_ns=int(sums["dself"][k]),
            device_total_ns=int(sums["dtotal"][k]),
            input_shapes=shapes.get(k, ()),
        )
        for k in ranked.tolist()
    )


def _merge_repeats(
    parent: np.ndarray, is_op: np.ndarray, name_id: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge an op into its parent when it is the parent's only op child and has its name (an
    op re-dispatching to itself), as torch's ``EventList._remove_dup_nodes`` and
    torch-tb-profiler do: one call, whose children and runtime calls replace the parent's own.
    Returns each row's parent with merged ops skipped (so a merged op's is its chain's head),
    which ops merged, and which ops merged a child."""
    n = len(parent)
    has = parent >= 0
    op_children = np.bincount(parent[has & is_op], minlength=n)
    merged = np.zeros(n, dtype=bool)
    kid = np.flatnonzero(has & is_op)
    up = parent[kid]
    merged[kid] = is_op[up] & (op_children[up] == 1) & (name_id[up] == name_id[kid])
    absorbing = np.zeros(n, dtype=bool)
    absorbing[parent[merged]] = True  # merged rows always have a parent
    head, _ = _past_merged(parent, merged)
    return head, merged, absorbing


def _past_merged(parent: np.ndarray, merged: np.ndarray) -> tuple[np.ndarray, int]:
    """Each row's nearest ancestor that did not merge (-1: none), and the passes it took.

    Pointer doubling: ``up`` starts one link above each merged row and every pass makes it jump
    to its target's target, so a chain of n repeats (a hostile trace nests thousands of one op)
    takes about log2(n) passes instead of n. Merged rows always have a parent."""
    up = np.arange(len(parent))
    todo = np.flatnonzero(merged)
    up[todo] = parent[todo]
    passes = 0
    while len(todo):  # rows whose target still merged: jump past it
        passes += 1
        todo = todo[merged[up[todo]]]
        up[todo] = up[up[todo]]
    has = parent >= 0
    return np.where(has, up[np.where(has, parent, 0)], -1), passes


def _op_names(trace: Trace) -> np.ndarray:
    """Per string id: False for the ranges 2021 Kineto recorded as ops that are annotations
    today (DataLoader ``__next__``, ``Optimizer.*``, ``nn.Module:``, DataParallel's forward):
    they stay tree nodes but are not operator rows, as in torch-tb-profiler."""
    return np.fromiter(
        (not n.startswith(V.ANNOTATION_OP_PREFIXES) for n in trace.strings),
        dtype=bool,
        count=len(trace.strings),
    )


def _device_self(trace: Trace, work: DeviceWork, op_ext: np.ndarray) -> np.ndarray:
    """Device time of the work carrying each op's External id (0 for ids <= 0)."""
    ext = trace.col(S.EXTERNAL_ID)[work.rows]
    keep = ext > 0
    keys, inv = dense_codes(ext[keep])
    per_key = np.bincount(inv, weights=(work.end - work.start)[keep], minlength=len(keys))
    out = np.zeros(len(op_ext), np.int64)
    k = index_of(keys, op_ext)  # (keys > 0: ids <= 0 find none)
    hit = k >= 0
    out[hit] = per_key[k[hit]].astype(np.int64)
    return out


def _shapes(
    trace: Trace, rows: np.ndarray, code: np.ndarray, top: np.ndarray
) -> dict[int, tuple[str, ...]]:
    pick = np.sort(
        np.concatenate(
            [_spread(np.flatnonzero(code == k), SHAPE_SAMPLE_CALLS) for k in top.tolist()]
            or [np.zeros(0, np.int64)]
        )
    )
    if len(pick) == 0:
        return {}
    a = arg_values(trace, rows[pick], V.ARG_INPUT_DIMS_KEYS)
    first, second = a[V.ARG_INPUT_DIMS_KEYS[0]], a[V.ARG_INPUT_DIMS_KEYS[1]]
    counters: dict[int, Counter[str]] = {}
    held = np.flatnonzero((first != None) | (second != None))  # noqa: E711 - elementwise
    for j, k in zip(held.tolist(), code[pick[held]].tolist(), strict=True):  # (calls shaped)
        value = first[j] if first[j] is not None else second[j]
        counters.setdefault(k, Counter())[str(value).replace(" ", "")] += 1
    return {k: tuple(s for s, _ in cnt.most_common(TOP_SHAPES)) for k, cnt in counters.items()}


def _spread(index: np.ndarray, most: int) -> np.ndarray:
    """At most ``most`` entries of ``index``, evenly spaced (all of them when it is short)."""
    if len(index) <= most:
        return index
    return index[np.linspace(0, len(index) - 1, most).astype(np.int64)]


def _kernels(ctx: AnalysisContext) -> tuple[KernelRow, ...]:
    trace, work = ctx.trace, ctx.work
    if len(work) == 0:
        return ()
    dur = work.end - work.start
    name_id = trace.col(S.NAME_ID)[work.rows]
    uniq, code = np.unique(name_id, return_inverse=True)
    total = np.bincount(code, weights=dur, minlength=len(uniq)).astype(np.int64)
    calls = np.bincount(code, minlength=len(uniq))
    lo = np.full(len(uniq), np.iinfo(np.int64).max)
    hi = np.zeros(len(uniq), np.int64)
    np.minimum.at(lo, code, dur)
    np.maximum.at(hi, code, dur)
    props = ctx.peaks
    flops, nbytes, ideal = _work_amounts(trace, work, props)
    f_sum = np.bincount(code, weights=np.nan_to_num(flops), minlength=len(uniq))
    b_sum = np.bincount(code, weights=np.nan_to_num(nbytes), minlength=len(uniq))
    has_f = np.bincount(code, weights=~np.isnan(flops), minlength=len(uniq)) == calls
    has_b = np.bincount(code, weights=~np.isnan(nbytes), minlength=len(uniq)) == calls
    # % of peak: the time the work would take at its own peak (each row's dtype and engine, or
    # its bandwidth) over the time it took; for one dtype that is achieved TFLOPS / peak TFLOPS
    ideal_sum = np.bincount(code, weights=np.nan_to_num(ideal), minlength=len(uniq))
    has_ideal = np.bincount(code, weights=~np.isnan(ideal), minlength=len(uniq)) == calls
    out = []
    for k in np.argsort(-total, kind="stable").tolist():
        t = float(total[k])
        tflops = f_sum[k] / t / 1e3 if has_f[k] and f_sum[k] > 0 and t > 0 else None
        gbps = b_sum[k] / t if has_b[k] and b_sum[k] > 0 and t > 0 and tflops is None else None
        pct = (
            100 * ideal_sum[k] / t
            if (tflops is not None or gbps is not None) and has_ideal[k]
            else None
        )
        out.append(
            KernelRow(
                name=trace.strings[int(uniq[k])],
                calls=int(calls[k]),
                total_ns=int(total[k]),
                mean_ns=int(total[k] // max(calls[k], 1)),
                min_ns=int(lo[k]),
                max_ns=int(hi[k]),
                achieved_tflops=_round(tflops, 4),
                achieved_gbps=_round(gbps, 4),
                pct_of_peak=_round(pct, 3),
            )
        )
    return tuple(out)


def _round(x: float | None, digits: int) -> float | None:
    return None if x is None else round(float(x), digits)


def _work_amounts(
    trace: Trace,
    work: DeviceWork,
    props: Mapping[str, Any] | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """flops and bytes args per device row, and its time at its peak (flops / the compute peak
    of its dtype and engine; a row without flops: bytes / its bandwidth; NaN where an arg or
    the peak is absent); only rows spelling them are decoded."""
    flops = np.full(len(work), np.nan)
    nbytes = np.full(len(work), np.nan)
    ideal = np.full(len(work), np.nan)
    args_rows = trace.col(S.ARGS_ROW)[work.rows]
    have = np.flatnonzero(args_rows >= 0)
    spelled = have[args_spelling(trace.raw_args, args_rows[have], V.ARG_FLOPS, V.ARG_BYTES)]
    if len(spelled):
        a = arg_values(
            trace,
            work.rows[spelled],
            (V.ARG_FLOPS, V.ARG_BYTES, V.ARG_DTYPE, V.ARG_ENGINE, V.ARG_DIRECTION),
        )
        flops[spelled] = as_float(a[V.ARG_FLOPS])
        nbytes[spelled] = as_float(a[V.ARG_BYTES])
        if props is not None:  # one lookup per distinct (dtype, engine): a handful
            keys = list(zip(a[V.ARG_DTYPE].tolist(), a[V.ARG_ENGINE].tolist(), strict=True))
            peak = {k: peak_tflops(props, *k) for k in set(keys)}
            tflops = np.array([peak[k] or np.nan for k in keys], float)
            link = {d: bandwidth_gbps(props, d) for d in set(a[V.ARG_DIRECTION].tolist())}
            gbps = np.array([link[d] or np.nan for d in a[V.ARG_DIRECTION].tolist()], float)
            f, b = flops[spelled], nbytes[spelled]
            # TFLOPS = 1e3 FLOP/ns; GB/s = B/ns
            ideal[spelled] = np.where(f > 0, f / (tflops * 1e3), b / gbps)
    return flops, nbytes, ideal
