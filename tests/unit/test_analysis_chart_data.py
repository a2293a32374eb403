"""What the charts draw, computed by the analysis: the busy split of the step breakdown, the
idle gaps a timeline keeps (and counts), the fallback Pareto."""

from __future__ import annotations

import numpy as np
import pytest
from trace_factory import US, Build

from neuron_profiler.analysis import Options, analyze
from neuron_profiler.analysis.findings import FallbackGroup
from neuron_profiler.analysis.idle import ALL_CAUSES
from neuron_profiler.analysis.pareto import fallback_pareto
from neuron_profiler.analysis.timeline import idle_timeline
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
        400 * US, 200 * US, 200 * US)
    assert d.compute_ns[0] + d.collective_only_ns[0] + d.dma_only_ns[0] == d.busy_ns[0]


def _three_cores() -> Build:
    """Core c: kernels leaving gaps of 100, 300, 200 µs (+ 10 c) in one 3000 µs step."""
    b = Build().step(1, 0, 3000)
    for core in range(3):
        t = 0
        for gap in (100, 300, 200):
            b.kernel(t, t + 100, device=core)
            t += 100 + gap + 10 * core
        b.kernel(t, 3000, device=core)
    return b


def test_each_device_keeps_its_longest_gaps_and_counts_the_rest() -> None:
    report = analyze(_three_cores().b.build(), Options(timeline_gaps=3, hta=False, tb=False))
    t = report.idle_timeline
    assert t.per_device == 1 and t.device.tolist() == [0, 1, 2]
    assert ((t.end_ns - t.start_ns) // US).tolist() == [300, 310, 320]
    assert t.total_gaps == len(report.idle.gap_cause) == 9 and t.hidden_gaps == 6
    for c in t.counts:
        mine = report.idle.gap_device == c.device
        assert c.gaps == int((report.idle.gap_cause[mine] == ALL_CAUSES.index(c.cause)).sum())
    hidden = {c.device: c.hidden_ns for c in t.counts}
    assert hidden == {k: (100 + 200 + 20 * k) * US for k in range(3)}


def test_a_budget_beyond_the_gaps_draws_them_all() -> None:
    idle = analyze(_three_cores().b.build()).idle
    t = idle_timeline(idle, max_gaps=1000)
    assert len(t.start_ns) == 9 and t.hidden_gaps == 0
    assert sorted(t.start_ns.tolist()) == sorted(idle.gap_start_ns.tolist())


def _group(op: str, ns: int) -> FallbackGroup:
    return FallbackGroup(op=op, shapes="", dtypes="", reason="", calls=1, host_ns=ns,
                         d2h_count=0, d2h_bytes=0, d2h_ns=0, h2d_count=0, h2d_bytes=0, h2d_ns=0,
                         idle_ns=ns, native_ns=None, recoverable_ns=ns, spans_ns=())


def test_pareto_orders_by_recoverable_time_with_the_running_share() -> None:
    p = fallback_pareto((_group("a", 10), _group("b", 60), _group("c", 30)))
    assert [g.op for g in p.groups] == ["b", "c", "a"] and p.total_ns == 100
    assert p.cumulative_pct.tolist() == pytest.approx([60.0, 90.0, 100.0])


def test_pareto_of_nothing_recoverable_is_all_zero() -> None:
    p = fallback_pareto((_group("a", 0), _group("b", 0)))
    assert p.total_ns == 0 and np.array_equal(p.cumulative_pct, [0.0, 0.0])
    assert fallback_pareto(()).groups == ()
