"""What-if edits replayed on a projection's graph (``neuron-prof project --what-if``)::

    edit = parse_what_if("batch x2")
    step_ns = what_if_step(ctx, graph, costs, edit, source, target, same, run)

Each edit changes the item costs or the host delays and replays the same graph: ``no-fallback:OP``
(the op runs natively), ``no-data-stall`` (the steps' DataLoader waits take no time), ``batch xN``
(device work and copies scaled by N).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.analysis.context import AnalysisContext
from neuron_profiler.analysis.device_costs import CLASSES, ItemCosts, swap_costs
from neuron_profiler.analysis.replay import (
    DependencyGraph,
    HostDelays,
    ReplayedTimeline,
)
from neuron_profiler.costmodel.chips import ChipSpec
from neuron_profiler.errors import NeuronProfilerError
from neuron_profiler.trace import schema as S

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


def what_if_step(
    ctx: AnalysisContext,
    graph: DependencyGraph,
    costs: ItemCosts,
    edit: Edit,
    src: ChipSpec | None,
    tgt: ChipSpec | None,
    same: bool,
    run: Runner,
) -> float:
    """The mean step replayed with one edit."""
    duration, delays = costs.duration, costs.delays
    if edit.kind == "no-fallback" and len(ctx.work) and not same:
        edited = swap_costs(ctx, graph, src, tgt, same, native=frozenset({edit.op}))
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
