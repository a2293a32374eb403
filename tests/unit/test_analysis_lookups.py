"""The analyses' bulk lookups against plain Python: ids found through a table or a search
(``_keys.index_of``), the n smallest without a full sort (``_intervals.smallest_first``), the
runtime calls a correlation id finds (``_correlation``)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from neuron_profiler.analysis._correlation import runtime_calls
from neuron_profiler.analysis._intervals import smallest_first
from neuron_profiler.analysis._keys import TABLE_SLACK, index_of
from neuron_profiler.trace import EventKind, TraceBuilder

ids = st.lists(st.integers(-5, 3 * TABLE_SLACK), max_size=60)


@settings(max_examples=200, deadline=None)
@given(ids, ids, st.booleans())
def test_index_of_equals_a_dict(keys: list[int], wanted: list[int], far: bool) -> None:
    """Small non-negative keys take the table, others (negative, or one far out) the search:
    both answer as a dict of the keys would."""
    distinct = sorted(set(keys) | ({2**40} if far else set()))
    where = {k: i for i, k in enumerate(distinct)}
    got = index_of(np.array(distinct, np.int64), np.array(wanted, np.int64))
    assert got.tolist() == [where.get(w, -1) for w in wanted]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-3, 3), max_size=40), st.integers(-2, 45))
def test_smallest_first_equals_a_stable_sort(values: list[int], n: int) -> None:
    key = np.array(values, np.int64)
    assert smallest_first(key, n).tolist() == np.argsort(key, kind="stable")[:n].tolist()


def test_smallest_first_with_nan() -> None:
    key = np.array([3.0, np.nan, 1.0, np.nan, 1.0])
    for n in range(6):
        assert smallest_first(key, n).tolist() == np.argsort(key, kind="stable")[:n].tolist()


def test_runtime_calls_by_id_earliest_first() -> None:
    """Each id's calls, earliest first (file order among equal starts); ids <= 0 and calls
    that are not complete runtime rows are never found."""
    b = TraceBuilder()

    def call(ts_us: int, tid: int, correlation: int, kind: EventKind = EventKind.RUNTIME) -> None:
        b.add(
            name="launch",
            ts_ns=ts_us * 1000,
            dur_ns=5000,
            kind=kind,
            tid=tid,
            args={"correlation": correlation},
        )

    call(30, 1, 7)
    call(10, 2, 7)  # earlier
    call(10, 1, 7)  # as early, later in the file
    call(20, 1, 3)
    call(25, 1, 0)
    call(5, 1, 9, EventKind.CPU_OP)
    trace = b.build()
    calls = runtime_calls(trace)
    c = trace.columns
    k = calls.find(np.array([7, 3, 0, 9, -1, 8]))
    assert k[2:].tolist() == [-1, -1, -1, -1]
    first = [(int(c["ts_ns"][r]), int(c["tid"][r])) for r in calls.rows[calls.first[k[:2]]]]
    every = calls.rows[calls.first[k[0]] : calls.first[k[0] + 1]]
    assert first == [(10_000, 2), (20_000, 1)]
    assert [(int(c["ts_ns"][r]), int(c["tid"][r])) for r in every] == [
        (10_000, 2),
        (10_000, 1),
        (30_000, 1),
    ]
