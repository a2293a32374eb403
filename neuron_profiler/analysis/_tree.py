"""The containment tree of host ops on each thread, without a per-row Python loop::

    parent = parents(thread, start_ns, end_ns)      # rows sorted by (thread, start, -end)
    total = subtree_sums(parent, self_values)       # each row plus all its descendants
    top = outermost_marked(parent, is_op)           # each row's outermost op (itself included)
    inner = innermost_marked(parent, is_anchor)     # each row's innermost annotation

A row's parent is its innermost enclosing row on its thread: the nearest earlier row (in that
order) whose end reaches ``max(end, start + 1)``. That is what a stack walk gives (pop rows that
end before this one ends or at/before it starts), crossing rows included, and it is found by
pointer jumping: each row's candidate jumps to its candidate's candidate while it ends too
early, which every row in between also does (their ends are below a threshold no higher than
this row's), so a few rounds (about log2 of the longest chain) resolve every row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from neuron_profiler.trace import schema as S
from neuron_profiler.trace.model import Trace


def parents(thread: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Index of each row's innermost enclosing row (-1 for roots)."""
    n = len(start)
    cand = np.arange(n, dtype=np.int64) - 1
    if n:
        cand[np.flatnonzero(np.diff(thread) != 0) + 1] = -1  # a thread's first row
        cand[0] = -1
    reach = np.maximum(end, start + 1)  # what an enclosing row's end must reach
    cand[_roots(thread, end, reach)] = -1
    active = np.flatnonzero(cand >= 0)
    while len(active):
        c = cand[active]
        short = end[c] < reach[active]
        jumped = cand[c[short]]  # read before any write of this round
        cand[active[short]] = jumped
        active = active[short][jumped >= 0]
    return cand


def _roots(thread: np.ndarray, end: np.ndarray, reach: np.ndarray) -> np.ndarray:
    """Rows no earlier row of their thread reaches over (no end at or past their ``reach``):
    the roots, found by one running maximum of the ends, threads laid end to end on one axis.
    Left to the jumps, a thread's roots would walk back over every root before them (a third
    of an op tree's rows, ~20 rounds). None found when the axis would not fit in int64."""
    if len(end) == 0:
        return np.zeros(0, bool)
    low, high = int(min(end.min(), reach.min())), int(max(end.max(), reach.max()))
    width = high - low + 1
    first = int(thread.min())
    if (int(thread.max()) - first + 1) * width >= 2**62:
        return np.zeros(len(end), bool)
    shift = (thread.astype(np.int64) - first) * width - low
    reached = np.empty(len(end), np.int64)  # the highest end of the rows before, on the axis
    reached[0] = np.iinfo(np.int64).min
    np.maximum.accumulate((end + shift)[:-1], out=reached[1:])
    return reached < reach + shift


def depths(parent: np.ndarray) -> np.ndarray:
    """Each row's depth (roots: 0), by pointer doubling: a few vectorised rounds, not one per
    level."""
    depth = (parent >= 0).astype(np.int64)
    jump = parent.copy()
    live = np.flatnonzero(jump >= 0)
    while len(live):
        j = jump[live]
        depth_j, jump_j = depth[j], jump[j]  # read before any write of this round
        depth[live] += depth_j
        jump[live] = jump_j
        live = live[jump_j >= 0]
    return depth


def _levels(depth: np.ndarray) -> list[np.ndarray]:
    """Rows grouped by depth, shallowest first (a stable sort of small ints: a radix sort)."""
    small = np.int16 if len(depth) == 0 or int(depth.max()) < 2**15 else np.int64
    order = np.argsort(depth.astype(small), kind="stable")
    return np.split(order, np.flatnonzero(np.diff(depth[order]) != 0) + 1)


def subtree_sums(parent: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each row's value plus its descendants', level by level from the deepest: a level's sums
    are counted into the level above alone (each row's place there), not into a table of
    every row per level."""
    n = len(parent)
    total = np.asarray(values, dtype=np.int64).copy()
    if n == 0:
        return total
    levels = _levels(depths(parent))
    place = np.empty(n, np.int64)  # each row's index within its level
    for rows in levels:
        place[rows] = np.arange(len(rows))
    for above, rows in reversed(list(zip(levels[:-1], levels[1:], strict=True))):
        # (every row below the roots has a parent, one level up)
        sums = np.bincount(place[parent[rows]], weights=total[rows], minlength=len(above))
        total[above] += sums.astype(np.int64)
    return total


def outermost_marked(parent: np.ndarray, marked: np.ndarray) -> np.ndarray:
    """Each row's outermost marked ancestor, itself included (-1: none), level by level from
    the roots."""
    out = np.where(marked, np.arange(len(parent)), -1)
    if len(parent) == 0:
        return out
    for rows in _levels(depths(parent))[1:]:
        above = out[parent[rows]]
        out[rows] = np.where(above >= 0, above, out[rows])
    return out


def innermost_marked(parent: np.ndarray, marked: np.ndarray) -> np.ndarray:
    """Each row's innermost marked ancestor, itself included (-1: none)."""
    out = np.where(marked, np.arange(len(parent)), -1)
    if len(parent) == 0:
        return out
    for rows in _levels(depths(parent))[1:]:
        out[rows] = np.where(marked[rows], rows, out[parent[rows]])
    return out


@dataclass(frozen=True)
class Nesting:
    """Rows in tree order (thread, start, -end) with their spans, dense thread codes and
    ``parents``."""

    rows: np.ndarray
    start: np.ndarray
    end: np.ndarray
    thread: np.ndarray
    parent: np.ndarray


def nest(trace: Trace, rows: np.ndarray, at_start: np.ndarray | None = None) -> Nesting:
    """The containment tree of ``rows`` (complete events) on their (pid, tid) threads. Rows in
    ``at_start`` (launch calls) are placed by their start alone: a call's recorded end may pass
    its op's (clocks, rounding), and the call belongs to the op it starts in."""
    c = trace.columns
    start = c[S.TS_NS][rows]
    dur = c[S.DUR_NS][rows]
    if at_start is not None:
        dur = np.where(np.isin(rows, at_start), 1, dur)
    end = start + dur
    thread = np.unique(
        np.stack([c[S.PID][rows], c[S.TID][rows]], axis=1), axis=0, return_inverse=True
    )[1].reshape(-1)
    order = np.lexsort((-end, start, thread))
    rows, start, end, thread = rows[order], start[order], end[order], thread[order]
    return Nesting(rows, start, end, thread, parents(thread, start, end))


def positions(
    rows: np.ndarray, is_call: np.ndarray, call_row: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Where each item's launching call (``call_row``: a trace row, -1: none) sits among a
    tree's ``rows`` (``is_call``: the call nodes, every wanted call among them), and which
    items have one: the analyses find the op around each call from there."""
    call_at = np.flatnonzero(is_call)
    by_row = np.argsort(rows[call_at])
    hit = call_row >= 0
    at = call_at[by_row[np.searchsorted(rows[call_at][by_row], call_row[hit])]]
    return at, hit
