"""The step time a traced script would have on another chip (docs/projection.md)::

    p = project(trace, "trn2")          # or "same": the trace's own chip (the replay check)
    p.source.step_ms, p.target.step_ms, p.target.low_ms, p.target.high_ms
    p.classes, p.ops, p.fallbacks, p.assumptions

The trace's steps are rebuilt from their dependencies (``replay``) and replayed twice: with the
recorded durations (the replay check: how well the dependencies explain the recorded step) and
with each device item's cost swapped for the target's: measured time x (the op's roofline bound
on the target / on the source), so the fraction of the bound it achieved is carried over (as
Habitat's wave scaling carries achieved occupancy); copies by the link bandwidths, collectives by
the ring model; ops the target runs on the host (Neuron's fallback table) leave the device and
cost the host their compute plus their copies; launch-bound work pays the target's launch
latency. Host time outside device waits is carried over (same host).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.analysis import _tree
from neuron_profiler.analysis._args import arg_values
from neuron_profiler.analysis._copies import D2H, H2D
from neuron_profiler.analysis._device import COLLECTIVE, COMPUTE, DMA
from neuron_profiler.analysis.context import AnalysisContext, Options
from neuron_profiler.analysis.offload import HOST_DISPATCH_NS, Offload, offload
from neuron_profiler.analysis.replay import (
    QUEUE_ROUNDS,
    DependencyGraph,
    HostDelays,
    ReplayedTimeline,
    dependency_graph,
    graph_items,
    replay,
    replay_with_queue_depth,
)
from neuron_profiler.costmodel.chips import CHIPS, HOST_CPU, TF32, ChipSpec, chip, chip_for_device
from neuron_profiler.costmodel.fallbacks import falls_back
from neuron_profiler.costmodel.ops import DTYPE_BYTES, TRACE_TYPES, OpCost, op_cost
from neuron_profiler.costmodel.roofline import DEFAULT_EFFICIENCY, bound_parts_s, collective_s
from neuron_profiler.errors import NeuronProfilerError
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import Trace

SAME = "same"
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
_COLLECTIVE_KINDS = {
    "allreduce": "allreduce",
    "all_reduce": "allreduce",
    "allgather": "allgather",
    "all_gather": "allgather",
    "reducescatter": "reduce_scatter",
    "reduce_scatter": "reduce_scatter",
    "alltoall": "alltoall",
    "all_to_all": "alltoall",
}
TOP_OPS = 15


@dataclass(frozen=True)
class Side:
    chip: str
    step_ms: float


@dataclass(frozen=True)
class Target:
    chip: str
    step_ms: float
    low_ms: float
    high_ms: float


@dataclass(frozen=True)
class ClassRow:
    """Per-step means; ``memory_bound`` is the part of ``compute`` bound by memory."""

    cls: str
    source_ms: float
    target_ms: float


@dataclass(frozen=True)
class OpRow:
    """One op (the innermost host op that launched the work, or the kernel's name) per step."""

    name: str
    cls: str
    count: int
    source_ms: float
    target_ms: float
    fallback: bool


@dataclass(frozen=True)
class WhatIfRow:
    """One edit replayed on the same graph: the projected mean step with it, and its change
    from the projection without it."""

    edit: str
    step_ms: float
    delta_ms: float


@dataclass(frozen=True)
class Projection:
    """``replay_ms``: the recorded durations replayed on the rebuilt dependencies (the replay
    check, against ``source.step_ms``)."""

    source: Side
    target: Target
    replay_ms: float
    steps: int
    classes: tuple[ClassRow, ...]
    ops: tuple[OpRow, ...]
    fallbacks: tuple[OpRow, ...]
    assumptions: tuple[str, ...]
    priced: int  # device items whose op's shapes priced them
    items: int  # device items in the graph
    what_if: tuple[WhatIfRow, ...] = ()

    @property
    def replay_error_pct(self) -> float:
        s = self.source.step_ms
        return 100.0 * (self.replay_ms - s) / s if s else 0.0


@dataclass(frozen=True)
class _Costs:
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


def source_chip(trace: Trace) -> ChipSpec | None:
    """The chip the trace ran on, from its deviceProperties (a name or our ``chip`` key)."""
    for props in trace.metadata.get("deviceProperties") or ():
        if not isinstance(props, dict):
            continue
        key = props.get(V.PROP_CHIP)
        if isinstance(key, str) and key in CHIPS:
            return CHIPS[key]
        for field in ("name", "gcnArchName"):
            name = props.get(field)
            if isinstance(name, str) and (spec := chip_for_device(name)) is not None:
                return spec
    return None


def project(
    trace: Trace,
    target: str,
    *,
    source: str | None = None,
    options: Options | None = None,
    top: int | None = TOP_OPS,
    what_if: tuple[str, ...] = (),
) -> Projection:
    """Project ``trace`` onto chip ``target`` ("same": the trace's own). ``source`` names the
    trace's chip when its deviceProperties do not; ``top``: op rows kept (None: all);
    ``what_if``: edits (``WHAT_IF``) each replayed alone on the same graph."""
    edits = [parse_what_if(e, trace.source) for e in what_if]  # bad input first
    ctx = AnalysisContext(trace, options or Options(hta=False, tb=False))
    src = chip(source) if source else source_chip(trace)
    if target == SAME:
        if src is None and source is None:
            tgt = None
        else:
            tgt = src
    else:
        tgt = chip(target)
        if src is None and len(ctx.work):
            raise NeuronProfilerError(
                f"{trace.source}: no known chip in its deviceProperties; name it with "
                f"--source-chip ({', '.join(CHIPS)})",
                exit_code=2,
            )
    graph = dependency_graph(ctx)
    recorded = replay(graph, graph.duration)
    same = tgt is None or (src is not None and tgt.name == src.name)
    source_graph = graph
    if not same and len(ctx.work) == 0:  # a CPU-only trace: its ops moved onto the target
        plan = offload(ctx, tgt)  # type: ignore[arg-type]
        graph, costs, shift = plan.graph, _offload_costs(ctx, plan, tgt), 0  # type: ignore[arg-type]
    else:
        costs = _costs(ctx, graph, src, tgt, same)
        shift = 0 if same else tgt.launch_latency_ns - graph.base_latency_ns  # type: ignore[union-attr]
    run = _runner(graph, None if same else tgt, shift)
    projected, blocked, converged = run(costs.duration, costs.delays)
    edited = []
    for edit in edits:
        step = _what_if_step(ctx, graph, costs, edit, src, tgt, same, run) / 1e6
        edited.append(WhatIfRow(edit.text, step, step - projected.mean_step_ns / 1e6))
    low, *_ = run(np.round(costs.duration * (1 - costs.uncertainty)).astype(np.int64), costs.delays)
    high, *_ = run(
        np.round(costs.duration * (1 + costs.uncertainty)).astype(np.int64), costs.delays
    )
    n = max(len(graph.step_start_ns), 1)
    src_name = src.name if src else "unknown"
    return Projection(
        source=Side(src_name, ctx.mean_step_ns / 1e6),
        target=Target(
            tgt.name if tgt else src_name,
            projected.mean_step_ns / 1e6,
            min(low.mean_step_ns, projected.mean_step_ns) / 1e6,
            max(high.mean_step_ns, projected.mean_step_ns) / 1e6,
        ),
        replay_ms=recorded.mean_step_ns / 1e6,
        steps=len(graph.step_start_ns),
        classes=_classes(source_graph, costs, recorded, projected, n),
        ops=_ops(costs, n, fallback=False, top=top),
        fallbacks=_ops(costs, n, fallback=True, top=top),
        assumptions=_assumptions(src, tgt, same, source_graph, costs)
        + (_offload_assumptions(plan) if graph is not source_graph else ())
        + _queue_assumption(tgt, same, blocked, n, converged),
        priced=int(costs.priced.sum()),
        items=len(graph),
        what_if=tuple(edited),
    )


# -- what-if edits on the same graph ------------------------------------------------------------
WHAT_IF = ("no-fallback:OP", "no-data-stall", "batch xN")
_NOT_YET = ("compiled", "overlap-comm")


@dataclass(frozen=True)
class Edit:
    text: str
    kind: str  # "no-fallback", "no-data-stall", "batch"
    op: str = ""
    factor: float = 1.0


def parse_what_if(text: str, source: str = "") -> Edit:
    """``no-fallback:OP`` (the op runs natively on the target), ``no-data-stall`` (the steps'
    DataLoader waits take no time), ``batch xN`` (device work, copies included, scaled by N;
    collectives, whose size is the model's, and host time unchanged)."""
    t = text.strip()
    if t.startswith("no-fallback:") and len(t) > len("no-fallback:"):
        op = t.split(":", 1)[1].strip()
        return Edit(t, "no-fallback", op=op if "::" in op else f"aten::{op}")
    if t == "no-data-stall":
        return Edit(t, "no-data-stall")
    if t.replace(" ", "").startswith("batchx"):
        try:
            factor = float(t.replace(" ", "")[len("batchx") :])
        except ValueError:
            factor = 0.0
        if factor > 0:
            return Edit(t, "batch", factor=factor)
    why = "not implemented yet" if t in _NOT_YET else f"unknown (choose {', '.join(WHAT_IF)})"
    where = f"{source}: " if source else ""
    raise NeuronProfilerError(f"{where}--what-if {t!r}: {why}", exit_code=2)


Runner = Callable[[np.ndarray, HostDelays], tuple[ReplayedTimeline, int, bool]]


def _runner(graph: DependencyGraph, target: ChipSpec | None, shift: int) -> Runner:
    """How the graph is replayed: as recorded (no target), or bounded by the target runtime's
    launch-queue depth."""
    if target is None:
        return lambda d, delays: (replay(graph, d, latency_shift_ns=shift, delays=delays), 0, True)
    return lambda d, delays: replay_with_queue_depth(
        graph, d, depth=target.launch_queue_depth, latency_shift_ns=shift, delays=delays
    )


def _queue_assumption(
    tgt: ChipSpec | None, same: bool, blocked: int, steps: int, converged: bool
) -> tuple[str, ...]:
    if same or tgt is None:
        return ()
    rounds = "" if converged else f" (after {QUEUE_ROUNDS} rounds some launches were still early)"
    return (
        f"at most {tgt.launch_queue_depth} launched, unfinished items per device on "
        f"{tgt.name} (docs/chips.md): {blocked / steps:.0f} launches a step blocked the host"
        + rounds,
    )


def _what_if_step(
    ctx: AnalysisContext,
    graph: DependencyGraph,
    costs: _Costs,
    edit: Edit,
    src: ChipSpec | None,
    tgt: ChipSpec | None,
    same: bool,
    run: Runner,
) -> float:
    """The mean step replayed with one edit."""
    duration, delays = costs.duration, costs.delays
    if edit.kind == "no-fallback" and len(ctx.work) and not same:
        edited = _costs(ctx, graph, src, tgt, same, native=frozenset({edit.op}))
        duration, delays = edited.duration, edited.delays
    elif edit.kind == "batch":
        scaled = costs.cls != CLASSES.index("collectives")
        duration = np.where(scaled, np.round(duration * edit.factor), duration).astype(np.int64)
    elif edit.kind == "no-data-stall":
        delays = delays.merge(_data_loading(ctx))
    return run(duration, delays)[0].mean_step_ns


def _data_loading(ctx: AnalysisContext) -> HostDelays:
    """The steps' DataLoader spans (outermost) as negative host delays at their ends."""
    c = ctx.trace.columns
    rows = np.flatnonzero(
        ctx.trace.mask(kind=S.EventKind.CPU_OP, ph=S.Phase.COMPLETE)
        | ctx.trace.mask(kind=S.EventKind.USER_ANNOTATION, ph=S.Phase.COMPLETE)
    )
    rows = rows[np.isin(c[S.NAME_ID][rows], ctx.names.dataloader)]
    start, end = c[S.TS_NS][rows], c[S.TS_NS][rows] + c[S.DUR_NS][rows]
    inside = I.overlap_per_window(ctx.steps.host_spans, start, start + 1) > 0
    spans = I.union(start[inside], end[inside])  # nested or repeated loader rows counted once
    s, e = spans.start, spans.end
    return HostDelays(e, np.full(len(e), -1, np.int64), -(e - s))


def _costs(
    ctx: AnalysisContext,
    graph: DependencyGraph,
    src: ChipSpec | None,
    tgt: ChipSpec | None,
    same: bool,
    native: frozenset[str] = frozenset(),
) -> _Costs:
    """``native``: ops the target runs natively though its fallback table names them."""
    trace, w = ctx.trace, ctx.work
    items = graph_items(ctx)
    rows = w.rows[items]
    queue = w.queue[items]
    n = len(items)
    op_row, top_fallback = _launching_ops(ctx, items, native)
    name = _names(trace, np.where(op_row >= 0, op_row, rows))
    cost = _op_costs(trace, op_row)
    priced = cost.priced
    kernel_name = _name_matches(trace, rows, _MATRIX_KERNEL)
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
            fallback = _fallback_items(ctx, items, top_fallback, cost, compute | copies)
            delays = _fallback_delays(ctx, graph, items, top_fallback, fallback, tgt)
            duration[fallback] = 0
    return _Costs(
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


def _offload_costs(ctx: AnalysisContext, plan: Offload, tgt: ChipSpec) -> _Costs:
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
    return _Costs(
        duration=plan.graph.duration,
        cls=cls,
        name=plan.names,
        fallback=np.zeros(n, bool),
        priced=np.ones(n, bool),
        delays=plan.delays,
        uncertainty=np.full(n, UNCERTAINTY_ROOFLINE),
        source_duration=plan.host_ns,
        host_source_ns=int(plan.host_ns.sum()),
        host_target_ns=int(plan.host_ns.sum()) - moved_host,
    )


def _offload_assumptions(plan: Offload) -> tuple[str, ...]:
    return (
        "CPU-only source: each leaf op with recorded shapes moved onto the device, priced at "
        f"{DEFAULT_EFFICIENCY:.0%} of its roofline bound plus the chip's fixed kernel time; its "
        f"host time becomes {HOST_DISPATCH_NS / 1e3:.0f} µs of dispatch",
        "views, allocations, data loading and ops without shapes stay on the host "
        f"({plan.unpriced} leaf ops without recorded shapes)",
        "aten::item / _local_scalar_dense wait for the device work launched before them",
        f"the low-high range: roofline costs ±{UNCERTAINTY_ROOFLINE:.0%}",
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
        kind = _collective_kind(str(a[V.ARG_COLLECTIVE][j] or trace.name(int(rows[j]))))
        s = collective_s(src, nbytes=nbytes, world=int(group), collective=kind)
        t = collective_s(tgt, nbytes=nbytes, world=int(group), collective=kind)
        out[j] = t / s if s > 0 else out[j]
    return out


def _collective_kind(name: str) -> str:
    low = name.lower().replace(" ", "")
    return next((v for k, v in _COLLECTIVE_KINDS.items() if k in low), "broadcast")


def _launching_ops(
    ctx: AnalysisContext, items: np.ndarray, native: frozenset[str] = frozenset()
) -> tuple[np.ndarray, np.ndarray]:
    """Per item: the innermost host op around its launching call (-1: none) and the outermost
    op around it that the Neuron fallback table names (-1: none)."""
    trace, w = ctx.trace, ctx.work
    c = trace.columns
    n = len(items)
    inner, fb = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    corr = c[S.CORRELATION][w.rows[items]]
    calls = np.flatnonzero(
        trace.mask(kind=S.EventKind.RUNTIME, ph=S.Phase.COMPLETE)
        & np.isin(c[S.CORRELATION], corr[corr > 0])
    )
    if len(calls) == 0:
        return inner, fb
    ops = np.flatnonzero(trace.mask(kind=S.EventKind.CPU_OP, ph=S.Phase.COMPLETE))
    rows = np.concatenate([ops, calls])
    start = c[S.TS_NS][rows]
    end = start + c[S.DUR_NS][rows]
    thread = np.unique(
        np.stack([c[S.PID][rows], c[S.TID][rows]], axis=1), axis=0, return_inverse=True
    )[1].reshape(-1)
    order = np.lexsort((-end, start, thread))
    rows, start, end, thread = rows[order], start[order], end[order], thread[order]
    parent = _tree.parents(thread, start, end)
    is_op = np.isin(rows, ops)
    innermost = _tree.innermost_marked(parent, is_op)
    fallback_ids = {
        i
        for i, s in enumerate(trace.strings)
        if _fallback_name(s) and s.split(".")[0].rstrip("_") not in {n.rstrip("_") for n in native}
    }
    is_fb = is_op & np.isin(
        c[S.NAME_ID][rows], np.fromiter(fallback_ids, np.int64, len(fallback_ids))
    )
    outer_fb = _tree.outermost_marked(parent, is_fb)
    call_at = np.flatnonzero(~is_op)
    keys = c[S.CORRELATION][rows[call_at]]
    by_key = np.argsort(keys, kind="stable")
    k = np.clip(np.searchsorted(keys[by_key], corr), 0, max(len(keys) - 1, 0))
    hit = (corr > 0) & (keys[by_key][k] == corr)
    at = call_at[by_key[k[hit]]]
    inner[hit] = np.where(innermost[at] >= 0, rows[np.maximum(innermost[at], 0)], -1)
    fb[hit] = np.where(outer_fb[at] >= 0, rows[np.maximum(outer_fb[at], 0)], -1)
    return inner, fb


def _fallback_name(name: str) -> bool:
    return name.startswith("aten::") and falls_back(name.split(".")[0], "")


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


def _name_matches(trace: Trace, rows: np.ndarray, pattern: re.Pattern[str]) -> np.ndarray:
    """Whether each row's name matches, tested once per distinct name."""
    ids, inverse = np.unique(trace.col(S.NAME_ID)[rows], return_inverse=True)
    hit = np.array([bool(pattern.search(trace.strings[i])) for i in ids.tolist()], bool)
    return hit[inverse.reshape(-1)] if len(rows) else np.zeros(0, bool)


def _names(trace: Trace, rows: np.ndarray) -> np.ndarray:
    ids, inverse = np.unique(trace.col(S.NAME_ID)[rows], return_inverse=True)
    return np.array([trace.strings[i] for i in ids.tolist()], dtype=object)[inverse.reshape(-1)]


def _fallback_items(
    ctx: AnalysisContext,
    items: np.ndarray,
    top_fallback: np.ndarray,
    cost: _OpCosts,
    device_work: np.ndarray,
) -> np.ndarray:
    """Items the target would not run: launched inside a fallback op, or by an op on float64."""
    f64 = cost.priced & (cost.dtype == "float64")
    return device_work & ((top_fallback >= 0) | f64)


def _fallback_delays(
    ctx: AnalysisContext,
    graph: DependencyGraph,
    items: np.ndarray,
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
    copy_s = costs.bytes_moved / tgt.host_link_bytes_per_s() + 2 * tgt.dma_fixed_ns * 1e-9
    extra = np.where(costs.priced, np.round((host_s + copy_s) * 1e9), 0).astype(np.int64)
    order = np.argsort(at, kind="stable")
    return HostDelays(at[order], awaited[order], extra[order])


def _classes(graph, costs, recorded, projected, n: int) -> tuple[ClassRow, ...]:  # noqa: ANN001
    """Per-step means by class: device time summed per class, host delays, idle = steps' wall
    time less the device's busy union (one device: the trace's)."""
    rows = []
    for k, name in enumerate(CLASSES[:4]):
        if name == "compute":
            mine = np.isin(costs.cls, (CLASSES.index("compute"), CLASSES.index("memory_bound")))
        else:
            mine = costs.cls == k
        rows.append(
            ClassRow(
                name,
                float(costs.source_duration[mine].sum()) / n / 1e6,
                float(costs.duration[mine].sum()) / n / 1e6,
            )
        )
    rows.append(ClassRow("host", costs.host_source_ns / n / 1e6, costs.host_target_ns / n / 1e6))
    rows.append(
        ClassRow(
            "idle",
            max(recorded.mean_step_ns / 1e6 - _busy_ms(recorded, graph.duration, n), 0.0),
            max(projected.mean_step_ns / 1e6 - _busy_ms(projected, costs.duration, n), 0.0),
        )
    )
    return tuple(rows)


def _busy_ms(timeline, duration: np.ndarray, n: int) -> float:  # noqa: ANN001
    """Mean per step of the union of the replayed items' spans (device busy)."""
    live = duration > 0
    if not live.any():
        return 0.0
    s, e = timeline.start_ns[live], timeline.end_ns[live]
    order = np.argsort(s, kind="stable")
    s, e = s[order], np.maximum.accumulate(e[order])
    new = np.r_[True, s[1:] > e[:-1]]
    starts, ends = s[new], np.r_[e[np.flatnonzero(new)[1:] - 1], e[-1]]
    return float((ends - starts).sum()) / n / 1e6


def _ops(costs: _Costs, n: int, *, fallback: bool, top: int | None) -> tuple[OpRow, ...]:
    """Ops by |target - source| per step, largest first (fallbacks: only the fallback ops)."""
    mine = costs.fallback if fallback else ~costs.fallback
    idx = np.flatnonzero(mine)
    if len(idx) == 0:
        return ()
    names = costs.name[idx]
    uniq, inv = np.unique(names.astype(str), return_inverse=True)
    src = np.bincount(inv, weights=costs.source_duration[idx], minlength=len(uniq))
    tgt = np.bincount(inv, weights=costs.duration[idx], minlength=len(uniq))
    count = np.bincount(inv, minlength=len(uniq))
    # an op's class: that of its longest item (cuDNN launches helper kernels beside the product)
    longest = np.lexsort((costs.source_duration[idx], inv))
    last = np.r_[np.flatnonzero(np.diff(inv[longest])), len(idx) - 1]
    cls = costs.cls[idx][longest][last]
    order = np.argsort(-np.abs(tgt - src), kind="stable")[:top]
    return tuple(
        OpRow(
            name=str(uniq[k]),
            cls=CLASSES[int(cls[k])],
            count=int(count[k]),
            source_ms=float(src[k]) / n / 1e6,
            target_ms=float(tgt[k]) / n / 1e6,
            fallback=fallback,
        )
        for k in order.tolist()
    )


def _assumptions(
    src: ChipSpec | None, tgt: ChipSpec | None, same: bool, graph: DependencyGraph, costs: _Costs
) -> tuple[str, ...]:
    out = [
        "host time outside device waits is carried over unchanged (same host)",
        "host threads shift together at each blocking wait (the launching thread gates the step)",
    ]
    if len(graph):
        out.append(
            f"launch latency on an idle queue: the trace's median, {graph.base_latency_ns / 1e3:.1f} µs"
        )
    if same:
        out.append("target is the source chip: recorded durations replayed, no cost swapped")
        return tuple(out)
    assert tgt is not None
    if src is None:  # a CPU-only source: _offload_assumptions says the rest
        out.append(
            f"launch latency on {tgt.name}: {tgt.launch_latency_ns / 1e3:.1f} µs (docs/chips.md)"
        )
        return tuple(out)
    n, priced = len(costs.priced), int(costs.priced.sum())
    out += [
        f"device ops scaled by the ratio of their roofline bound on {tgt.name} to {src.name} "
        "(achieved fraction of the bound carried over)",
        f"{priced} of {n} device items priced from their op's recorded shapes; the rest scaled "
        "by one resource's ratio (matrix kernels by FP32 peak, others by HBM bandwidth)",
        "convolution outputs priced at stride 1 (strides are not recorded)",
        "FP32 convolutions on TF32 tensor cores where the chip has them (cuDNN's default), FP32 "
        "matrix products at the FP32 rate (PyTorch's matmul default)",
        "ops without a recorded dtype priced as float32",
        f"launch latency on {tgt.name}: {tgt.launch_latency_ns / 1e3:.1f} µs (docs/chips.md)",
        "collectives by the ring model on the target's links, group size and message size from "
        "the trace where recorded (else the link bandwidth ratio)",
        "the low-high range: per-class cost uncertainty "
        + ", ".join(f"{k} ±{v:.0%}" for k, v in UNCERTAINTY.items())
        + f", unpriced kernels ±{UNCERTAINTY_UNPRICED:.0%}",
    ]
    if tgt.host_fallback:
        out.append(
            "ops in Neuron's fallback table (and float64 ops) run on the host: a wait for the "
            "device, their bytes over the host link, host compute at "
            f"{DEFAULT_EFFICIENCY:.0%} of the host profile's roofline (docs/chips.md)"
        )
    out.append("eager execution: one launch per kernel as recorded (no compiled graphs)")
    return tuple(out)
