"""Each device item's cost on a target chip, from the trace and the cost model (the projection's
cost swap, docs/projection.md)::

    costs = swap_costs(ctx, graph, source_chip, target_chip, same=False)
    costs.duration, costs.cls, costs.name, costs.fallback, costs.delays, costs.uncertainty

A kernel's recorded time is scaled by the ratio of its op's roofline bound on the two chips
(priced from the op's recorded shapes, once per distinct op; the rest vectorised), copies by the
links, collectives by the ring model; ops the target runs on the host (Neuron's fallback table)
leave the device and become host delays. ``offload_costs``: a CPU-only trace's ops moved onto the
target (``offload``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from neuron_profiler.analysis import _tree
from neuron_profiler.analysis._args import arg_values, as_float
from neuron_profiler.analysis._copies import D2H, H2D
from neuron_profiler.analysis._device import COLLECTIVE, COMPUTE, DMA
from neuron_profiler.analysis.context import AnalysisContext
from neuron_profiler.analysis.offload import Offload
from neuron_profiler.analysis.replay import (
    DependencyGraph,
    HostDelays,
    graph_items,
)
from neuron_profiler.costmodel.chips import HOST_CPU, TF32, ChipSpec
from neuron_profiler.costmodel.fallbacks import (
    FALLBACK_DTYPES,
    falls_back,
    normalise_op,
    out_of_place,
)
from neuron_profiler.costmodel.ops import DTYPE_BYTES, TRACE_TYPES, OpCost, op_cost
from neuron_profiler.costmodel.roofline import (
    DEFAULT_EFFICIENCY,
    bound_parts_s,
    collective_s,
    host_copy_s,
)
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import Trace

CLASSES = ("compute", "memory_bound", "copies", "collectives", "host", "idle")
# The model's stated uncertainty per class of device time (a fraction either way), for the
# low-high range: ASSUMPTION, set from the published per-op errors of roofline-ratio scaling
# (Habitat, ATC'21: 11.8% mean across GPUs, kernels with a different bound on the two chips
# well beyond) and widened where this model has less to go on (kernels without recorded shapes,
# collectives without message sizes). Never tuned per trace.
UNCERTAINTY = {"compute": 0.25, "memory_bound": 0.15, "copies": 0.2, "collectives": 0.3}
UNCERTAINTY_UNPRICED = 0.5  # a kernel without its op's shapes (scaled by one resource's ratio)
UNCERTAINTY_ROOFLINE = 0.5  # an op with no device time on the source: roofline at an efficiency
# Kernel names of matrix work (cuBLAS / CUTLASS / cuDNN / rocBLAS / MIOpen), for kernels whose op
# recorded no shapes.
_MATRIX_KERNEL = re.compile(
    r"gemm|sgemm|hgemm|cutlass|xmma|conv|wgrad|dgrad|implicit|winograd|Cijk_|igemm|matmul",
    re.IGNORECASE,
)
# ... and of those, kernels on TF32 tensor cores (FP32 data: cuDNN's TF32 default on Ampere+)
_TENSOR_OP_KERNEL = re.compile(r"s1688|s16816|tf32|tensorop", re.IGNORECASE)


@dataclass(frozen=True)
class ItemCosts:
    """Per graph item: target duration, class, op name, and the uncertainty of its cost."""

    duration: np.ndarray
    cls: np.ndarray  # index into CLASSES (compute or memory_bound for kernels)
    name: np.ndarray  # object: op or kernel name
    fallback: np.ndarray
    priced: np.ndarray
    delays: HostDelays
    uncertainty: np.ndarray
    source_duration: np.ndarray  # the item's recorded time (device, or host for moved ops)
    host_source_ns: int = 0  # host time of ops that change side, on the source ...
    host_target_ns: int = 0  # ... and on the target


def swap_costs(
    ctx: AnalysisContext,
    graph: DependencyGraph,
    src: ChipSpec | None,
    tgt: ChipSpec | None,
    same: bool,
    native: frozenset[str] = frozenset(),
) -> ItemCosts:
    """``native``: ops the target runs natively though its fallback table names them."""
    trace, w = ctx.trace, ctx.work
    items = graph_items(ctx)
    rows = w.rows[items]
    queue = w.queue[items]
    n = len(items)
    op_row, top_fallback = _launching_ops(ctx, items, native)
    name = _names(trace, np.where(op_row >= 0, op_row, rows))
    kernel_name = _name_matches(trace, rows, _MATRIX_KERNEL)
    cost = _with_kernel_costs(trace, rows, queue == COMPUTE, _op_costs(trace, op_row), kernel_name)
    priced = cost.priced
    duration = graph.duration.astype(np.float64).copy()
    cls = np.zeros(n, np.int64)
    uncertainty = np.zeros(n)
    fallback = np.zeros(n, bool)
    compute = queue == COMPUTE
    memory = ~kernel_name
    if src is not None:
        flop_s, byte_s = bound_parts_s(src, cost.flops, cost.bytes_moved, cost.dtype, cost.matrix)
        memory = np.where(priced, byte_s >= flop_s, memory)
    cls[compute] = np.where(
        memory[compute], CLASSES.index("memory_bound"), CLASSES.index("compute")
    )
    uncertainty[compute] = np.where(
        memory[compute], UNCERTAINTY["memory_bound"], UNCERTAINTY["compute"]
    )
    uncertainty[compute & ~priced] = UNCERTAINTY_UNPRICED
    copies = queue == DMA
    cls[copies] = CLASSES.index("copies")
    uncertainty[copies] = UNCERTAINTY["copies"]
    coll = queue == COLLECTIVE
    cls[coll] = CLASSES.index("collectives")
    uncertainty[coll] = UNCERTAINTY["collectives"]
    delays = HostDelays.none()
    if same:
        uncertainty[:] = 0.0  # the recorded durations: nothing is modelled
    if not same and src is not None and tgt is not None:
        duration *= _ratios(ctx, items, cost, kernel_name, src, tgt)
        if tgt.host_fallback:
            fallback = _fallback_items(top_fallback, cost, compute | copies)
            delays = _fallback_delays(ctx, graph, top_fallback, fallback, tgt)
            duration[fallback] = 0
    return ItemCosts(
        duration=np.round(duration).astype(np.int64),
        cls=cls,
        name=name,
        fallback=fallback,
        priced=priced,
        delays=delays,
        uncertainty=uncertainty,
        source_duration=graph.duration,
        host_target_ns=int(delays.extra_ns.sum()),
    )


def offload_costs(ctx: AnalysisContext, plan: Offload, tgt: ChipSpec) -> ItemCosts:
    """A CPU-only trace's moved ops: their device time on the target (roofline at the default
    efficiency), their recorded host time as the source's, dispatch as the target's host time."""
    n = len(plan.graph)
    flop_s, byte_s = bound_parts_s(
        tgt,
        np.array([c.flops for c in plan.costs], np.float64),
        np.array([c.bytes_moved for c in plan.costs], np.float64),
        np.array([c.dtype for c in plan.costs], dtype=object),
        np.array([c.matrix for c in plan.costs], bool),
    )
    memory = byte_s >= flop_s
    cls = np.where(memory, CLASSES.index("memory_bound"), CLASSES.index("compute"))
    moved_host = -int(plan.delays.extra_ns[plan.delays.extra_ns < 0].sum())
    return ItemCosts(
        duration=plan.graph.duration,
        cls=cls,
        name=plan.names,
        fallback=np.zeros(n, bool),
        priced=np.ones(n, bool),
        delays=plan.delays,
        uncertainty=np.full(n, UNCERTAINTY_ROOFLINE),
        source_duration=plan.host_ns,
        host_source_ns=int(plan.host_ns.sum()),
        # (the target's host also copies each fallback's data out of device memory and back)
        host_target_ns=int(plan.host_ns.sum()) - moved_host + int(plan.fallback_copy_ns.sum()),
    )


def _ratios(
    ctx: AnalysisContext,
    items: np.ndarray,
    cost: _OpCosts,
    matrix_kernel: np.ndarray,
    src: ChipSpec,
    tgt: ChipSpec,
) -> np.ndarray:
    """Target time / source time per item, by its resource's ratio on the two chips."""
    w = ctx.work
    queue = w.queue[items]
    hbm = src.hbm_bytes_per_s() / tgt.hbm_bytes_per_s()
    fp32 = src.matrix_flops_per_s("float32") / tgt.matrix_flops_per_s("float32")
    tf32 = src.matrix_flops_per_s(TF32) / tgt.matrix_flops_per_s(TF32)
    ratio = np.full(len(items), hbm)
    compute = queue == COMPUTE
    tensor_op = _name_matches(ctx.trace, w.rows[items], _TENSOR_OP_KERNEL)
    unpriced_matrix = compute & ~cost.priced & matrix_kernel
    ratio[unpriced_matrix] = np.where(tensor_op[unpriced_matrix], tf32, fp32)
    priced = compute & cost.priced
    bounds = [
        np.maximum(*bound_parts_s(chip, cost.flops, cost.bytes_moved, cost.dtype, cost.matrix))
        for chip in (src, tgt)
    ]
    ratio[priced] = bounds[1][priced] / np.maximum(bounds[0][priced], 1e-18)
    direction = ctx.copies.direction[items]
    host = (direction == D2H) | (direction == H2D)
    ratio[host] = src.host_link_bytes_per_s() / tgt.host_link_bytes_per_s()
    ratio[(queue == DMA) & ~host] = src.dma_bytes_per_s() / tgt.dma_bytes_per_s()
    coll = np.flatnonzero(queue == COLLECTIVE)
    if len(coll):
        ratio[coll] = _collective_ratios(ctx.trace, w.rows[items[coll]], src, tgt)
    return ratio


def _collective_ratios(trace: Trace, rows: np.ndarray, src: ChipSpec, tgt: ChipSpec) -> np.ndarray:
    """Ring time on the target's links / on the source's, from the kernel's message size and
    group size where the trace records them (NCCL's collective args), else the link ratio."""
    keys = (V.ARG_IN_MSG_NELEMS, V.ARG_GROUP_SIZE, V.ARG_DTYPE, V.ARG_COLLECTIVE)
    a = arg_values(trace, rows, keys)
    out = np.full(len(rows), src.collective_gbps_per_core / tgt.collective_gbps_per_core)
    for j in range(len(rows)):
        elems, group = a[V.ARG_IN_MSG_NELEMS][j], a[V.ARG_GROUP_SIZE][j]
        if not isinstance(elems, (int, float)) or not isinstance(group, (int, float)):
            continue
        dtype = TRACE_TYPES.get(str(a[V.ARG_DTYPE][j]), str(a[V.ARG_DTYPE][j]).lower())
        nbytes = float(elems) * DTYPE_BYTES.get(dtype, 4)
        name = str(a[V.ARG_COLLECTIVE][j] or trace.name(int(rows[j])))  # (its kind: ring_traffic)
        s = collective_s(src, nbytes=nbytes, world=int(group), collective=name)
        t = collective_s(tgt, nbytes=nbytes, world=int(group), collective=name)
        out[j] = t / s if s > 0 else out[j]
    return out


def _launching_ops(
    ctx: AnalysisContext, items: np.ndarray, native: frozenset[str] = frozenset()
) -> tuple[np.ndarray, np.ndarray]:
    """Per item: the innermost host op around its launching call (-1: none) and the outermost
    op around it that the Neuron fallback table names (-1: none). Dispatch frames
    (``PythonSubclass``: the emulated device's tensor subclass) are no op: the aten op
    around them is."""
    trace, w = ctx.trace, ctx.work
    c = trace.columns
    n = len(items)
    inner, fb = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    call_row = ctx.runtime_calls.launching_call(trace, w.rows[items])
    calls = np.unique(call_row[call_row >= 0])  # (by correlation, flow or External id)
    if len(calls) == 0:
        return inner, fb
    ops = np.flatnonzero(
        trace.mask(kind=S.EventKind.CPU_OP, ph=S.Phase.COMPLETE)
        & ~np.isin(c[S.NAME_ID], ctx.names.dispatch_frames)
    )
    tree = _tree.nest(trace, np.concatenate([ops, calls]), at_start=calls)
    rows, parent = tree.rows, tree.parent
    is_op = np.isin(rows, ops)
    innermost = _tree.innermost_marked(parent, is_op)
    is_fb = is_op & np.isin(c[S.NAME_ID][rows], _fallback_ids(trace, c[S.NAME_ID][ops], native))
    outer_fb = _tree.outermost_marked(parent, is_fb)
    at, hit = _tree.positions(rows, ~is_op, call_row)
    inner[hit] = np.where(innermost[at] >= 0, rows[np.maximum(innermost[at], 0)], -1)
    fb[hit] = np.where(outer_fb[at] >= 0, rows[np.maximum(outer_fb[at], 0)], -1)
    return inner, fb


def _fallback_ids(trace: Trace, name_ids: np.ndarray, native: frozenset[str]) -> np.ndarray:
    """The string ids among ``name_ids`` (op rows' names) of aten ops the fallback table names
    (``costmodel.fallbacks.falls_back``), less the ``native`` ones (a what-if: any overload,
    in-place variant included); each distinct name tested once."""
    run_natively = {out_of_place(normalise_op(n)) for n in native}
    ids = np.unique(name_ids)
    keep = [
        name.startswith(V.ATEN_PREFIX)
        and falls_back(name, "")
        and out_of_place(normalise_op(name)) not in run_natively
        for name in (trace.strings[i] for i in ids.tolist())
    ]
    return ids[np.array(keep, bool)] if len(ids) else ids


@dataclass(frozen=True)
class _OpCosts:
    """Per item, from its op's recorded shapes: flops, bytes, matrix work, dtype, priced (False:
    no op or no shapes; then the other columns are 0, False, "float32")."""

    flops: np.ndarray
    bytes_moved: np.ndarray
    matrix: np.ndarray
    dtype: np.ndarray
    priced: np.ndarray


def _op_costs(trace: Trace, op_row: np.ndarray) -> _OpCosts:
    """The cost of each item's op, priced once per distinct op row."""
    uniq, inverse = np.unique(op_row, return_inverse=True)
    inverse = inverse.reshape(-1)
    keys = (*V.ARG_INPUT_DIMS_KEYS, V.ARG_INPUT_TYPE)
    a = arg_values(trace, uniq, keys) if len(uniq) else {k: [] for k in keys}
    cost: list[OpCost | None] = []
    for j, row in enumerate(uniq.tolist()):
        dims = next((a[k][j] for k in V.ARG_INPUT_DIMS_KEYS if a[k][j] is not None), None)
        types = a[V.ARG_INPUT_TYPE][j]
        if row < 0 or not isinstance(dims, list):
            cost.append(None)
            continue
        if not isinstance(types, list):
            types = ["float"] * len(dims)  # no recorded dtype: float32 (ASSUMPTION)
        try:
            cost.append(op_cost(trace.name(row), dims, types))
        except (TypeError, ValueError, IndexError):
            cost.append(None)
    priced = np.array([c is not None and c.bytes_moved > 0 for c in cost], bool)
    return _OpCosts(
        flops=np.array([c.flops if c else 0 for c in cost], np.float64)[inverse],
        bytes_moved=np.array([c.bytes_moved if c else 0 for c in cost], np.float64)[inverse],
        matrix=np.array([bool(c and c.matrix) for c in cost], bool)[inverse],
        dtype=np.array([c.dtype if c else "float32" for c in cost], dtype=object)[inverse],
        priced=priced[inverse],
    )


def _with_kernel_costs(
    trace: Trace, rows: np.ndarray, compute: np.ndarray, cost: _OpCosts, matrix_name: np.ndarray
) -> _OpCosts:
    """Kernels whose op recorded no shapes but which carry their own cost (``flops`` and
    ``bytes`` args, as this project's collector writes them: docs/runtime-events.md) are priced
    from it: matrix work when their engine is the matrix engine (TensorE) or their name is a
    matrix kernel's, in their ``dtype``. Without this, a trace recorded without
    ``record_shapes`` would scale every matmul by the HBM ratio."""
    todo = np.flatnonzero(compute & ~cost.priced)
    if len(todo) == 0:
        return cost
    a = arg_values(trace, rows[todo], (V.ARG_FLOPS, V.ARG_BYTES, V.ARG_ENGINE, V.ARG_DTYPE))
    flops, nbytes = as_float(a[V.ARG_FLOPS]), as_float(a[V.ARG_BYTES])
    ok = np.isfinite(flops) & np.isfinite(nbytes) & (flops >= 0) & (nbytes > 0)
    if not ok.any():
        return cost
    k = todo[ok]
    engine = a[V.ARG_ENGINE][ok]
    dtype = np.array([d if isinstance(d, str) else "float32" for d in a[V.ARG_DTYPE][ok]], object)
    out = _OpCosts(
        flops=cost.flops.copy(),
        bytes_moved=cost.bytes_moved.copy(),
        matrix=cost.matrix.copy(),
        dtype=cost.dtype.copy(),
        priced=cost.priced.copy(),
    )
    out.flops[k], out.bytes_moved[k], out.dtype[k] = flops[ok], nbytes[ok], dtype
    out.matrix[k] = (engine == V.MATRIX_ENGINE) | matrix_name[k]
    out.priced[k] = True
    return out


def _name_matches(trace: Trace, rows: np.ndarray, pattern: re.Pattern[str]) -> np.ndarray:
    """Whether each row's name matches, tested once per distinct name."""
    ids, inverse = np.unique(trace.col(S.NAME_ID)[rows], return_inverse=True)
    hit = np.array([bool(pattern.search(trace.strings[i])) for i in ids.tolist()], bool)
    return hit[inverse.reshape(-1)] if len(rows) else np.zeros(0, bool)


def _names(trace: Trace, rows: np.ndarray) -> np.ndarray:
    ids, inverse = np.unique(trace.col(S.NAME_ID)[rows], return_inverse=True)
    return np.array([trace.strings[i] for i in ids.tolist()], dtype=object)[inverse.reshape(-1)]


def _fallback_items(
    top_fallback: np.ndarray,
    cost: _OpCosts,
    device_work: np.ndarray,
) -> np.ndarray:
    """Items the target would not run: launched inside a fallback op, or by an op on float64."""
    f64 = cost.priced & np.isin(cost.dtype.astype(str), list(FALLBACK_DTYPES))
    return device_work & ((top_fallback >= 0) | f64)


def _fallback_delays(
    ctx: AnalysisContext,
    graph: DependencyGraph,
    top_fallback: np.ndarray,
    fallback: np.ndarray,
    tgt: ChipSpec,
) -> HostDelays:
    """One host delay per fallback op (at its recorded end): wait for the device work launched
    before it, then copy its inputs out and its outputs back on the target's host link and run it
    on the host CPU at the default efficiency."""
    trace = ctx.trace
    c = trace.columns
    ops = np.unique(top_fallback[fallback & (top_fallback >= 0)])
    if len(ops) == 0:
        return HostDelays.none()
    costs = _op_costs(trace, ops)
    at = c[S.TS_NS][ops] + c[S.DUR_NS][ops]
    anchor = np.where(graph.launch_ns != np.iinfo(np.int64).min, graph.launch_ns, graph.start_ns)
    by_anchor = np.argsort(anchor, kind="stable")
    before = np.searchsorted(anchor[by_anchor], c[S.TS_NS][ops], side="left") - 1
    awaited = np.where(before >= 0, by_anchor[np.maximum(before, 0)], -1)
    flop_s, byte_s = bound_parts_s(
        HOST_CPU, costs.flops, costs.bytes_moved, costs.dtype, costs.matrix
    )
    host_s = np.maximum(flop_s, byte_s) / DEFAULT_EFFICIENCY
    copy_s = host_copy_s(tgt, costs.bytes_moved, copies=2)
    extra = np.where(costs.priced, np.round((host_s + copy_s) * 1e9), 0).astype(np.int64)
    order = np.argsort(at, kind="stable")
    return HostDelays(at[order], awaited[order], extra[order])
