"""What-if edits replayed on a projection's graph (``neuron-prof project --what-if``)::

    edit = parse_what_if("batch x2")
    step_ns = what_if_step(ctx, graph, costs, edit, source, target, same, run)

Each edit changes the item costs, the host delays or the graph's launches and replays the same
graph: ``no-fallback:OP`` (the op runs natively), ``no-data-stall`` (the steps' DataLoader waits
take no time), ``batch xN`` (device work and copies scaled by N), ``compiled`` (eager ops between
graph breaks run as one graph launch, per top-level module where the trace records module
frames, ``graph_launches``), ``overlap-comm`` (collectives no
longer wait for the compute they were serialised behind).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.analysis._device import NO_LAUNCH
from neuron_profiler.analysis.context import AnalysisContext
from neuron_profiler.analysis.device_costs import CLASSES, ItemCosts
from neuron_profiler.analysis.graph_launches import (
    COMPILED_MODULE_DEPTH,
    LaunchSites,
    as_graph_launches,
    eager_regions,
    module_graphs,
)
from neuron_profiler.analysis.replay import (
    DependencyGraph,
    HostDelays,
    ReplayedTimeline,
)
from neuron_profiler.costmodel.chips import ChipSpec
from neuron_profiler.costmodel.fallbacks import normalise_op
from neuron_profiler.errors import NeuronProfilerError
from neuron_profiler.trace import schema as S

WHAT_IF = ("no-fallback:OP", "no-data-stall", "batch xN", "compiled", "overlap-comm")
# ``batch xN``: N scales device time linearly, so a sane range keeps ns times within int64
BATCH_FACTORS = (1e-3, 1e4)


@dataclass(frozen=True)
class Edit:
    text: str
    kind: str  # "no-fallback", "no-data-stall", "batch", "compiled", "overlap-comm"
    op: str = ""
    factor: float = 1.0


Runner = Callable[[np.ndarray, HostDelays], tuple[ReplayedTimeline, int, bool]]


@dataclass(frozen=True)
class Replayable:
    """What an edit replays: the projection's graph and costs, what launched each item, which
    items are compute, and how a graph is replayed on the target (``runner_for``)."""

    graph: DependencyGraph
    costs: ItemCosts
    sites: LaunchSites | None  # None when no edit needs it (``compiled`` does)
    compute: np.ndarray
    runner_for: Callable[[DependencyGraph], Runner]
    regions_merged: bool = False  # the graph launches recorded compiled regions once already
    # the graph and costs with these ops run natively, built as the projection's own
    costs_for: Callable[[frozenset[str]], tuple[DependencyGraph, ItemCosts]] | None = None


@dataclass(frozen=True)
class EditResult:
    """The mean step with the edit and what it changed (launches merged into graphs: saved;
    ``modules``: the top-level modules the compiled graphs were cut at, 0: no module frames,
    graphs cut at graph breaks only)."""

    step_ns: float
    launches_saved: int = 0
    graphs: int = 0
    modules: int = 0


def parse_what_if(text: str, source: str = "") -> Edit:
    """``no-fallback:OP`` (the op runs natively on the target), ``no-data-stall`` (the steps'
    DataLoader waits take no time), ``batch xN`` (device work, copies included, scaled by N;
    collectives, whose size is the model's, and host time unchanged), ``compiled`` (graphs
    between graph breaks, one launch each), ``overlap-comm`` (collectives beside compute)."""
    t = text.strip()
    if t.startswith("no-fallback:") and len(t) > len("no-fallback:"):
        op = t.split(":", 1)[1].strip()
        return Edit(t, "no-fallback", op=normalise_op(op))
    if t in ("no-data-stall", "compiled", "overlap-comm"):
        return Edit(t, t)
    where = f"{source}: " if source else ""
    if t.replace(" ", "").startswith("batchx"):
        try:
            factor = float(t.replace(" ", "")[len("batchx") :])
        except ValueError:
            factor = 0.0
        if BATCH_FACTORS[0] <= factor <= BATCH_FACTORS[1]:
            return Edit(t, "batch", factor=factor)
        raise NeuronProfilerError(
            f"{where}--what-if {t!r}: the batch factor must be a number from "
            f"{BATCH_FACTORS[0]:g} to {BATCH_FACTORS[1]:g}",
            exit_code=2,
        )
    why = f"unknown (choose {', '.join(WHAT_IF)})"
    raise NeuronProfilerError(f"{where}--what-if {t!r}: {why}", exit_code=2)


def what_if_step(
    ctx: AnalysisContext,
    r: Replayable,
    edit: Edit,
    src: ChipSpec | None,
    tgt: ChipSpec | None,
    same: bool,
) -> EditResult:
    """The mean step replayed with one edit."""
    graph, costs = r.graph, r.costs
    duration, delays = costs.duration, costs.delays
    if edit.kind == "no-fallback" and r.costs_for is not None and not same:
        graph, edited = r.costs_for(frozenset({edit.op}))
        duration, delays = edited.duration, edited.delays
    elif edit.kind == "batch":
        scaled = costs.cls != CLASSES.index("collectives")
        duration = np.where(scaled, np.round(duration * edit.factor), duration).astype(np.int64)
        # the host time the target adds (positive delays: fallbacks' copies, and their host
        # compute where the source ran them on the device) moves the data: it scales too
        extra = delays.extra_ns
        grown = np.where(extra > 0, np.round(extra * edit.factor), extra).astype(np.int64)
        delays = HostDelays(delays.at_ns, delays.awaited, grown)
    elif edit.kind == "no-data-stall":
        delays = delays.merge(_data_loading(ctx))
    elif edit.kind == "compiled":
        assert r.sites is not None
        breaks = _graph_breaks(r)
        modules = module_graphs(ctx, r.sites)
        group = eager_regions(
            graph,
            r.sites,
            r.compute,
            breaks,
            recorded=not r.regions_merged,
            modules=modules.of_item,
        )
        graph, saved, launches = as_graph_launches(graph, r.sites, group)
        graphs = len(np.unique(group[group >= 0]))
        step = r.runner_for(graph)(duration, delays.merge(saved))[0].mean_step_ns
        return EditResult(step, launches, graphs, _modules_used(modules.of_item, group))
    elif edit.kind == "overlap-comm":
        graph = replace(graph, after=None)
    return EditResult(r.runner_for(graph)(duration, delays)[0].mean_step_ns)


def _modules_used(of_item: np.ndarray | None, group: np.ndarray) -> int:
    """How many distinct modules the grouped items ran in (0: no module frames)."""
    if of_item is None:
        return 0
    return len(np.unique(of_item[(group >= 0) & (of_item >= 0)]))


def compiled_granularity(result: EditResult) -> str:
    """The assumptions line's words for how ``--what-if compiled`` cut its graphs."""
    if result.modules == 0:
        return (
            "each thread's compute launches of a step between graph breaks (host waits, "
            "host-run ops, copies, collectives) as one graph (no nn.Module frames in the trace: "
            "not per module)"
        )
    return (
        f"per module: each top-level module's (nesting depth {COMPILED_MODULE_DEPTH}, the root "
        f"module's children: {result.modules} modules) compute launches of a step between graph "
        "breaks (host waits, host-run ops, copies, collectives) as one graph, as torch.compile "
        "on each of them would give (ops outside any module frame: one graph between breaks)"
    )


def _graph_breaks(r: Replayable) -> np.ndarray:
    """Where a graph must end: host waits, host delays that wait for the device (ops the target
    runs on the host, syncs of moved ops), launches of copies and collectives."""
    d = r.costs.delays
    other = r.graph.launch_ns[~r.compute & (r.graph.launch_ns != NO_LAUNCH)]
    return np.concatenate([r.graph.sync_start_ns, d.at_ns[d.awaited >= 0], other])


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
