"""A CPU-only trace's ops moved onto a device: the dependency graph the projection replays when
the source has no device time (docs/projection.md, "CPU-only traces")::

    plan = offload(ctx, chip("trn2"))
    replay(plan.graph, plan.graph.duration, delays=plan.delays)

Each outermost kernel-launching aten op of the steps (the op the script called: aten::linear
with the addmm inside it) with recorded shapes becomes one device item: launched at the op's
recorded start, lasting the cost model's kernel time on the target (``roofline.kernel_s``, the
emulated device's); the op's host time shrinks to what the target's host spends on it (the host
no longer computes it): the framework's dispatch per aten op it runs, measured in the trace on
ops that launch nothing, plus the backend's launch (``ChipSpec.host_launch_ns``) per kernel. Views,
allocations and metadata ops have no kernel and stay as they are; so do ops under a DataLoader
(data loading stays on the host) and ops without recorded shapes (counted); which ops launch
no kernel is ``vocabulary.NO_KERNEL_OPS`` (the emulator's rule too). The ops that may sync
(``vocabulary.SYNC_OP_NAMES``) make the host wait: one that only reads a value (``aten::item``,
``_local_scalar_dense``, ``is_nonzero``) for the device work launched before it, one with
device work of its own (``nonzero``, whose output size the host must read) for that work, at
its end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.analysis import _tree
from neuron_profiler.analysis import selections as sel
from neuron_profiler.analysis._args import arg_values
from neuron_profiler.analysis.context import AnalysisContext
from neuron_profiler.analysis.replay import DependencyGraph, HostDelays
from neuron_profiler.costmodel.chips import ChipSpec
from neuron_profiler.costmodel.fallbacks import falls_back, normalise_op, out_of_place
from neuron_profiler.costmodel.ops import TRACE_TYPES, OpCost, op_cost
from neuron_profiler.costmodel.roofline import host_copy_s, kernel_s
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import Trace


@dataclass(frozen=True)
class Offload:
    """The graph of the moved ops (items in op order), the host's delays (negative: compute the
    host no longer does; syncs), the op name per item, and what could not be priced."""

    graph: DependencyGraph
    delays: HostDelays
    names: np.ndarray
    costs: tuple[OpCost, ...]
    host_ns: np.ndarray  # each moved op's recorded host time (the CPU computing it)
    unpriced: int  # ops to move that recorded no shapes: left on the host
    rows: np.ndarray  # each moved op's row in the trace
    target_host_ns: np.ndarray  # each moved op's host time on the target (dispatch + launches)
    dispatch_ns: int  # the framework's host time per dispatched op, measured in the trace
    # ops the target runs on the host (costmodel.fallbacks): they stay, their inputs copied out
    # of device memory and their outputs back (``fallback_copy_ns``, on the host link)
    fallback_names: np.ndarray = field(default_factory=lambda: np.zeros(0, object))
    fallback_host_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    fallback_copy_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    fallback_unsized: int = 0  # of those, how many recorded no shapes to size the copies by


def offload(
    ctx: AnalysisContext, target: ChipSpec, native: frozenset[str] = frozenset()
) -> Offload:
    """``native``: ops the target runs natively though its fallback table names them (the
    no-fallback what-if)."""
    trace = ctx.trace
    c = trace.columns
    tree = _tree.nest(
        trace, np.flatnonzero(trace.mask(kind=S.EventKind.CPU_OP, ph=S.Phase.COMPLETE))
    )
    ops, start, end, parent = tree.rows, tree.start, tree.end, tree.parent
    name_id = c[S.NAME_ID][ops]
    names = sel.per_name(trace, name_id, str, object)  # (the string objects, not copies)
    aten = sel.per_name(trace, name_id, _is_aten)  # not autograd's own rows ("detach")
    kernel = aten & ~sel.per_name(trace, name_id, V.NO_KERNEL_OPS.__contains__)
    # the op the script called: the outermost kernel op (aten::linear with the addmm inside it,
    # aten::sum with the fill_ that starts it): what runs inside it goes with it
    leaf = kernel & (_tree.outermost_marked(parent, kernel) == np.arange(len(ops)))
    # data loading stays on the host: ops inside a DataLoader span (an op row in 2021's Kineto,
    # a user annotation since), on the op's own thread
    loading = _in_data_loading(ctx, tree)
    in_steps = I.overlap_per_window(ctx.steps.host_spans, start, start + 1) > 0
    candidate = leaf & ~loading & in_steps
    sync_op = candidate & sel.per_name(trace, name_id, V.SYNC_OP_NAMES.__contains__)
    # a value read never moves, whatever its input's size: it has no device work to price
    reads = sync_op & sel.per_name(trace, name_id, V.VALUE_READ_OPS.__contains__)
    # an op the target runs on the host stays there (by its name, or its float64 inputs)
    fallback = np.zeros(len(ops), bool)
    if target.host_fallback:
        fallback = _falls_back(trace, tree, name_id, candidate & ~reads, kernel, native)
    moved, costs, no_shapes = _priced(trace, ops, names, candidate & ~reads & ~fallback)
    unpriced = int((no_shapes & ~sync_op).sum())  # (a scalar read has nothing to price)
    # reads a value, or runs on the host: waits for the work launched before it
    sync = (sync_op & ~moved) | fallback
    items = np.flatnonzero(moved)
    launch = start[items]
    by_launch = np.argsort(launch, kind="stable")
    items, launch = items[by_launch], launch[by_launch]
    costs = tuple(costs[k] for k in by_launch.tolist())
    duration = np.array([_device_ns(cst, target) for cst in costs], np.int64)
    graph = _graph(ctx, launch, duration, target)
    dispatch = _framework_dispatch_ns(parent, aten & ~kernel, end - start, in_steps)
    target_host = _host_ns_on_target(parent, aten, kernel, items, dispatch, target)
    target_host = np.minimum(target_host, end[items] - start[items])
    shrink = target_host - (end[items] - start[items])
    syncs = np.flatnonzero(sync)
    before = np.searchsorted(launch, start[syncs], side="left") - 1
    # a sync op with device work of its own (nonzero) waits for it at its end, after its host
    # time has shrunk (same instant: the stable sort keeps the shrink first)
    own = np.flatnonzero(sync_op[items])
    # a fallback's copies (inputs out of device memory, outputs back) once it has run
    fb = np.flatnonzero(fallback)
    copy_ns, unsized = _fallback_copy_ns(trace, ops[fb], names[fb], target)
    at = np.concatenate([end[items], end[items[own]], start[syncs], end[fb]])
    awaited = np.concatenate(
        [np.full(len(items), -1), own, np.where(before >= 0, before, -1), np.full(len(fb), -1)]
    )
    extra = np.concatenate([shrink, np.zeros(len(own) + len(syncs), np.int64), copy_ns])
    o = np.argsort(at, kind="stable")
    return Offload(
        graph=graph,
        delays=HostDelays(at[o], awaited[o], extra[o]),
        names=names[items],
        costs=costs,
        host_ns=end[items] - start[items],
        unpriced=unpriced,
        rows=ops[items],
        target_host_ns=target_host,
        dispatch_ns=dispatch,
        fallback_names=names[fb],
        fallback_host_ns=(end - start)[fb],
        fallback_copy_ns=copy_ns,
        fallback_unsized=unsized,
    )


def _falls_back(
    trace: Trace,
    tree: _tree.Nesting,
    name_id: np.ndarray,
    candidate: np.ndarray,
    kernel: np.ndarray,
    native: frozenset[str],
) -> np.ndarray:
    """Which candidates the target runs on the host (``costmodel.fallbacks.falls_back``): the
    op, or an op recorded inside it (``aten::linalg_inv`` decomposes into the
    ``linalg_inv_ex`` that falls back), names a fallback; or one of its tensor inputs (a dim or
    more: a Python scalar is recorded as a 0-dim double) is float64. ``native`` ops excepted."""
    run_natively = {out_of_place(normalise_op(n)) for n in native}
    by_name = sel.per_name(
        trace,
        name_id,
        lambda n: falls_back(n, "") and out_of_place(normalise_op(n)) not in run_natively,
    )
    top = _tree.outermost_marked(tree.parent, kernel)  # each row's outermost kernel op
    named = np.zeros(len(name_id), bool)
    named[top[by_name & (top >= 0)]] = True
    out = candidate & named
    rest = np.flatnonzero(candidate & ~named)
    if len(rest):
        out[rest] = [_float64_tensor(d, t) for d, t in _recorded_inputs(trace, tree.rows[rest])]
    return out


def _float64_tensor(dims: list | None, types: list | None) -> bool:
    """Whether a recorded input of at least one dimension is float64 (``double``)."""
    if dims is None or types is None:
        return False
    return any(
        isinstance(d, list) and len(d) > 0 and falls_back("", TRACE_TYPES.get(t, ""))
        for d, t in zip(dims, types, strict=False)
    )


def _in_data_loading(ctx: AnalysisContext, tree: _tree.Nesting) -> np.ndarray:
    """Per op of ``tree``: whether it starts inside a DataLoader span on its own thread."""
    c = ctx.trace.columns
    spans = sel.dataloader_rows(ctx.trace, ctx.names)
    out = np.zeros(len(tree.rows), bool)
    if len(spans) == 0:
        return out
    pid, tid = c[S.PID][tree.rows], c[S.TID][tree.rows]
    for p, t in {(int(a), int(b)) for a, b in zip(c[S.PID][spans], c[S.TID][spans], strict=True)}:
        mine = spans[(c[S.PID][spans] == p) & (c[S.TID][spans] == t)]
        u = I.union(c[S.TS_NS][mine], c[S.TS_NS][mine] + c[S.DUR_NS][mine])
        rows = np.flatnonzero((pid == p) & (tid == t))
        start = tree.start[rows]
        out[rows] = I.overlap_per_window(u, start, start + 1) > 0
    return out


def _fallback_copy_ns(
    trace: Trace, rows: np.ndarray, names: np.ndarray, target: ChipSpec
) -> tuple[np.ndarray, int]:
    """Each fallback's copies on the target's host link: the bytes its recorded shapes move
    (inputs read, outputs written), plus a DMA's fixed time each way; 0 bytes where they cannot
    be read (the fixed times only: how many, the second value)."""
    out = np.zeros(len(rows), np.int64)
    unsized = 0
    for j, (dims, types) in enumerate(_recorded_inputs(trace, rows)):
        cst = _recorded_cost(str(names[j]), dims, types)
        nbytes = cst.bytes_moved if cst is not None else 0
        unsized += nbytes == 0
        out[j] = round(host_copy_s(target, nbytes, copies=2) * 1e9)
    return out, unsized


def _recorded_inputs(trace: Trace, rows: np.ndarray) -> list[tuple[list | None, list | None]]:
    """Each row's recorded input shapes and types (``Input Dims`` / ``Input type``; None where
    the trace holds none, or not as a list)."""
    a = arg_values(trace, rows, (*V.ARG_INPUT_DIMS_KEYS, V.ARG_INPUT_TYPE))
    out = []
    for j in range(len(rows)):
        dims = next((a[k][j] for k in V.ARG_INPUT_DIMS_KEYS if a[k][j] is not None), None)
        types = a[V.ARG_INPUT_TYPE][j]
        out.append(
            (dims if isinstance(dims, list) else None, types if isinstance(types, list) else None)
        )
    return out


def _recorded_cost(name: str, dims: list | None, types: list | None) -> OpCost | None:
    """The op's cost from its recorded inputs (float32 where no types were recorded); None
    where there are no shapes or the cost model cannot read them."""
    if dims is None:
        return None
    try:
        return op_cost(name, dims, types if types is not None else ["float"] * len(dims))
    except (TypeError, ValueError, IndexError):
        return None


def _is_aten(name: str) -> bool:
    return name.startswith(V.ATEN_PREFIX)


def _framework_dispatch_ns(
    parent: np.ndarray,
    no_kernel: np.ndarray,
    dur: np.ndarray,
    in_steps: np.ndarray,
) -> int:
    """The framework's host time per dispatched op on this host, as the trace measured it: the
    median of its steps' childless ops that launch nothing (views, metadata: dispatcher work
    only, the same on any backend). 0 when the steps have none."""
    has_child = np.zeros(len(parent), bool)
    has_child[parent[parent >= 0]] = True
    mine = no_kernel & ~has_child & in_steps
    return int(np.median(dur[mine])) if mine.any() else 0


def _host_ns_on_target(
    parent: np.ndarray,
    aten: np.ndarray,
    kernel: np.ndarray,
    items: np.ndarray,
    dispatch_ns: int,
    target: ChipSpec,
) -> np.ndarray:
    """Host time of each moved op on the target: the framework's dispatch for every aten op it
    runs (itself and those inside it, as recorded) plus the backend's launch
    (``ChipSpec.host_launch_ns``, the emulator's figure) for each innermost kernel op in it."""
    top = _tree.outermost_marked(parent, kernel)  # each row's moved op (outermost kernel op)
    has_kernel_child = np.zeros(len(parent), bool)
    has_kernel_child[parent[kernel & (parent >= 0)]] = True
    n = len(parent)
    ops_in = np.bincount(top[aten & (top >= 0)], minlength=n)
    launches = np.bincount(top[kernel & ~has_kernel_child & (top >= 0)], minlength=n)
    return (ops_in[items] * dispatch_ns + launches[items] * target.host_launch_ns).astype(np.int64)


def _priced(
    trace: Trace, ops: np.ndarray, names: np.ndarray, candidate: np.ndarray
) -> tuple[np.ndarray, list[OpCost], np.ndarray]:
    """Which candidates have a cost from their recorded shapes, their costs (in op order),
    which recorded no shapes (or shapes the cost model cannot read)."""
    idx = np.flatnonzero(candidate)
    moved = np.zeros(len(ops), bool)
    unpriced = np.zeros(len(ops), bool)
    costs: list[OpCost] = []
    for k, (dims, types) in zip(idx.tolist(), _recorded_inputs(trace, ops[idx]), strict=True):
        cst = _recorded_cost(str(names[k]), dims, types)
        if cst is None:
            unpriced[k] = True
        elif cst.bytes_moved > 0:
            moved[k] = True
            costs.append(cst)
    return moved, costs, unpriced


def _device_ns(cst: OpCost, target: ChipSpec) -> int:
    """The cost model's kernel time (``roofline.kernel_s``: the emulated device's too)."""
    peak = target.matrix_flops_per_s(cst.dtype) if cst.matrix else target.vector_flops_per_s()
    hbm = target.hbm_bytes_per_s()
    return math.ceil(kernel_s(cst.flops, cst.bytes_moved, peak, hbm, target.kernel_fixed_ns) * 1e9)


def _graph(
    ctx: AnalysisContext, launch: np.ndarray, duration: np.ndarray, target: ChipSpec
) -> DependencyGraph:
    """One compute queue, every item launch-bound at the target's launch latency."""
    n = len(launch)
    steps = ctx.steps
    host_end = steps.end_ns if steps.host_end_ns is None else steps.host_end_ns
    last = np.flatnonzero((launch >= steps.start_ns[-1]) & (launch < host_end[-1]))
    z = np.zeros(0, np.int64)
    return DependencyGraph(
        queue=np.zeros(n, np.int64),
        device=np.zeros(n, np.int64),
        launch_ns=launch,
        start_ns=launch + target.launch_latency_ns,
        duration=duration,
        latency_ns=np.full(n, target.launch_latency_ns, np.int64),
        gap_ns=np.zeros(n, np.int64),
        launch_bound=np.ones(n, bool),
        base_latency_ns=target.launch_latency_ns,
        sync_start_ns=z,
        sync_end_ns=z,
        sync_awaited=z,
        sync_return_ns=z,
        step_start_ns=steps.start_ns,
        step_host_end_ns=host_end,
        step_end_ns=steps.end_ns,
        last_step_items=last,
    )
