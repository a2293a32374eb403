"""Nestable async events (``b`` / ``e`` / ``n``) as slices and instants on async tracks.

    found = async_events(trace, phases)      # None: the trace has none
    found.begins, found.ends                 # rows of each b/e pair (the b names the slice)
    found.tracks                             # (pid, cat_id, flow_id) of each async track

Why this shape: the Trace Event Format puts the events of one category and id in one tree,
whatever thread wrote them (a plain ``id`` and ``id2: {"global": ...}`` are global, ``id2:
{"local": ...}`` is one process's; an async ``scope`` is not read by the loader); Perfetto's
own JSON importer gives each (category, id) an async track. An ``e``
closes the latest open ``b`` of the same (category, id, name) (Perfetto ends the open slice of
its name, DevTools refuses an end whose name differs). A slice goes on the track of (its
``b``'s pid, category, id) under that process; ``n`` events are instants on the track of
theirs. Pairing is vectorised like the B/E pairing: per group, in time order (file order
breaks ties), ends that find nothing open are found by a running minimum of the depth, and the
remaining begins and ends pair level by level.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from neuron_profiler.trace import schema as S
from neuron_profiler.trace.model import Trace

ASYNC_LETTERS = {letter: S.OTHER_PHASES.index(letter) for letter in "bne"}
_B, _E, _N = ASYNC_LETTERS["b"], ASYNC_LETTERS["e"], ASYNC_LETTERS["n"]
ASYNC_END_ARGS = "args of async end events whose begin has args"  # (the slice has the b's)


@dataclass(frozen=True)
class AsyncEvents:
    """Async events the Perfetto export writes, and what it cannot (counted in ``skipped``).

    Args:
        handled: async rows (b/e/n), whatever became of them (not "unknown phase").
        begins / ends: trace rows of each b/e pair; slice_track: its async track index.
        instants: rows of ``n`` events (and of the b of a pair at one time, ``instant_ends``
            its e, -1 for an ``n``); instant_track: their async track index.
        tracks: (pid, cat_id, flow_id) per async track; track_name: the name_id of its
            earliest event (Perfetto's importer names an async track so).
        skipped: events left out, by reason (and ``ASYNC_END_ARGS``: the args of an ``e``
            whose ``b`` has args of its own, the slice's).
    """

    handled: int
    begins: np.ndarray
    ends: np.ndarray
    slice_track: np.ndarray
    instants: np.ndarray
    instant_ends: np.ndarray
    instant_track: np.ndarray
    tracks: list[tuple[int, int, int]]
    track_name: list[int]
    skipped: dict[str, int]


def _group(*columns: np.ndarray) -> np.ndarray:
    """Dense codes of equal tuples of ``columns`` (pairwise factorize: no overflow)."""
    codes, uniq = pd.factorize(columns[0])
    for column in columns[1:]:
        other, other_uniq = pd.factorize(column)
        codes, uniq = pd.factorize(codes.astype(np.int64) * max(1, len(other_uniq)) + other)
    return codes.astype(np.int64)


def pair_nested(group: np.ndarray, is_begin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs of positions (begin, end) in a sequence ordered by (group, time): each end closes
    the latest open begin of its group; ends with nothing open and begins never closed are
    left unpaired. Vectorised: depth by cumulative sum, unmatched ends where the depth falls
    below its running minimum, then begins and ends of one (group, depth) alternate."""
    n = len(group)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    step = np.where(is_begin, 1, -1).astype(np.int64)
    start = np.ones(n, dtype=bool)
    start[1:] = group[1:] != group[:-1]
    rank = np.cumsum(start) - 1  # the group's rank in this order

    def depth(steps: np.ndarray, first: np.ndarray) -> np.ndarray:
        total = np.cumsum(steps)
        before = (total - steps)[first]  # the running total where each group starts
        return total - np.repeat(before, np.diff(np.append(np.flatnonzero(first), len(steps))))

    after = depth(step, start)
    big = 2 * n + 2  # later groups far below earlier ones: the running minimum restarts
    low = np.minimum.accumulate(after - rank * big) + rank * big  # min of the group so far
    prior = np.zeros(n, dtype=np.int64)  # min(0, depth after each earlier event of the group)
    prior[1:] = np.minimum(low[:-1], 0)
    prior[start] = 0
    keep = np.flatnonzero(is_begin | (after >= prior))  # an end below it closes nothing
    k_group, k_begin = group[keep], is_begin[keep]
    k_start = np.ones(len(keep), dtype=bool)
    k_start[1:] = k_group[1:] != k_group[:-1]
    level = depth(step[keep], k_start) + ~k_begin  # a begin's depth after, an end's before
    order = np.lexsort((np.arange(len(keep)), level, k_group))
    o_group, o_level, o_begin = k_group[order], level[order], k_begin[order]
    pairs = np.flatnonzero(
        o_begin[:-1] & ~o_begin[1:] & (o_group[:-1] == o_group[1:]) & (o_level[:-1] == o_level[1:])
    )
    return keep[order[pairs]], keep[order[pairs + 1]]


def async_events(trace: Trace, phases: np.ndarray) -> AsyncEvents | None:
    """The async b/e/n events of ``trace`` (``phases``: its phase column as the export sees
    it), paired and given tracks; None when there are none."""
    other = np.flatnonzero(phases == S.Phase.OTHER)
    letter = trace.col(S.FORM)[other] & S.Form.DETAIL
    is_async = (letter == _B) | (letter == _E) | (letter == _N)
    rows, letter = other[is_async], letter[is_async]
    if len(rows) == 0:
        return None
    ids = trace.col(S.FLOW_ID)[rows]
    has_id = ids != -1
    skipped = {"async event without id": int(len(rows) - has_id.sum())}
    rows, letter, ids = rows[has_id], letter[has_id], ids[has_id]
    ts, cat = trace.col(S.TS_NS)[rows], trace.col(S.CAT_ID)[rows]
    name, pid = trace.col(S.NAME_ID)[rows], trace.col(S.PID)[rows]
    be = np.flatnonzero(letter != _N)
    # a process-local id ("id2": {"local": ...}) names a tree of its process only
    local = [k for k, v in trace.id_labels.items() if S.id2_scope(v) == "local"]
    scope = np.where(np.isin(ids[be], local), pid[be], -1) if local else np.zeros(len(be), int)
    group = _group(cat[be], ids[be], name[be], scope)
    by = np.lexsort((ts[be], group))  # stable: equal times keep file order
    b_at, e_at = pair_nested(group[by], letter[be[by]] == _B)
    begins, ends = be[by[b_at]], be[by[e_at]]
    skipped["unpaired async begin/end"] = int(len(be) - 2 * len(begins))
    args_row = trace.col(S.ARGS_ROW)
    skipped[ASYNC_END_ARGS] = int(
        ((args_row[rows[begins]] >= 0) & (args_row[rows[ends]] >= 0)).sum()
    )
    # a pair at one time is an instant on its track, as an X of dur 0 is
    zero = ts[ends] == ts[begins]
    n_marks = np.flatnonzero(letter == _N)
    marks = np.concatenate([n_marks, begins[zero]])
    mark_ends = np.concatenate([np.full(len(n_marks), -1), ends[zero]])
    by_row = np.argsort(marks, kind="stable")
    marks, mark_ends = marks[by_row], mark_ends[by_row]
    begins, ends = begins[~zero], ends[~zero]
    on = np.concatenate([begins, marks])
    track = _group(pid[on], cat[on], ids[on])
    by_time = np.argsort(rows[on], kind="stable")
    first_of = on[by_time[np.unique(track[by_time], return_index=True)[1]]]  # earliest event
    tracks = list(
        zip(pid[first_of].tolist(), cat[first_of].tolist(), ids[first_of].tolist(), strict=True)
    )
    return AsyncEvents(
        handled=int(is_async.sum()),
        begins=rows[begins],
        ends=rows[ends],
        slice_track=track[: len(begins)],
        instants=rows[marks],
        instant_ends=np.where(mark_ends >= 0, rows[mark_ends], -1),
        instant_track=track[len(begins) :],
        tracks=tracks,
        track_name=name[first_of].tolist(),
        skipped={k: v for k, v in skipped.items() if v},
    )
