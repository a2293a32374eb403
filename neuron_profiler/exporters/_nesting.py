"""Slice nesting for track-based formats: which lane (sibling track) each slice goes on, and an
order of begin/end events in which every lane's slices are well nested.

    nest = assign_lanes(thread, start_ns, end_ns)   # one entry per slice (end > start)
    nest.lane          # 0 = the thread's own track, k > 0 = its k-th sibling track
    nest.begin_pos     # sort all begins and ends by (time, pos): valid on every lane

Why vectorised: a stack walk per event costs about a microsecond in Python, the whole budget for
a million slices. Instead each pass sorts the begin/end events once, computes the nesting depth
with a cumulative sum and pairs begins with ends level by level (on a well-nested lane, begins and
ends at one depth alternate); a slice whose begin pairs with another slice's end crosses it. The
later-starting slice of each crossing moves to the next lane and the pass repeats; the rare
pathological remainder falls back to a greedy stack walk.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_PASSES_PER_LANE = 16
MAX_VECTOR_LANES = 32


@dataclass(frozen=True)
class Nesting:
    """Lane per slice and a global position per begin/end (unique, consistent with time)."""

    lane: np.ndarray
    begin_pos: np.ndarray
    end_pos: np.ndarray


@dataclass(frozen=True)
class _Pass:
    crossing: np.ndarray  # slices to move to the next lane
    begin_pos: np.ndarray
    end_pos: np.ndarray


def _keys(group: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One sortable int64 per (group, time) for two event sets, ordered like the pairs."""
    lo = min(int(a.min()), int(b.min()))
    width = max(int(a.max()), int(b.max())) - lo + 1
    if int(group.max()) < (2**62) // width:
        return group * width + (a - lo), group * width + (b - lo)
    both = np.concatenate([a, b])  # too wide for one int64: use dense ranks instead
    gg = np.concatenate([group, group])
    order = np.lexsort((both, gg))
    new = np.ones(len(both), dtype=bool)
    new[1:] = (gg[order][1:] != gg[order][:-1]) | (both[order][1:] != both[order][:-1])
    rank = np.empty(len(both), dtype=np.int64)
    rank[order] = np.cumsum(new) - 1
    return rank[: len(a)], rank[len(a):]


def _begin_order(group: np.ndarray, start: np.ndarray, end: np.ndarray,
                 start_key: np.ndarray) -> np.ndarray:
    """Slices by (group, start, -end). Input sorted by start (a trace is sorted by ts) takes a
    stable radix sort on the group alone; ties in start then only need their ends checked."""
    in_time_order = len(start) > 1 and bool((start[1:] >= start[:-1]).all())
    if in_time_order and int(group.max()) < 2**15:
        order = np.argsort(group.astype(np.int16), kind="stable")
        k, e = start_key[order], end[order]
        if not ((k[1:] == k[:-1]) & (e[1:] > e[:-1])).any():  # equal starts: longer first
            return order
    return np.lexsort((-end, start_key))


def _check(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> _Pass:
    """One vectorised pass: positions of begins/ends and the slices that cross an earlier one.

    Order within a group: by time; at equal times ends before begins (adjacent slices touch, not
    overlap); begins outer-first (longer first), ends inner-first (later-started first).
    """
    n = len(start)
    start_key, end_key = _keys(group, start, end)
    border = _begin_order(group, start, end, start_key)
    rank = np.empty(n, dtype=np.int64)
    rank[border] = np.arange(n)
    # ends by (key, -rank): a stable sort of the reversed begin order keeps later begins first
    backwards = border[::-1]
    eorder = backwards[np.argsort(end_key[backwards], kind="stable")]
    # merge the two sorted runs (timsort merges runs in linear time); at equal keys the ends,
    # placed first, stay first
    merged = np.argsort(np.concatenate([end_key[eorder], start_key[border]]), kind="stable")
    is_begin = merged >= n
    who = np.concatenate([eorder, border])[merged]  # slice of each event, in merged order
    depth = np.cumsum(np.where(is_begin, 1, -1).astype(np.int32))
    level = depth + ~is_begin  # an end sits at the depth its slice had (before it closes)
    small = np.int16 if n < 2**15 or int(level.max()) < 2**15 else np.int64
    pairs = np.argsort(level.astype(small), kind="stable").reshape(-1, 2)  # radix when small
    opened, closed = who[pairs[:, 0]], who[pairs[:, 1]]
    position = np.empty(2 * n, dtype=np.int64)
    position[merged] = np.arange(2 * n)
    begin_pos = np.empty(n, dtype=np.int64)
    end_pos = np.empty(n, dtype=np.int64)
    begin_pos[border] = position[n:]
    end_pos[eorder] = position[:n]
    crossing = np.zeros(n, dtype=bool)
    wrong = opened != closed
    crossing[opened[wrong & (rank[closed] < rank[opened])]] = True
    return _Pass(crossing=crossing, begin_pos=begin_pos, end_pos=end_pos)


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


def _spill(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Lane per slice for groups that have crossings."""
    lane = np.zeros(len(start), dtype=np.int64)
    todo = np.arange(len(start))
    current = 0
    while len(todo) and current < MAX_VECTOR_LANES:
        members, spilled = todo, []
        for _ in range(MAX_PASSES_PER_LANE):
            crossing = _check(group[members], start[members], end[members]).crossing
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
    """Lanes and begin/end positions for slices (``end > start``) grouped by ``group`` (>= 0)."""
    group = np.asarray(group, dtype=np.int64)
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    n = len(start)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Nesting(lane=empty, begin_pos=empty, end_pos=empty)
    first = _check(group, start, end)
    if not first.crossing.any():
        return Nesting(lane=np.zeros(n, dtype=np.int64), begin_pos=first.begin_pos,
                       end_pos=first.end_pos)
    lane = np.zeros(n, dtype=np.int64)
    bad = np.zeros(int(group.max()) + 1, dtype=bool)
    bad[group[first.crossing]] = True
    rows = np.flatnonzero(bad[group])
    lane[rows] = _spill(group[rows], start[rows], end[rows])
    track = group[rows] * (int(lane.max()) + 1) + lane[rows]
    again = _check(track, start[rows], end[rows])
    if again.crossing.any():  # cannot happen: every lane was checked or built by the stack walk
        raise AssertionError("slice lanes are not well nested")
    # the re-laid groups take over the positions their events had: other groups keep theirs
    slots = np.sort(np.concatenate([first.begin_pos[rows], first.end_pos[rows]]))
    begin_pos, end_pos = first.begin_pos.copy(), first.end_pos.copy()
    begin_pos[rows], end_pos[rows] = slots[again.begin_pos], slots[again.end_pos]
    return Nesting(lane=lane, begin_pos=begin_pos, end_pos=end_pos)
