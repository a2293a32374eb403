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

from dataclasses import dataclass, replace

import numpy as np

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.analysis._device import COMPUTE
from neuron_profiler.analysis.context import AnalysisContext, Options
from neuron_profiler.analysis.device_costs import (
    CLASSES,
    UNCERTAINTY,
    UNCERTAINTY_ROOFLINE,
    UNCERTAINTY_UNPRICED,
    ItemCosts,
    offload_costs,
    swap_costs,
)
from neuron_profiler.analysis.graph_launches import (
    LaunchSites,
    as_graph_launches,
    launch_sites,
    offload_sites,
    recorded_regions,
)
from neuron_profiler.analysis.offload import Offload, offload
from neuron_profiler.analysis.peaks import device_chip
from neuron_profiler.analysis.replay import (
    QUEUE_ROUNDS,
    DependencyGraph,
    HostDelays,
    dependency_graph,
    graph_items,
    replay,
    replay_with_queue_depth,
)
from neuron_profiler.analysis.what_if import (
    Replayable,
    Runner,
    compiled_granularity,
    parse_what_if,
    what_if_step,
)
from neuron_profiler.costmodel.chips import CHIPS, ChipSpec, chip
from neuron_profiler.costmodel.fallbacks import normalise_op, out_of_place
from neuron_profiler.costmodel.roofline import DEFAULT_EFFICIENCY, KERNEL_EFFICIENCY
from neuron_profiler.errors import NeuronProfilerError
from neuron_profiler.trace.model import Trace

SAME = "same"
TARGETS = (SAME, *CHIPS)  # what a projection takes as its target
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


class UnknownSourceChip(NeuronProfilerError):
    """A trace whose deviceProperties name no known chip, projected onto another chip: its
    times cannot be scaled without the source chip's figures. The CLI asks for
    ``--source-chip``; the plugin, which has no flags, words its own request (``PROBLEM``)."""

    exit_code = 2
    PROBLEM = "no known chip in its deviceProperties"

    def __init__(self, path: object) -> None:
        self.path = path
        super().__init__(
            f"{path}: {self.PROBLEM}; name the chip it ran on with --source-chip "
            f"({', '.join(CHIPS)})"
        )


def source_chip(trace: Trace) -> ChipSpec | None:
    """The chip the trace ran on (``peaks.device_chip``)."""
    return device_chip(trace)


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
    trace's chip: needed when its deviceProperties name none, an override (stated among the
    assumptions) when they name another; ``top``: op rows kept (None: all);
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
            raise UnknownSourceChip(trace.source)
    graph = dependency_graph(ctx)
    recorded = replay(graph, graph.duration)
    same = tgt is None or (src is not None and tgt.name == src.name)
    source_graph = graph
    notes: list[str] = []
    named = source_chip(trace) if source else None  # the chip its deviceProperties name
    if named is not None and src is not None and named.name != src.name:
        notes.append(
            f"source chip {src.name} as chosen, though the trace's deviceProperties name "
            f"{named.name}"
        )
    plan = None
    if not same and len(ctx.work) == 0:  # a CPU-only trace: its ops moved onto the target
        plan = offload(ctx, tgt)  # type: ignore[arg-type]
        graph, costs, shift = plan.graph, offload_costs(ctx, plan, tgt), 0  # type: ignore[arg-type]
        sites, compute = offload_sites(ctx, plan), np.ones(len(plan.graph), bool)
    overhead = _emulator_overhead(ctx)
    if plan is None:
        shift = 0 if same else tgt.launch_latency_ns - graph.base_latency_ns  # type: ignore[union-attr]
        items = graph_items(ctx)
        compute = ctx.work.queue[items] == COMPUTE
        regions = not same and tgt.graph_executions and len(ctx.names.compiled) > 0  # type: ignore[union-attr]
        # what launched each item: for the compiled what-if, or a trace with compiled regions
        # on a target that launches each once (a lone graph execution is one launch already)
        sites = None
        if regions or any(e.kind == "compiled" for e in edits):
            sites = launch_sites(ctx, items, graph.sync_start_ns)
        recorded_graph = graph

        def costs_for(native: frozenset[str]) -> tuple[DependencyGraph, ItemCosts, list[str]]:
            """The target's costs with ``native`` ops run natively: the one way the projection
            and the no-fallback what-if build them (regions merged, emulator overhead out)."""
            out = swap_costs(ctx, recorded_graph, src, tgt, same, native)
            g, said = recorded_graph, []
            if regions and sites is not None:
                g, out, said = _one_launch_per_region(g, out, sites, tgt)  # type: ignore[arg-type]
            if len(overhead.at_ns):
                out = replace(out, delays=out.delays.merge(overhead))
            return g, out, said

        graph, costs, note = costs_for(frozenset())
        notes += note
    else:

        def costs_for(native: frozenset[str]) -> tuple[DependencyGraph, ItemCosts, list[str]]:
            """A CPU-only trace's ops moved with ``native`` ops run natively: its own graph."""
            moved = offload(ctx, tgt, native)  # type: ignore[arg-type]
            out = offload_costs(ctx, moved, tgt)  # type: ignore[arg-type]
            if len(overhead.at_ns):
                out = replace(out, delays=out.delays.merge(overhead))
            return moved.graph, out, []

        if len(overhead.at_ns):
            costs = replace(costs, delays=costs.delays.merge(overhead))
    if len(overhead.at_ns):
        notes.append(
            "the emulator's own host work (its dispatch, numerics: 'emulator overhead' spans, "
            f"{-overhead.extra_ns.sum() / max(len(ctx.steps), 1) / 1e6:.3f} ms a step) left "
            "out of the projected host time: no device has it"
        )
    runner_for = lambda g: _runner(g, None if same else tgt, shift)  # noqa: E731
    run = runner_for(graph)
    projected, blocked, converged = run(costs.duration, costs.delays)
    merged = bool(not same and tgt is not None and tgt.graph_executions and plan is None)
    replayable = Replayable(
        graph,
        costs,
        sites,
        compute,
        runner_for,
        merged,
        lambda native: costs_for(native)[:2],
    )
    edited = []
    n = max(len(graph.step_start_ns), 1)
    for edit in edits:
        result = what_if_step(ctx, replayable, edit, src, tgt, same)
        step = result.step_ns / 1e6
        edited.append(WhatIfRow(edit.text, step, step - projected.mean_step_ns / 1e6))
        if edit.kind == "compiled":
            notes.append(
                f"--what-if compiled: {compiled_granularity(result)}: "
                f"{result.launches_saved / n:.0f} launches a step saved in "
                f"{result.graphs / n:.0f} graphs (their ops' host time with them; kernels, "
                "fusion and fixed kernel time unchanged)"
            )
        if edit.kind == "no-fallback":
            host_run = costs.name[costs.fallback].tolist() + (
                plan.fallback_names.tolist() if plan is not None else []
            )
            notes.extend(_unknown_fallback(edit.op, host_run, same))
        if edit.kind == "overlap-comm":
            notes.append(
                "--what-if overlap-comm: collectives no longer wait for the compute they were "
                "recorded behind; each starts at its launch, beside the compute still queued "
                "(its data assumed ready there: an upper bound of the overlap)"
            )
    low, *_ = run(np.round(costs.duration * (1 - costs.uncertainty)).astype(np.int64), costs.delays)
    high, *_ = run(
        np.round(costs.duration * (1 + costs.uncertainty)).astype(np.int64), costs.delays
    )
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
        classes=_classes(source_graph, costs, ctx.mean_step_ns, projected, n),
        ops=_ops(costs, n, fallback=False, top=top),
        fallbacks=_ops(costs, n, fallback=True, top=top)
        if plan is None
        else _offload_fallbacks(plan, n, top),
        assumptions=_assumptions(src, tgt, same, source_graph, costs)
        + (_offload_assumptions(plan) if plan is not None else ())
        + _queue_assumption(tgt, same, blocked, n, converged)
        + tuple(notes),
        priced=int(costs.priced.sum()),
        items=len(graph),
        what_if=tuple(edited),
    )


def _emulator_overhead(ctx: AnalysisContext) -> HostDelays:
    """The emulator's own host work inside the steps (its overhead spans, as one union) as host
    time taken out at each span's end."""
    spans = ctx.emulator_overhead
    inside = I.overlap_per_window(ctx.steps.host_spans, spans.start, spans.end) > 0
    s, e = spans.start[inside], spans.end[inside]
    return HostDelays(e, np.full(len(e), -1, np.int64), -(e - s))


def _one_launch_per_region(
    graph: DependencyGraph, costs: ItemCosts, sites: LaunchSites, tgt: ChipSpec
) -> tuple[DependencyGraph, ItemCosts, list[str]]:
    """Recorded compiled regions (torch.compile's spans, compiled graph executions) as one graph
    launch each on a target that runs them as one execution."""
    graph, saved, launches = as_graph_launches(graph, sites, recorded_regions(sites))
    if launches == 0:
        return graph, costs, []
    n = max(len(graph.step_start_ns), 1)
    note = (
        f"compiled regions run as one graph launch each on {tgt.name}: {launches / n:.0f} "
        "launches a step saved (their launch calls' host time with them)"
    )
    return graph, replace(costs, delays=costs.delays.merge(saved)), [note]


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


def _offload_assumptions(plan: Offload) -> tuple[str, ...]:
    return (
        "CPU-only source: each outermost kernel-launching aten op with recorded shapes moved "
        f"onto the device, priced at {KERNEL_EFFICIENCY:.0%} of its roofline bound plus the "
        "chip's fixed kernel time (the emulated device's kernel time, costmodel.roofline)",
        "a moved op's host time becomes the framework's dispatch per aten op it runs "
        f"({plan.dispatch_ns / 1e3:.1f} µs: the trace's median op that launches nothing) plus "
        "the backend's launch per kernel (ChipSpec.host_launch_ns, the emulator's figure)",
        "views, allocations, data loading and ops without shapes stay on the host "
        f"({plan.unpriced} such ops without recorded shapes)",
        "aten::item / _local_scalar_dense / is_nonzero wait for the device work launched "
        "before them; aten::nonzero runs on the device and the host waits for it (on a target "
        "that runs it on the host, it stays there with the other fallbacks)",
        "host time outside the moved ops is carried over as recorded: on the CPU it includes "
        "the host allocator returning freed tensor memory to the OS (glibc's munmap of large "
        "blocks, e.g. zero_grad() dropping the gradients), which a device's caching allocator "
        "does not pay; recording the CPU run with MALLOC_MMAP_MAX_=0 leaves it out "
        "(docs/projection.md, emulator consistency)",
        f"the low-high range: roofline costs ±{UNCERTAINTY_ROOFLINE:.0%}",
    ) + (
        (
            f"{plan.fallback_unsized} of the {len(plan.fallback_names)} op runs the target "
            "runs on the host recorded no shapes to size their copies by: those copies are "
            "counted at a DMA's fixed time each way only",
        )
        if plan.fallback_unsized
        else ()
    )


def _classes(graph, costs, source_step_ns: float, projected, n: int) -> tuple[ClassRow, ...]:  # noqa: ANN001
    """Per-step means by class: device time summed per class, host delays, idle = steps' wall
    time less the device's busy union (one device: the trace's). The source side is the
    recording's (its mean step, its items' recorded spans), not the replay's, so its rows
    describe the trace the user has."""
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
            max(
                source_step_ns / 1e6 - _busy_ms(graph.start_ns, graph.start_ns + graph.duration, n),
                0.0,
            ),
            max(
                projected.mean_step_ns / 1e6 - _busy_ms(projected.start_ns, projected.end_ns, n),
                0.0,
            ),
        )
    )
    return tuple(rows)


def _busy_ms(start: np.ndarray, end: np.ndarray, n: int) -> float:
    """Mean per step of the union of the items' spans (device busy)."""
    live = end > start
    return I.union(start[live], end[live]).total / n / 1e6


def _unknown_fallback(op: str, names: list, same: bool) -> tuple[str, ...]:
    """The note for ``no-fallback:OP`` where OP is no op the target runs on the host here
    (``names``: those it does; a typo would otherwise read as "no change" without a word)."""
    host_run = sorted({str(n) for n in names})
    moved = {out_of_place(normalise_op(n)) for n in host_run}  # (swap_costs' match)
    if out_of_place(normalise_op(op)) in moved and not same:
        return ()
    if same:
        why = "the target is the trace's own chip: no op changes side"
    else:
        listed = ", ".join(host_run[:FALLBACKS_LISTED]) + (
            ", ..." if len(host_run) > FALLBACKS_LISTED else ""
        )
        why = f"the target runs {'these ops' if host_run else 'no op'} on the host here" + (
            f": {listed}" if host_run else ""
        )
    return (f"--what-if no-fallback:{op}: no change ({why})",)


FALLBACKS_LISTED = 8


def _offload_fallbacks(plan: Offload, n: int, top: int | None) -> tuple[OpRow, ...]:
    """A CPU-only trace's ops the target runs on the host, per step: their recorded host time,
    and on the target that time plus their copies, largest change first."""
    if len(plan.fallback_names) == 0:
        return ()
    uniq, inv = np.unique(plan.fallback_names.astype(str), return_inverse=True)
    host = np.bincount(inv, weights=plan.fallback_host_ns, minlength=len(uniq))
    copies = np.bincount(inv, weights=plan.fallback_copy_ns, minlength=len(uniq))
    count = np.bincount(inv, minlength=len(uniq))
    order = np.argsort(-copies, kind="stable")[:top]
    return tuple(
        OpRow(
            name=str(uniq[k]),
            cls="host",
            count=int(count[k]),
            source_ms=float(host[k]) / n / 1e6,
            target_ms=float(host[k] + copies[k]) / n / 1e6,
            fallback=True,
        )
        for k in order.tolist()
    )


def _ops(costs: ItemCosts, n: int, *, fallback: bool, top: int | None) -> tuple[OpRow, ...]:
    """Ops by |target - source| per step, largest first (fallbacks: only the fallback ops)."""
    mine = costs.fallback if fallback else ~costs.fallback
    idx = np.flatnonzero(mine)
    if len(idx) == 0:
        return ()
    names = costs.name[idx]
    # (the names as objects: a fixed-width text array is as wide as the longest name)
    uniq, inv = np.unique(names.astype(object), return_inverse=True)
    inv = inv.reshape(-1)
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
    src: ChipSpec | None, tgt: ChipSpec | None, same: bool, graph: DependencyGraph, costs: ItemCosts
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
    out.append(
        "eager ops: one launch per kernel as recorded"
        + (
            "; a compiled region's kernels one graph launch per execution"
            if tgt.graph_executions
            else " (compiled regions' kernels too)"
        )
    )
    return tuple(out)
