"""Slice nesting for track-based formats: which lane (sibling track) each slice goes on, and one
emission order of every begin/end event that is well nested on every lane.

    nest = assign_lanes(thread, start_ns, end_ns)   # one entry per slice (end > start)
    nest.lane          # 0 = the thread's own track, k > 0 = its k-th sibling track
    nest.slice, nest.is_begin, nest.ts              # all begins and ends, in emission order

Why vectorised: a stack walk per event costs about a microsecond in Python, the whole budget for
a million slices. Instead all begins and ends are sorted once, globally, as packed int64 keys
(time, end-before-begin, tie rank): that is the emission order, valid on any well-nested lane.
A stable radix sort of it by thread gives each thread's events in that order; the nesting depth is
a cumulative sum, and begins pair with ends level by level (on a well-nested lane, begins and
ends at one depth alternate): a slice whose begin pairs with another slice's end crosses it. On
threads with crossings the later-starting slice of each crossing moves to the next lane and the
pass repeats; the rare pathological remainder falls back to a greedy stack walk.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_PASSES_PER_LANE = 16
MAX_VECTOR_LANES = 32
_KEY_BITS = 62  # packed sort keys stay positive int64


@dataclass(frozen=True)
class Nesting:
    """Lane per slice, and every begin/end in emission order: by time; at equal times ends
    before begins (adjacent slices touch, not overlap), begins outer-first (longer first), ends
    inner-first (later-started first). Well nested on every lane."""

    lane: np.ndarray
    slice: np.ndarray  # slice (input index) of each endpoint
    is_begin: np.ndarray
    ts: np.ndarray
    begin_at: np.ndarray  # per slice: the index of its begin in that order


@dataclass(frozen=True)
class _Endpoints:
    """All begins and ends in emission order, by their slices' begin-order rank."""

    border: np.ndarray | None  # slice at each begin-order rank (None: the identity)
    rank: np.ndarray  # per endpoint: its slice's rank in begin order (start, then longer first)
    is_begin: np.ndarray
    ts: np.ndarray

    def slices(self, ranks: np.ndarray) -> np.ndarray:
        """Input index of the slices at these begin-order ranks."""
        return ranks if self.border is None else self.border[ranks]


def _begin_order(start: np.ndarray, end: np.ndarray) -> np.ndarray | None:
    """Slices by (start, longer first); None when the input already is (a trace is sorted by ts,
    so the usual case costs two comparisons per slice)."""
    if len(start) < 2:
        return None
    if bool((start[1:] >= start[:-1]).all()):
        if not ((start[1:] == start[:-1]) & (end[1:] > end[:-1])).any():
            return None
    return np.lexsort((-end, start))


def _endpoints(start: np.ndarray, end: np.ndarray) -> _Endpoints:
    """All begins and ends in emission order, from one sort of packed int64 keys."""
    n = len(start)
    border = _begin_order(start, end)
    s, e = (start, end) if border is None else (start[border], end[border])
    lo = int(s.min())
    span = int(e.max()) - lo
    bits = n.bit_length()
    uniq = None
    if (2 * span + 1).bit_length() + bits <= _KEY_BITS:
        t_begin, t_end = s - lo, e - lo
    else:  # too wide to pack: dense ranks of the times instead (their order is the same)
        uniq, inverse = np.unique(np.concatenate([s, e]), return_inverse=True)
        t_begin, t_end = inverse[:n].astype(np.int64), inverse[n:].astype(np.int64)
    index = np.arange(n, dtype=np.int64)
    keys = np.empty(2 * n, dtype=np.int64)
    # ends: time * 2, later begins first; begins: time * 2 + 1, in begin order
    np.bitwise_or(np.left_shift(t_end, bits + 1), (n - 1) - index, out=keys[:n])
    np.bitwise_or(np.left_shift(t_begin * 2 + 1, bits), index, out=keys[n:])
    keys.sort(kind="stable")  # adaptive: begins are one sorted run, ends nearly one
    low = keys & ((1 << bits) - 1)
    is_begin = ((keys >> bits) & 1).astype(bool)
    rank = np.where(is_begin, low, (n - 1) - low)
    t = keys >> (bits + 1)
    return _Endpoints(
        border=border, rank=rank, is_begin=is_begin, ts=t + lo if uniq is None else uniq[t]
    )


def _narrow(values: np.ndarray, top: int) -> np.ndarray:
    """Non-negative ints up to ``top`` in the smallest type numpy radix-sorts (1 or 2 bytes)."""
    if top < 256:
        return values.astype(np.uint8)
    return values.astype(np.int16) if top < 2**15 else values


def stable_order(values: np.ndarray) -> np.ndarray | None:
    """Stable sort order of non-negative ints (a radix sort when they fit 16 bits); None when
    they are all equal."""
    top = int(values.max())
    if top == int(values.min()):
        return None
    return np.argsort(_narrow(values, top), kind="stable")


def _crossing(group: np.ndarray, ep: _Endpoints) -> np.ndarray:
    """Per slice (input index): does it cross a slice of its group that began before it?"""
    crossing = np.zeros(len(group), dtype=bool)
    by_group = None
    top = int(group.max())
    if top > int(group.min()):  # one radix sort of the emission order by group
        by_rank = _narrow(group if ep.border is None else group[ep.border], top)
        by_group = np.argsort(by_rank[ep.rank], kind="stable")
    is_begin = ep.is_begin if by_group is None else ep.is_begin[by_group]
    who = ep.rank if by_group is None else ep.rank[by_group]
    # every group is balanced, so one running sum over the group-major order is each group's
    # depth; an end sits at the depth its slice had (before it closes)
    step = is_begin.view(np.int8) * np.int8(2) - np.int8(1)
    level = np.cumsum(step, dtype=np.int32) + ~is_begin
    level = _narrow(level, int(level.max()))  # radix sort
    # a level's events of one group are contiguous and alternate begin / end: pairs never
    # straddle groups
    pairs = np.argsort(level, kind="stable").reshape(-1, 2)
    opened, closed = who[pairs[:, 0]], who[pairs[:, 1]]
    crossing[ep.slices(opened[closed < opened])] = True  # paired with an earlier slice's end
    return crossing


def _crossings(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """``_crossing`` for a subset of slices (their own emission order)."""
    return _crossing(group, _endpoints(start, end))


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


def _spill(
    group: np.ndarray, start: np.ndarray, end: np.ndarray, crossing: np.ndarray
) -> np.ndarray:
    """Lane per slice for groups that have crossings (``crossing``: the first pass's)."""
    lane = np.zeros(len(start), dtype=np.int64)
    todo = np.arange(len(start))
    current = 0
    first: np.ndarray | None = crossing
    while len(todo) and current < MAX_VECTOR_LANES:
        members, spilled = todo, []
        for _ in range(MAX_PASSES_PER_LANE):
            crossing = (
                _crossings(group[members], start[members], end[members]) if first is None else first
            )
            first = None
            if not crossing.any():
                break
            spilled.append(members[crossing])
            members = members[~crossing]
        else:
            break  # give up vectorising this lane: the stack walk takes the rest
        lane[members] = current
        todo = np.sort(np.concatenate(spilled)) if spilled else todo[:0]
        current += 1
    if len(todo):
        lane[todo] = _greedy(group[todo], start[todo], end[todo], current)
    return lane


def assign_lanes(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> Nesting:
    """Lanes and the emission order for slices (``end > start``) grouped by ``group`` (>= 0)."""
    group = np.asarray(group, dtype=np.int64)
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    n = len(start)
    lane = np.zeros(n, dtype=np.int64)
    if n == 0:
        return Nesting(
            lane=lane, slice=lane, is_begin=np.zeros(0, dtype=bool), ts=lane, begin_at=lane
        )
    ep = _endpoints(start, end)
    crossing = _crossing(group, ep)
    if crossing.any():
        bad = np.zeros(int(group.max()) + 1, dtype=bool)
        bad[group[crossing]] = True
        rows = np.flatnonzero(bad[group])
        # every lane is checked (or built by the stack walk) well nested there, and the
        # emission order is valid on any well-nested lane
        lane[rows] = _spill(group[rows], start[rows], end[rows], crossing[rows])
    # begin keys rise with the rank, so the begins come out in rank order
    begin_at = np.flatnonzero(ep.is_begin)
    if ep.border is not None:
        begin_at[ep.border] = begin_at.copy()
    return Nesting(
        lane=lane, slice=ep.slices(ep.rank), is_begin=ep.is_begin, ts=ep.ts, begin_at=begin_at
    )
