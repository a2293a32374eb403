"""Emission order and slice nesting for track-based formats: in which order begin / end /
instant / counter events are written, and which lane (sibling track) each slice goes on so that
every lane's slices are well nested.

    tl = timeline(start_ns, end_ns, [instant_ts])   # slices (end > start) plus point events
    tl = extend(tl, [counter_ts])                   # more point events, merged in
    tl.event_class(tl.keys), tl.index(tl.keys)      # END / BEGIN / point set k + 2, which one
    lane = assign_lanes(group, start_ns, end_ns, tl)  # 0 = own track, k > 0 = k-th sibling

Order: by time; at equal times slice ends, then begins, then each point set in turn; begins
outer-first (earlier start, then longer), ends inner-first (the reverse of the begin order).
Restricted to any one track this order closes every slice before its parent and its begin after
its parent's, so it is valid on every lane at once: lanes change tracks, never the order.

Why packed keys: every event is one int64 ``(time << shift) | (class << bits) | index``, so the
emission order is a merge of presorted runs (begins of a time-sorted trace come sorted, their
ends need one sort of nearly sorted keys, which timsort does in near-linear time) instead of
general sorts of millions of events: a per-event stack walk costs about a microsecond in Python,
the whole budget for a million slices. Nesting is checked on the same keys: grouped by thread
(a radix sort), the depth is a cumulative sum and begins pair with ends level by level (on a
well-nested track, begins and ends at one depth alternate); a slice whose begin pairs with another
slice's end crosses it. The later-starting slice of each crossing moves to the next lane and the
check repeats; the rare pathological remainder falls back to a greedy stack walk.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

END, BEGIN, POINTS = 0, 1, 2  # event classes: slice ends, begins, then each point set
CLASS_BITS = 2
MAX_POINT_SETS = (1 << CLASS_BITS) - POINTS
KEY_BITS = 62  # keys stay clear of the int64 sign, so times before the origin still order
MAX_PASSES_PER_LANE = 16
MAX_VECTOR_LANES = 32


@dataclass(frozen=True)
class Timeline:
    """Every event in emission order as packed int64 keys (see the module docstring).

    Args:
        keys: ascending; ``slice_keys``: the begins and ends alone, ascending.
        border: begin rank -> slice (slices by start, longer first at equal starts).
        bits: index bits; the class sits above them and the time axis above that.
        origin / times: axis value -> ns is ``origin + axis``, or ``times[axis]`` when the span
            was too wide to pack and dense time ranks stand in for times.
        span: the largest axis value of the events the timeline was built from.
        start / end / points: the inputs (kept to rebuild when ``extend`` cannot merge).
    """

    keys: np.ndarray
    slice_keys: np.ndarray
    border: np.ndarray
    bits: int
    origin: int
    times: np.ndarray | None
    span: int
    start: np.ndarray
    end: np.ndarray
    points: tuple[np.ndarray, ...]

    @property
    def shift(self) -> int:
        return self.bits + CLASS_BITS

    def event_class(self, keys: np.ndarray) -> np.ndarray:
        return (keys >> self.bits) & ((1 << CLASS_BITS) - 1)

    def index(self, keys: np.ndarray) -> np.ndarray:
        return keys & ((1 << self.bits) - 1)

    def axis(self, keys: np.ndarray) -> np.ndarray:
        return keys >> self.shift

    def time_ns(self, keys: np.ndarray) -> np.ndarray:
        axis = keys >> self.shift
        return axis + self.origin if self.times is None else self.times[axis]

    def slice_of(self, keys: np.ndarray) -> np.ndarray:
        """Slice of each begin / end key."""
        index = self.index(keys)
        rank = np.where(self.event_class(keys) == BEGIN, index, len(self.border) - 1 - index)
        return self.border[rank]

    def to_axis(self, ns: np.ndarray) -> np.ndarray:
        """The largest axis value whose time is <= ns (-1 before the first), for searches."""
        if self.times is None:
            return np.clip(ns - self.origin, -1, self.span)
        return np.searchsorted(self.times, ns, side="right") - 1


def begin_order(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Slices by (start, -end), stable. A time-sorted input costs one pass plus the tied runs."""
    n = len(start)
    if n > 1 and not bool((start[1:] >= start[:-1]).all()):
        return np.lexsort((-end, start))
    order = np.arange(n)
    tie = start[1:] == start[:-1]
    if not (tie & (end[1:] > end[:-1])).any():
        return order
    in_run = np.zeros(n, dtype=bool)  # only the runs of equal starts need their ends sorted
    in_run[1:] |= tie
    in_run[:-1] |= tie
    runs = np.flatnonzero(in_run)
    order[runs] = runs[np.lexsort((-end[runs], start[runs]))]
    return order


def _merge(runs: list[np.ndarray]) -> np.ndarray:
    """One ascending array from ascending runs (timsort merges presorted runs in linear time)."""
    runs = [r for r in runs if len(r)]
    if not runs:
        return np.zeros(0, dtype=np.int64)
    return runs[0] if len(runs) == 1 else np.sort(np.concatenate(runs), kind="stable")


def _point_keys(axis: np.ndarray, event_class: int, bits: int) -> np.ndarray:
    keys = (axis << (bits + CLASS_BITS)) | (event_class << bits) | np.arange(len(axis))
    return np.sort(keys, kind="stable")  # points usually come sorted: then a linear pass


def timeline(start: np.ndarray, end: np.ndarray,
             points: Sequence[np.ndarray] = ()) -> Timeline:
    """Emission order of slices [start, end) (end > start) and point events (times in ns)."""
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    points = tuple(np.asarray(p, dtype=np.int64) for p in points)
    if len(points) > MAX_POINT_SETS:
        raise ValueError(f"at most {MAX_POINT_SETS} point sets")
    n = len(start)
    bits = max([n, 1, *(len(p) for p in points)]).bit_length()
    shift = bits + CLASS_BITS
    present = [a for a in (start, end, *points) if len(a)]
    lo = min((int(a.min()) for a in present), default=0)
    hi = max((int(a.max()) for a in present), default=0)
    if hi - lo < 1 << (KEY_BITS - shift):
        origin, times, span = lo, None, hi - lo

        def to(t: np.ndarray) -> np.ndarray:
            return t - lo
    else:  # absurd span (a stray event near the epoch): dense time ranks keep the order
        times = np.unique(np.concatenate(present))
        origin, span = 0, len(times) - 1
        if span >= 1 << (KEY_BITS - shift):
            raise ValueError(f"too many events to order: {sum(map(len, present))}")

        def to(t: np.ndarray) -> np.ndarray:
            return np.searchsorted(times, t).astype(np.int64)
    border = begin_order(start, end)
    rank = np.arange(n, dtype=np.int64)
    begins = (to(start[border]) << shift) | (BEGIN << bits) | rank  # ascending as built
    ends = np.sort((to(end[border]) << shift) | (END << bits) | (n - 1 - rank), kind="stable")
    slice_keys = _merge([ends, begins])
    runs = [slice_keys] + [_point_keys(to(p), POINTS + i, bits) for i, p in enumerate(points)]
    return Timeline(keys=_merge(runs), slice_keys=slice_keys, border=border, bits=bits,
                    origin=origin, times=times, span=span, start=start, end=end, points=points)


def extend(tl: Timeline, points: Sequence[np.ndarray]) -> Timeline:
    """``tl`` with more point sets merged in (rebuilt when they do not fit its keys)."""
    points = tuple(np.asarray(p, dtype=np.int64) for p in points)
    if not points:
        return tl
    limit = 1 << (KEY_BITS - tl.shift)
    fits = (tl.times is None and len(tl.points) + len(points) <= MAX_POINT_SETS
            and max(len(p) for p in points) < 1 << tl.bits
            and all(len(p) == 0 or (-limit < int(p.min()) - tl.origin
                                    and int(p.max()) - tl.origin < limit) for p in points))
    if not fits:
        return timeline(tl.start, tl.end, tl.points + points)
    first = POINTS + len(tl.points)
    runs = [tl.keys] + [_point_keys(p - tl.origin, first + i, tl.bits)
                        for i, p in enumerate(points)]
    return Timeline(keys=_merge(runs), slice_keys=tl.slice_keys, border=tl.border, bits=tl.bits,
                    origin=tl.origin, times=None, span=tl.span, start=tl.start, end=tl.end,
                    points=tl.points + points)


def stable_order(values: np.ndarray) -> np.ndarray:
    """Stable argsort; radix passes of 16 bits when the values span less than 2**32 (thread,
    depth and flow indices), which numpy sorts in linear time."""
    values = np.asarray(values)
    if not len(values):
        return np.zeros(0, dtype=np.intp)
    lo, hi = int(values.min()), int(values.max())
    if hi - lo >= 2**32:
        return np.argsort(values, kind="stable")
    shifted = values - lo if lo else values
    order = np.argsort((shifted & 0xFFFF).astype(np.uint16), kind="stable")
    if hi - lo < 2**16:
        return order
    return order[np.argsort((shifted[order] >> 16).astype(np.uint16), kind="stable")]


def _crossing(group: np.ndarray, tl: Timeline) -> np.ndarray:
    """Slices whose begin pairs with another slice's end within their group (the later-started
    of each such pair): none when every group's slices nest."""
    n = len(tl.border)
    keys = tl.slice_keys
    is_begin = tl.event_class(keys) == BEGIN
    index = tl.index(keys)
    rank = np.where(is_begin, index, n - 1 - index)  # begin rank of each event's slice
    by_group = stable_order(group[tl.border][rank])  # each group's events, in emission order
    is_begin, rank = is_begin[by_group], rank[by_group]
    depth = np.cumsum(np.where(is_begin, 1, -1).astype(np.int32))  # groups end balanced at 0
    level = depth + ~is_begin  # an end sits at the depth its slice had (before it closes)
    pairs = stable_order(level).reshape(-1, 2)  # begin, end, begin, end, ... per level
    opened, closed = rank[pairs[:, 0]], rank[pairs[:, 1]]
    crossing = np.zeros(n, dtype=bool)
    crossing[tl.border[opened[closed < opened]]] = True
    return crossing


def _greedy(group: np.ndarray, start: np.ndarray, end: np.ndarray, first_lane: int) -> np.ndarray:
    """Stack walk per group (fallback for pathological overlap): first lane it nests on."""
    lanes = np.empty(len(start), dtype=np.int64)
    stacks: dict[tuple[int, int], list[int]] = {}
    for i in np.lexsort((-end, start, group)).tolist():
        g, s, e = int(group[i]), int(start[i]), int(end[i])
        k = 0
        while True:
            stack = stacks.setdefault((g, k), [])
            while stack and stack[-1] <= s:
                stack.pop()
            if not stack or e <= stack[-1]:
                stack.append(e)
                lanes[i] = first_lane + k
                break
            k += 1
    return lanes


def _spill(group: np.ndarray, start: np.ndarray, end: np.ndarray,
           crossing: np.ndarray) -> np.ndarray:
    """Lane per slice for groups that have crossings (``crossing``: the first check's result)."""
    lane = np.zeros(len(start), dtype=np.int64)
    todo = np.arange(len(start))
    current = 0
    while len(todo) and current < MAX_VECTOR_LANES:
        members, spilled = todo, []
        for _ in range(MAX_PASSES_PER_LANE):
            if crossing is None:
                crossing = _crossing(group[members], timeline(start[members], end[members]))
            if not crossing.any():
                break  # the lane's slices nest: checked, so nothing is checked twice
            spilled.append(members[crossing])
            members = members[~crossing]
            crossing = None
        else:
            break  # give up vectorising this lane: the stack walk takes the rest
        crossing = None
        lane[members] = current
        todo = np.sort(np.concatenate(spilled)) if spilled else todo[:0]
        current += 1
    if len(todo):
        lane[todo] = _greedy(group[todo], start[todo], end[todo], current)
    return lane


def assign_lanes(group: np.ndarray, start: np.ndarray, end: np.ndarray,
                 tl: Timeline | None = None) -> np.ndarray:
    """Lane per slice (``end > start``) grouped by ``group`` (>= 0); ``tl``: their timeline.

    Every vector-built lane ends with a check that found no crossing, and the stack walk nests
    by construction, so no lane is left unchecked.
    """
    group = np.asarray(group, dtype=np.int64)
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    n = len(start)
    lane = np.zeros(n, dtype=np.int64)
    if n == 0:
        return lane
    first = _crossing(group, tl if tl is not None else timeline(start, end))
    if not first.any():
        return lane
    bad = np.zeros(int(group.max()) + 1, dtype=bool)
    bad[group[first]] = True
    rows = np.flatnonzero(bad[group])
    lane[rows] = _spill(group[rows], start[rows], end[rows], first[rows])
    return lane
