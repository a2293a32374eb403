"""Perfetto export of events at negative timestamps (a Perfetto timestamp is a uint64): they
are left out and counted, and everything computed from the trace leaves them out too, the
device counters included, so no packet lands before 0. Expected values worked out by hand."""

from __future__ import annotations

from pathlib import Path

from perfetto_checks import decode_and_check

from neuron_profiler.analysis.counters import device_counters
from neuron_profiler.exporters.perfetto import write_perfetto_trace
from neuron_profiler.trace import EventKind, Phase, TraceBuilder
from neuron_profiler.trace import vocabulary as V

US = 1000


def _kernel(b: TraceBuilder, start_ns: int, dur_ns: int) -> None:
    b.add(
        name="k",
        ts_ns=start_ns,
        dur_ns=dur_ns,
        kind=EventKind.KERNEL,
        cat="kernel",
        pid=0,
        tid=7,
        args={V.ARG_DEVICE: 0, V.ARG_STREAM: 7, V.ARG_CORRELATION: 1},
    )


def _op(b: TraceBuilder) -> None:
    b.add(name="a", ts_ns=1 * US, dur_ns=2 * US, kind=EventKind.CPU_OP, cat="cpu_op", pid=1, tid=1)


def test_device_event_before_zero_is_left_out_with_its_counters(tmp_path: Path) -> None:
    """A kernel at -5 µs and a host op at 1 µs: the kernel is left out (counted) and, with it,
    the only device work, so no counter track has a sample."""
    b = TraceBuilder()
    _kernel(b, -5 * US, 2 * US)
    _op(b)
    result = write_perfetto_trace(b.build(), tmp_path / "t.pftrace")
    assert result.skipped == {"negative timestamp": 1}
    assert (result.slices, result.instants, result.counter_points) == (1, 0, 0)
    d = decode_and_check(result.path)
    assert [s[1:] for s in d.slices] == [("a", "cpu_op", 1 * US, 3 * US)]
    assert not any(d.counters.values())


def test_counters_come_from_the_kept_work_only(tmp_path: Path) -> None:
    """Kernels at [-50, 50) µs (left out) and [10, 20) µs: busy % is drawn from the kept one
    alone, a grid from 10 µs of 1 µs bins, 100 % until 20 µs, for the device and its queue
    (counting the left-out kernel would start the grid at -50 µs)."""
    b = TraceBuilder()
    _kernel(b, -50 * US, 100 * US)
    _kernel(b, 10 * US, 10 * US)
    result = write_perfetto_trace(b.build(), tmp_path / "t.pftrace")
    assert result.skipped == {"negative timestamp": 1}
    assert (result.slices, result.counter_points) == (1, 4)
    d = decode_and_check(result.path)
    samples = [pts for pts in d.counters.values() if pts]
    assert samples == [[(10 * US, 100.0), (20 * US, 0.0)]] * 2


def test_trace_of_only_negative_events_exports_empty(tmp_path: Path) -> None:
    b = TraceBuilder()
    _kernel(b, -5 * US, 2 * US)
    b.add(name="i", ts_ns=-1 * US, ph=Phase.INSTANT, pid=1, tid=1)
    result = write_perfetto_trace(b.build(), tmp_path / "t.pftrace")
    assert result.skipped == {"negative timestamp": 2}
    assert (result.slices, result.instants, result.counter_points) == (0, 0, 0)
    d = decode_and_check(result.path)
    assert d.slices == [] and d.instants == [] and not any(d.counters.values())


def test_chrome_counter_before_zero_is_left_out(tmp_path: Path) -> None:
    """``C`` events at -3 µs (10) and 4 µs (20): only the second is written."""
    b = TraceBuilder()
    b.add(name="mem", ts_ns=-3 * US, ph=Phase.COUNTER, pid=1, args={"bytes": 10})
    b.add(name="mem", ts_ns=4 * US, ph=Phase.COUNTER, pid=1, args={"bytes": 20})
    _op(b)
    result = write_perfetto_trace(b.build(), tmp_path / "t.pftrace")
    assert result.skipped == {"negative timestamp": 1}
    assert result.counter_points == 1
    d = decode_and_check(result.path)
    assert [pts for pts in d.counters.values() if pts] == [[(4 * US, 20.0)]]


def test_given_counters_before_zero_are_left_out_and_counted(tmp_path: Path) -> None:
    """Counters a caller computed over every event: the kernel at [-5, -3) µs gives 2 bins of
    1 µs at 100 %, written as 100 at -5 µs and 0 at -3 µs, for the device and its queue: all 4
    samples fall before 0 and are left out, counted."""
    b = TraceBuilder()
    _kernel(b, -5 * US, 2 * US)
    _op(b)
    trace = b.build()
    result = write_perfetto_trace(trace, tmp_path / "t.pftrace", counters=device_counters(trace))
    assert result.skipped == {
        "negative timestamp": 1,
        "device counter sample at negative timestamp": 4,
    }
    assert result.counter_points == 0
    assert not any(decode_and_check(result.path).counters.values())
