"""Compiled regions as one graph launch each, on the projection's replay graph
(docs/projection.md, "Compiled regions")::

    sites = launch_sites(ctx, graph_items(ctx))            # what launched each item on the host
    group = recorded_regions(sites)                        # torch.compile's regions in the trace
    modules = module_graphs(ctx, sites)                    # per item its compiled module, if known
    group = eager_regions(graph, sites, compute, breaks, modules=modules.of_item)
    graph, saved = as_graph_launches(graph, sites, group)  # one launch per group

A graph execution is launched once: its items after the first no longer wait for a launch of
their own (they are ready with the first and run back to back on their queue), and the host no
longer spends the time of their launching ops (the op the script called, which now runs inside
the graph; inside a recorded compiled region, the launch call itself). Kernel durations are
kept: fusion and the kernels' fixed time are not modelled (an ASSUMPTION: the saving is a lower
bound of what a compiler gains).

Where the trace records ``nn.Module`` frames (``analysis/modules.py``), ``--what-if compiled``
is per module: a graph also ends where the launching op's top-level module (the root module's
child it ran in, ``COMPILED_MODULE_DEPTH``) changes, as ``torch.compile`` applied to each of
the root's children (regional compilation) would give; without frames, a graph spans a
thread's launches between two graph breaks.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from neuron_profiler.analysis import _tree
from neuron_profiler.analysis._args import arg_values
from neuron_profiler.analysis._device import NO_LAUNCH
from neuron_profiler.analysis.context import AnalysisContext
from neuron_profiler.analysis.modules import row_modules, top_modules
from neuron_profiler.analysis.offload import Offload
from neuron_profiler.analysis.replay import DependencyGraph, HostDelays
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V

# Module depth a compiled graph spans: 2, the root module's children (``Net_0.Block_0``).
# Compiling the root is the figure without frames (one graph between graph breaks); compiling each leaf
# (``Linear``, ``ReLU``: one to three ops each) is close to eager; compiling each child of the
# root (each transformer block, embedding, head) is torch's regional-compilation recipe, the
# usual per-module compile. Deeper modules inside a child run inside its graph.
COMPILED_MODULE_DEPTH = 2


@dataclass(frozen=True)
class ModuleGraphs:
    """Per graph item the module whose compiled graph would launch it (index into ``paths``,
    -1: its op ran outside any module frame, or it has no launching op); ``frames``: the
    module frames the trace holds (0: no per-module graphs)."""

    of_item: np.ndarray | None
    paths: tuple[str, ...]
    frames: int


@dataclass(frozen=True)
class LaunchSites:
    """Per graph item, what launched it on the host.

    Args:
        op: the host row whose time a graph saves (the outermost aten op around the launch
            call, outside any compiled region's span; else the launch call): -1 when the item
            has no launch call.
        host_ns: that row's host time on the target (what one launch fewer saves).
        end_ns: where that host time ends (the saving's instant).
        thread: the launching thread (dense code).
        region: the recorded compiled region's span around the call (its row; -1: eager).
        holds_wait: the op spans a blocking wait (a graph break: never merged).
    """

    op: np.ndarray
    host_ns: np.ndarray
    end_ns: np.ndarray
    thread: np.ndarray
    region: np.ndarray
    holds_wait: np.ndarray


def launch_sites(ctx: AnalysisContext, items: np.ndarray, waits_ns: np.ndarray) -> LaunchSites:
    """``items``: indices into ``ctx.work``; ``waits_ns``: the host's blocking waits (starts)."""
    trace, w = ctx.trace, ctx.work
    c = trace.columns
    n = len(items)
    op = np.full(n, -1, np.int64)
    thread = np.full(n, -1, np.int64)
    region = np.full(n, -1, np.int64)
    call_row = ctx.runtime_calls.launching_call(trace, w.rows[items])
    calls = np.unique(call_row[call_row >= 0])  # (by correlation, flow or External id)
    if len(calls):
        hosts = np.flatnonzero(
            trace.mask(kind=[S.EventKind.CPU_OP, S.EventKind.USER_ANNOTATION], ph=S.Phase.COMPLETE)
        )
        tree = _tree.nest(trace, np.concatenate([hosts, calls]), at_start=calls)
        rows, code, parent = tree.rows, tree.thread, tree.parent
        names = c[S.NAME_ID][rows]
        compiled = np.isin(names, ctx.names.compiled)
        aten = np.isin(names, ctx.names.aten) & ~compiled
        outer_region = _tree.outermost_marked(parent, compiled)
        # the outermost aten op below the region (the op a graph would run)
        outer_op = _outermost_below(parent, aten, compiled)
        call, hit = _tree.positions(rows, np.isin(rows, calls), call_row)
        op[hit] = rows[np.where(outer_op[call] >= 0, outer_op[call], call)]
        thread[hit] = code[call]
        region[hit] = np.where(outer_region[call] >= 0, rows[np.maximum(outer_region[call], 0)], -1)
        # an execution of a compiled graph (the emulator's 'graph id' rows) is one region itself
        graph_exec = hit & _has_graph_id(trace, w.rows[items]) & (region < 0)
        region[graph_exec] = op[graph_exec]
    known = op >= 0
    safe = np.maximum(op, 0)
    op_start = c[S.TS_NS][safe]
    op_end = op_start + c[S.DUR_NS][safe]
    waits = np.sort(waits_ns)
    holds = np.searchsorted(waits, op_end, "left") > np.searchsorted(waits, op_start, "left")
    return LaunchSites(
        op=op,
        host_ns=np.where(known, op_end - op_start, 0),
        end_ns=np.where(known, op_end, 0),
        thread=thread,
        region=region,
        holds_wait=known & holds,
    )


def offload_sites(ctx: AnalysisContext, plan: Offload) -> LaunchSites:
    """A CPU-only trace's moved ops: each item is its op, whose host time on the target is its
    dispatch and launch (``Offload.target_host_ns``)."""
    c = ctx.trace.columns
    rows = plan.rows
    start = c[S.TS_NS][rows]
    dur = c[S.DUR_NS][rows]
    thread = (
        np.unique(np.stack([c[S.PID][rows], c[S.TID][rows]], axis=1), axis=0, return_inverse=True)[
            1
        ].reshape(-1)
        if len(rows)
        else np.zeros(0, np.int64)
    )
    n = len(rows)
    return LaunchSites(
        op=rows.astype(np.int64),
        host_ns=plan.target_host_ns,
        end_ns=start + dur,
        thread=thread,
        region=np.full(n, -1, np.int64),
        holds_wait=np.zeros(n, bool),
    )


def _has_graph_id(trace, rows: np.ndarray) -> np.ndarray:  # noqa: ANN001
    """Whether each row carries a graph id, read on one row per distinct name (a compiled
    graph's executions share their name; eager kernels never carry one)."""
    if len(rows) == 0:
        return np.zeros(0, bool)
    names, first, inverse = np.unique(
        trace.col(S.NAME_ID)[rows], return_index=True, return_inverse=True
    )
    found = arg_values(trace, rows[first], (V.ARG_GRAPH_ID,))[V.ARG_GRAPH_ID]
    return np.array([v is not None for v in found], bool)[inverse.reshape(-1)]


def _outermost_below(parent: np.ndarray, marked: np.ndarray, barrier: np.ndarray) -> np.ndarray:
    """Each row's outermost marked ancestor (itself included) below its innermost ``barrier``
    ancestor (-1: none)."""
    out = np.where(marked, np.arange(len(parent)), -1)
    if len(parent) == 0:
        return out
    for rows in _tree._levels(_tree.depths(parent))[1:]:
        p = parent[rows]
        above = np.where(barrier[p], -1, out[p])
        out[rows] = np.where(above >= 0, above, out[rows])
    return out


def module_graphs(ctx: AnalysisContext, sites: LaunchSites) -> ModuleGraphs:
    """Each item's module at ``COMPILED_MODULE_DEPTH``, from its launching op's module path
    (one containment pass over the distinct launching ops); ``of_item`` None without frames."""
    c = ctx.trace.columns
    ops, inverse = np.unique(sites.op, return_inverse=True)
    known = ops >= 0
    rows = ops[known]
    start = c[S.TS_NS][rows]
    paths = row_modules(ctx, rows, start, start + c[S.DUR_NS][rows])
    if paths.frames == 0:
        return ModuleGraphs(None, (), 0)
    top, texts = top_modules(paths, COMPILED_MODULE_DEPTH)
    per_op = np.full(len(ops), -1, np.int64)
    per_op[known] = top
    return ModuleGraphs(per_op[inverse.reshape(-1)], texts, paths.frames)


def recorded_regions(sites: LaunchSites) -> np.ndarray:
    """Group per item: the recorded compiled region's span it was launched in (-1: eager)."""
    return sites.region.copy()


def eager_regions(
    graph: DependencyGraph,
    sites: LaunchSites,
    compute: np.ndarray,
    breaks_ns: np.ndarray,
    *,
    recorded: bool,
    modules: np.ndarray | None = None,
) -> np.ndarray:
    """Group per item for ``--what-if compiled``: each thread's compute launches of a step
    between two graph breaks (a host wait, an op the target runs on the host, a copy or
    collective launched, an op holding a wait, a recorded region's launch) form one graph, cut
    too where the item's module (``modules``, ``module_graphs``) changes; recorded regions are
    one graph each (``recorded``: group them; False: the graph has them as one launch already).
    -1: not grouped."""
    group = np.where(recorded & (sites.region >= 0), sites.region, -1).astype(np.int64)
    cand = np.flatnonzero(compute & (sites.op >= 0) & (sites.region < 0) & ~sites.holds_wait)
    if len(cand) == 0:
        return group
    at = graph.launch_ns[cand]
    cand = cand[np.lexsort((at, sites.thread[cand]))]
    at = graph.launch_ns[cand]
    step = np.searchsorted(graph.step_start_ns, at, side="right")
    # a recorded region's execution breaks the eager graphs around it too
    breaks = np.sort(np.concatenate([breaks_ns, graph.launch_ns[sites.region >= 0]]))
    brk = np.searchsorted(breaks, at, side="left")  # breaks before each launch
    cut = (np.diff(sites.thread[cand]) != 0) | (np.diff(step) != 0) | (np.diff(brk) != 0)
    if modules is not None:
        cut |= np.diff(modules[cand]) != 0
    new = np.r_[True, cut]
    base = int(max(group.max(initial=-1), int(sites.op.max(initial=-1)))) + 1
    group[cand] = base + np.cumsum(new) - 1
    return group


def as_graph_launches(
    graph: DependencyGraph, sites: LaunchSites, group: np.ndarray
) -> tuple[DependencyGraph, HostDelays, int]:
    """The graph with one launch per group (items of a group after its first ready with it, no
    gap of their own), the host time the launches saved (negative delays at the saved ops'
    ends), and how many launches were saved."""
    live = np.flatnonzero((group >= 0) & (graph.launch_ns != NO_LAUNCH))
    if len(live) == 0:
        return graph, HostDelays.none(), 0
    live = live[np.lexsort((graph.launch_ns[live], group[live]))]
    g = group[live]
    first = np.r_[True, g[1:] != g[:-1]]
    leader = live[np.flatnonzero(first)[np.cumsum(first) - 1]]
    follower = ~first
    if not follower.any():
        return graph, HostDelays.none(), 0
    launch, latency = graph.launch_ns.copy(), graph.latency_ns.copy()
    bound, gap = graph.launch_bound.copy(), graph.gap_ns.copy()
    f, lead = live[follower], leader[follower]
    launch[f], latency[f], bound[f], gap[f] = launch[lead], latency[lead], bound[lead], 0
    # one saving per distinct op launching only followers (an op also launching a group's first
    # item is that graph's launch)
    kept = np.unique(sites.op[live[first]])
    ops, at = np.unique(sites.op[f], return_index=True)
    saved = ~np.isin(ops, kept) & (ops >= 0)
    idx = f[at[saved]]
    order = np.argsort(sites.end_ns[idx], kind="stable")
    idx = idx[order]
    delays = HostDelays(sites.end_ns[idx], np.full(len(idx), -1, np.int64), -sites.host_ns[idx])
    edited = replace(graph, launch_ns=launch, latency_ns=latency, launch_bound=bound, gap_ns=gap)
    return edited, delays, int(follower.sum())
