"""Interval sets as sorted disjoint (start, end) int64 arrays, with vectorised set operations.

Every analysis of busy, idle and overlapping time goes through these, so that "union",
"intersection" and "what is left" mean one thing everywhere::

    busy = union(starts, ends)               # Intervals, disjoint and sorted
    idle = subtract(window, busy)
    total_ns = idle.total

Empty and negative-length input intervals add nothing. Touching intervals merge.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Intervals:
    """Disjoint, sorted half-open intervals [start, end) in ns."""

    start: np.ndarray
    end: np.ndarray

    @property
    def total(self) -> int:
        return int((self.end - self.start).sum())

    def __len__(self) -> int:
        return len(self.start)


EMPTY = Intervals(np.zeros(0, np.int64), np.zeros(0, np.int64))


def union(start: np.ndarray, end: np.ndarray) -> Intervals:
    """Union of [start, end) intervals (any order, overlaps allowed)."""
    keep = end > start
    s, e = np.asarray(start, np.int64)[keep], np.asarray(end, np.int64)[keep]
    if len(s) == 0:
        return EMPTY
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return Intervals(s[first], reach[last])


def window(start: int, end: int) -> Intervals:
    return union(np.array([start]), np.array([end]))


def _segments(a: Intervals, b: Intervals) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Elementary segments between all boundaries of a and b, with their coverage by each."""
    points = _sorted_unique(np.concatenate([a.start, a.end, b.start, b.end]))
    lo, hi = points[:-1], points[1:]
    return lo, hi, _covers(a, lo), _covers(b, lo)


def _sorted_unique(x: np.ndarray) -> np.ndarray:
    """np.unique by sorting (faster than numpy's hash-based unique on large int arrays)."""
    x = np.sort(x)
    keep = np.ones(len(x), dtype=bool)
    keep[1:] = x[1:] != x[:-1]
    return x[keep]


def _covers(x: Intervals, at: np.ndarray) -> np.ndarray:
    k = np.searchsorted(x.start, at, side="right") - 1
    ok = k >= 0
    out = np.zeros(len(at), dtype=bool)
    out[ok] = x.end[k[ok]] > at[ok]
    return out


def _merge_marked(lo: np.ndarray, hi: np.ndarray, mark: np.ndarray) -> Intervals:
    if not mark.any():
        return EMPTY
    return union(lo[mark], hi[mark])


def intersect(a: Intervals, b: Intervals) -> Intervals:
    if len(a) == 0 or len(b) == 0:
        return EMPTY
    lo, hi, in_a, in_b = _segments(a, b)
    return _merge_marked(lo, hi, in_a & in_b)


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """a minus b."""
    if len(a) == 0 or len(b) == 0:
        return a
    lo, hi, in_a, in_b = _segments(a, b)
    return _merge_marked(lo, hi, in_a & ~in_b)


def combine(a: Intervals, b: Intervals) -> Intervals:
    """a union b."""
    return union(np.concatenate([a.start, b.start]), np.concatenate([a.end, b.end]))


def overlap_per_window(x: Intervals, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """ns of x inside each window [starts[i], ends[i]) (windows may overlap each other)."""
    if len(x) == 0:
        return np.zeros(len(starts), np.int64)
    cum = np.concatenate([[0], np.cumsum(x.end - x.start)])
    return _covered_up_to(x, cum, np.asarray(ends)) - _covered_up_to(x, cum, np.asarray(starts))


def _covered_up_to(x: Intervals, cum: np.ndarray, t: np.ndarray) -> np.ndarray:
    """ns of x before time t, per t."""
    k = np.searchsorted(x.start, t, side="right")  # intervals starting at or before t
    full = cum[np.maximum(k - 1, 0)]
    inside = np.where(k > 0, np.minimum(t, x.end[np.maximum(k - 1, 0)]) - x.start[np.maximum(k - 1, 0)], 0)
    return np.where(k > 0, full + inside, 0)


def any_overlap(span_start: np.ndarray, span_end: np.ndarray, starts: np.ndarray,
                ends: np.ndarray) -> np.ndarray:
    """Per query window [starts[i], ends[i]): does any span [span_start, span_end) overlap it
    (open on both sides: touching is not overlapping)? Spans in any order."""
    if len(span_start) == 0:
        return np.zeros(len(starts), dtype=bool)
    order = np.argsort(span_start, kind="stable")
    s, reach = span_start[order], np.maximum.accumulate(span_end[order])
    k = np.searchsorted(s, ends, side="left")  # spans starting before the window ends
    ok = k > 0
    out = np.zeros(len(starts), dtype=bool)
    out[ok] = reach[k[ok] - 1] > starts[ok]
    return out


def longest(x: Intervals, n: int) -> tuple[tuple[int, int], ...]:
    """The ``n`` longest intervals as (start, end) pairs, longest first (earliest among equals):
    the evidence ranges a report shows."""
    pick = np.argsort(x.start - x.end, kind="stable")[:n]
    return tuple((int(x.start[i]), int(x.end[i])) for i in pick.tolist())
