"""Each item's share of an interval set, where items overlap: every instant of ``within`` that
k items cover gives 1/k of itself to each of them, so the shares add up to the part of
``within`` the items cover, and nothing is counted twice::

    share = split_among(kernel_start, kernel_end, busy)     # float ns per kernel
    share.sum() + (busy.total - covered) == busy.total

One sort of every edge and a prefix sum, not a pass per item: the edges of the items and of
``within`` cut time into pieces that are wholly in or out of ``within``, each covered by a count
of items (a running sum of +1 at starts and -1 at ends); a piece's weight is its length over
that count, and an item's share is the sum of the weights between its edges (two reads of the
prefix sum). O((n + m) log(n + m)) for n items and m intervals.
"""

from __future__ import annotations

import numpy as np

from neuron_profiler.analysis._intervals import Intervals


def split_among(start: np.ndarray, end: np.ndarray, within: Intervals) -> np.ndarray:
    """Each item [start, end)'s share (ns, float) of ``within``."""
    n = len(start)
    if n == 0 or len(within) == 0:
        return np.zeros(n)
    edges = np.sort(np.concatenate([start, end, within.start, within.end]))
    edges = edges[np.r_[True, edges[1:] != edges[:-1]]]  # (a sort: np.unique hashes, slower)
    lo = np.searchsorted(edges, start)
    hi = np.searchsorted(edges, end)
    real = hi > lo
    steps = np.bincount(lo[real], minlength=len(edges)) - np.bincount(
        hi[real], minlength=len(edges)
    )
    count = np.cumsum(steps)[:-1]
    piece_start = edges[:-1]
    k = np.searchsorted(within.end, piece_start, side="right")
    inside = k < len(within)
    inside[inside] = within.start[k[inside]] <= piece_start[inside]
    weight = np.where(inside & (count > 0), np.diff(edges) / np.maximum(count, 1), 0.0)
    prefix = np.concatenate([[0.0], np.cumsum(weight)])
    return prefix[hi] - prefix[lo]


def split_among_cover(
    start: np.ndarray, end: np.ndarray, cover_start: np.ndarray, cover_end: np.ndarray
) -> np.ndarray:
    """Each item [start, end)'s share (ns, float) of a cover whose intervals may overlap (one
    set per device, say): every instant that c cover intervals and k items hold gives c/k of
    itself to each item. With a disjoint cover this is ``split_among`` (the same arithmetic);
    with one interval set per device it is the sum of each device's ``split_among``, in one
    pass whatever the number of devices, when the items are the same for every device."""
    n = len(start)
    if n == 0 or len(cover_start) == 0:
        return np.zeros(n)
    edges = np.sort(np.concatenate([start, end, cover_start, cover_end]))
    edges = edges[np.r_[True, edges[1:] != edges[:-1]]]
    lo = np.searchsorted(edges, start)
    hi = np.searchsorted(edges, end)
    real = hi > lo
    count = np.cumsum(
        np.bincount(lo[real], minlength=len(edges)) - np.bincount(hi[real], minlength=len(edges))
    )[:-1]
    c_lo, c_hi = np.searchsorted(edges, cover_start), np.searchsorted(edges, cover_end)
    full = c_hi > c_lo
    cover = np.cumsum(
        np.bincount(c_lo[full], minlength=len(edges))
        - np.bincount(c_hi[full], minlength=len(edges))
    )[:-1]
    weight = np.where((cover > 0) & (count > 0), np.diff(edges) * cover / np.maximum(count, 1), 0.0)
    prefix = np.concatenate([[0.0], np.cumsum(weight)])
    return prefix[hi] - prefix[lo]
