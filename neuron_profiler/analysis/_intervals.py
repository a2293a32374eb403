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


# bincount table size allowed beyond the row count: a group code up to this (and up to the row
# count) costs one small table, no sort
DENSE_LIMIT = 1 << 16

EMPTY = Intervals(np.zeros(0, np.int64), np.zeros(0, np.int64))


def union(start: np.ndarray, end: np.ndarray) -> Intervals:
    """Union of [start, end) intervals (any order, overlaps allowed)."""
    keep = end > start
    s, e = np.asarray(start, np.int64)[keep], np.asarray(end, np.int64)[keep]
    if len(s) == 0:
        return EMPTY
    if bool((s[1:] >= s[:-1]).all()):  # (rows by start, as traces and device work are)
        return Intervals(*_merge_sorted(s, e))
    order = np.argsort(s, kind="stable")
    return Intervals(*_merge_sorted(s[order], e[order]))


def _merge_sorted(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals sorted by start: a new interval begins where a start passes every
    earlier end. The one merge rule every union here uses."""
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s[first], reach[last]


def union_by_group(
    group: np.ndarray, start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The union within each group (a device, a queue): (group, start, end) of disjoint
    intervals sorted by (group, start). Empty and negative intervals add nothing, as in
    ``union``. The groups are laid end to end on one axis (each shifted past the previous
    one's reach), so one merge serves them all."""
    keep = end > start
    g = np.asarray(group, np.int64)[keep]
    s, e = np.asarray(start, np.int64)[keep], np.asarray(end, np.int64)[keep]
    if len(s) == 0:
        return g, s, e
    low, high = int(s.min()), int(e.max())
    width = high - low + 1
    codes, dense = dense_codes(g)
    if len(codes) * width >= 2**62:  # absurd spans: one group at a time
        parts = [(c, union(s[dense == k], e[dense == k])) for k, c in enumerate(codes.tolist())]
        return (
            np.concatenate([np.full(len(x), c, np.int64) for c, x in parts]),
            np.concatenate([x.start for _, x in parts]),
            np.concatenate([x.end for _, x in parts]),
        )
    offset = dense.astype(np.int64) * width - low
    order = _group_order(dense, s)
    ms, me = _merge_sorted((s + offset)[order], (e + offset)[order])
    at = ms // width
    return codes[at], ms - at * width + low, me - at * width + low


def distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` of integer values (sorted, each once), without numpy's check for
    masked arrays, which imports ``numpy.ma`` at its first use: 10 ms of every analyze run."""
    ordered = np.sort(np.asarray(values).ravel())
    return ordered[np.r_[True, ordered[1:] != ordered[:-1]]] if len(ordered) else ordered


def dense_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` for int64 values. Group codes are mostly
    small non-negative ints (factorized devices / queues): then a bincount finds them in one
    pass, where ``np.unique`` sorts (about 15x slower on 250k rows)."""
    if len(values) and int(values.min()) >= 0 and int(values.max()) < DENSE_LIMIT + len(values):
        present = np.bincount(values) > 0
        index = np.cumsum(present) - 1
        return np.flatnonzero(present), index[values]
    return np.unique(values, return_inverse=True)


def _group_order(dense: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Order by (group, start): a stable sort on the group code alone when ``start`` is
    already sorted (device work is), else a lexsort."""
    if len(start) > 1 and not bool((start[1:] >= start[:-1]).all()):
        return np.lexsort((start, dense))
    small = np.int16 if len(dense) and int(dense.max()) < 2**15 else np.int64
    return np.argsort(dense.astype(small), kind="stable")


def window(start: int, end: int) -> Intervals:
    return union(np.array([start]), np.array([end]))


def _pairs(a: Intervals, b: Intervals) -> tuple[np.ndarray, np.ndarray]:
    """Indices (i, j) of every overlapping pair a[i], b[j]. Both sets are disjoint and sorted,
    so the b intervals meeting a[i] are one run, found with two searches per a interval (no
    sort of all boundaries): at most len(a) + len(b) pairs."""
    first = np.searchsorted(b.end, a.start, side="right")  # first b ending after a[i] starts
    stop = np.searchsorted(b.start, a.end, side="left")  # b starting before a[i] ends
    count = np.maximum(stop - first, 0)
    total = int(count.sum())
    ia = np.repeat(np.arange(len(a)), count)
    run_start = np.cumsum(count) - count
    ib = np.arange(total) - np.repeat(run_start - first, count)
    return ia, ib


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """a and b: each overlapping pair's common part. Pieces of distinct pairs never touch
    (a's and b's own intervals do not), so the result is already disjoint and sorted."""
    if len(a) == 0 or len(b) == 0:
        return EMPTY
    ia, ib = _pairs(a, b)
    return Intervals(np.maximum(a.start[ia], b.start[ib]), np.minimum(a.end[ia], b.end[ib]))


def _complement(b: Intervals) -> Intervals:
    """Everything not in b, as far as int64 reaches."""
    low, high = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    start = np.concatenate([[low], b.end])
    end = np.concatenate([b.start, [high]])
    keep = end > start  # (only b starting at int64's lowest value makes one empty)
    return Intervals(start[keep], end[keep])


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """a minus b."""
    if len(a) == 0 or len(b) == 0:
        return a
    return intersect(a, _complement(b))


def overlap_per_window(x: Intervals, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """ns of x inside each window [starts[i], ends[i]) (windows may overlap each other)."""
    if len(x) == 0:
        return np.zeros(len(starts), np.int64)
    cum = np.concatenate([[0], np.cumsum(x.end - x.start)])
    return _covered_up_to(x, cum, np.asarray(ends)) - _covered_up_to(x, cum, np.asarray(starts))


def overlap_per_window_by_key(
    x: Intervals, key: np.ndarray, keys: int, starts: np.ndarray, ends: np.ndarray
) -> np.ndarray:
    """(windows x keys) ns of x inside each window, split by each interval's ``key`` (0 ..
    keys - 1). Disjoint windows in order: each piece's overlaps summed into its (window, key)
    cell in one pass; otherwise ``overlap_per_window`` key by key."""
    if len(starts) and bool((ends >= starts).all() and (starts[1:] >= ends[:-1]).all()):
        ix, iw = _pairs(x, Intervals(starts, ends)) if len(x) else (np.zeros(0, np.int64),) * 2
        overlap = np.minimum(x.end[ix], ends[iw]) - np.maximum(x.start[ix], starts[iw])
        out = np.zeros(len(starts) * keys, np.int64)
        np.add.at(out, iw * keys + key[ix], overlap)
        return out.reshape(len(starts), keys)
    out = np.zeros((len(starts), keys), np.int64)
    for k in range(keys):
        mine = key == k
        out[:, k] = overlap_per_window(Intervals(x.start[mine], x.end[mine]), starts, ends)
    return out


def _covered_up_to(x: Intervals, cum: np.ndarray, t: np.ndarray) -> np.ndarray:
    """ns of x before time t, per t."""
    k = np.searchsorted(x.start, t, side="right")  # intervals starting at or before t
    full = cum[np.maximum(k - 1, 0)]
    inside = np.where(
        k > 0, np.minimum(t, x.end[np.maximum(k - 1, 0)]) - x.start[np.maximum(k - 1, 0)], 0
    )
    return np.where(k > 0, full + inside, 0)


def any_overlap(
    span_start: np.ndarray, span_end: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> np.ndarray:
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
    pick = smallest_first(x.start - x.end, n)
    return tuple((int(x.start[i]), int(x.end[i])) for i in pick.tolist())


def smallest_first(key: np.ndarray, n: int) -> np.ndarray:
    """``np.argsort(key, kind="stable")[:n]`` without sorting every entry: only those up to
    the n-th smallest value (its ties included) are sorted (a trace's gaps run into millions,
    a report lists ten)."""
    if n < 0 or n >= len(key):
        return np.argsort(key, kind="stable")[:n]
    if n == 0:
        return np.zeros(0, np.intp)
    bound = np.partition(key, n - 1)[n - 1]
    if bound != bound:  # NaN: sorted last, and no value is <= it
        return np.argsort(key, kind="stable")[:n]
    candidates = np.flatnonzero(key <= bound)
    return candidates[np.argsort(key[candidates], kind="stable")[:n]]
