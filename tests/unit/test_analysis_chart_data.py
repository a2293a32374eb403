"""What the HTML charts draw, computed by the analysis: the busy split of the step breakdown
and the fallback Pareto (the idle timeline is ``analysis.timeline``'s, tested with the
TensorBoard plugin's)."""

from __future__ import annotations

import numpy as np
import pytest
from trace_factory import US, Build

from neuron_profiler.analysis.findings import FallbackGroup
from neuron_profiler.analysis.pareto import fallback_pareto
from neuron_profiler.trace import EventKind
from neuron_profiler.trace import vocabulary as V


def test_busy_split_adds_up_to_busy_without_counting_twice() -> None:
    """Compute 0-400, a collective 300-600, copies 200-700 and 800-900 in a 1000 µs step: the
    collective adds 400-600 (not 300-400, under compute), the copies add 600-700 and 800-900."""
    b = Build().step(1, 0, 1000).kernel(0, 400)
    b.kernel(300, 600, name=f"{V.COLLECTIVE_ENGINE}: all_reduce", stream=3)
    for lo, hi in ((200, 700), (800, 900)):
        b.kernel(lo, hi, kind=EventKind.MEMCPY, stream=2, name=V.MEMCPY_NAMES["d2d"])
    (d,) = b.report().breakdown.devices
    assert (d.compute_ns[0], d.collective_only_ns[0], d.dma_only_ns[0]) == (
        400 * US,
        200 * US,
        200 * US,
    )
    assert d.compute_ns[0] + d.collective_only_ns[0] + d.dma_only_ns[0] == d.busy_ns[0]


def _group(op: str, ns: int) -> FallbackGroup:
    return FallbackGroup(
        op=op,
        shapes="",
        dtypes="",
        reason="",
        calls=1,
        host_ns=ns,
        d2h_count=0,
        d2h_bytes=0,
        d2h_ns=0,
        h2d_count=0,
        h2d_bytes=0,
        h2d_ns=0,
        idle_ns=ns,
        native_ns=None,
        recoverable_ns=ns,
        spans_ns=(),
    )


def test_pareto_orders_by_recoverable_time_with_the_running_share() -> None:
    p = fallback_pareto((_group("a", 10), _group("b", 60), _group("c", 30)))
    assert [g.op for g in p.groups] == ["b", "c", "a"] and p.total_ns == 100
    assert p.cumulative_pct.tolist() == pytest.approx([60.0, 90.0, 100.0])


def test_pareto_of_nothing_recoverable_is_all_zero() -> None:
    p = fallback_pareto((_group("a", 0), _group("b", 0)))
    assert p.total_ns == 0 and np.array_equal(p.cumulative_pct, [0.0, 0.0])
    assert fallback_pareto(()).groups == ()
