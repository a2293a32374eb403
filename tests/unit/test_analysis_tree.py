"""The vectorised containment tree against a plain stack walk and a naive subtree sum, on
random threads of intervals (nested, crossing, zero-length, equal starts and ends)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from neuron_profiler.analysis._tree import parents, subtree_sums


def stack_walk(thread: list[int], start: list[int], end: list[int]) -> list[int]:
    """The reference: a stack per thread; pop rows that end before this one ends or at/before
    it starts; the top is the parent."""
    out, stack, current = [], [], None
    for i in range(len(start)):
        if thread[i] != current:
            stack, current = [], thread[i]
        while stack and (end[stack[-1]] < end[i] or start[i] >= end[stack[-1]]):
            stack.pop()
        out.append(stack[-1] if stack else -1)
        stack.append(i)
    return out


def naive_sums(parent: list[int], values: list[int]) -> list[int]:
    total = list(values)
    for i in range(len(parent)):
        p = parent[i]
        while p >= 0:
            total[p] += values[i]
            p = parent[p]
    return total


intervals = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 60), st.integers(0, 30), st.integers(0, 1000)),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(intervals)
def test_parents_and_sums_equal_the_stack_walk(rows: list[tuple[int, int, int, int]]) -> None:
    rows.sort(key=lambda r: (r[0], r[1], -(r[1] + r[2])))
    thread = np.array([r[0] for r in rows], np.int64)
    start = np.array([r[1] for r in rows], np.int64)
    end = start + np.array([r[2] for r in rows], np.int64)
    values = np.array([r[3] for r in rows], np.int64)
    expected = stack_walk(thread.tolist(), start.tolist(), end.tolist())
    got = parents(thread, start, end)
    assert got.tolist() == expected
    assert subtree_sums(got, values).tolist() == naive_sums(expected, values.tolist())


def test_a_deep_chain_and_a_long_sibling_run() -> None:
    n = 5000  # nested 5000 deep, then 5000 siblings under one root
    start = np.r_[np.arange(n), 10 * n + 2 * np.arange(n)]
    end = np.r_[2 * n - np.arange(n), 10 * n + 2 * np.arange(n) + 1]
    start, end = np.r_[start, 10 * n - 1], np.r_[end, 12 * n + 1]
    order = np.lexsort((-end, start))
    start, end = start[order], end[order]
    thread = np.zeros(len(start), np.int64)
    got = parents(thread, start, end)
    assert got.tolist() == stack_walk(thread.tolist(), start.tolist(), end.tolist())
    ones = np.ones(len(start), np.int64)
    assert subtree_sums(got, ones).tolist() == naive_sums(got.tolist(), ones.tolist())
