"""Device busy % and DMA bandwidth over time, against hand computations and a brute-force
per-nanosecond reference."""

from __future__ import annotations

import numpy as np
import pytest

from neuron_profiler.analysis.counters import device_counters
from neuron_profiler.trace import EventKind, TraceBuilder

T0 = 1_700_000_000_000_000_000


def _small_trace():
    b = TraceBuilder()
    k, m = EventKind.KERNEL, EventKind.MEMCPY
    b.add(name="k1", ts_ns=T0 + 0, dur_ns=30, kind=k, cat="kernel", pid=0, tid=0)
    b.add(name="k2", ts_ns=T0 + 20, dur_ns=30, kind=k, cat="kernel", pid=0, tid=0)  # overlaps k1
    b.add(name="k3", ts_ns=T0 + 120, dur_ns=30, kind=k, cat="kernel", pid=0, tid=0)
    b.add(
        name="copy",
        ts_ns=T0,
        dur_ns=100,
        kind=m,
        cat="gpu_memcpy",
        pid=0,
        tid=1,
        args={"bytes": 1000},
    )
    b.add(
        name="copy0",
        ts_ns=T0 + 150,
        dur_ns=0,
        kind=m,
        cat="gpu_memcpy",
        pid=0,
        tid=1,
        args={"bytes": 500},
    )
    b.add(name="nobytes", ts_ns=T0 + 160, dur_ns=10, kind=m, cat="gpu_memcpy", pid=0, tid=1)
    # host work overlapping everything: never counted as device time
    b.add(
        name="aten::mm", ts_ns=T0, dur_ns=200, kind=EventKind.CPU_OP, cat="cpu_op", pid=77, tid=77
    )
    return b.build()


def test_busy_and_bandwidth_by_hand() -> None:
    c = device_counters(_small_trace(), bin_ns=100)
    assert (c.start_ns, c.bin_ns, c.n_bins) == (T0, 100, 2)
    busy = {(s.pid, s.tid): s.values.tolist() for s in c.busy}
    assert set(busy) == {(0, None), (0, 0), (0, 1)}  # host pid 77 has no series
    assert busy[(0, 0)] == pytest.approx([50.0, 30.0])  # union [0,50) then [120,150)
    assert busy[(0, 1)] == pytest.approx([100.0, 10.0])  # copy [0,100), nobytes [160,170)
    assert busy[(0, None)] == pytest.approx([100.0, 40.0])  # [0,100) | [120,150) + [160,170)
    (dma,) = c.dma_bandwidth
    assert dma.unit == "GB/s" and dma.pid == 0
    assert dma.values.tolist() == pytest.approx([1000 / 100, 500 / 100])  # bytes/ns == GB/s
    assert c.transfers_without_bytes == 1
    assert dma.ts_ns.tolist() == [T0, T0 + 100]


def test_transfer_spread_over_bins() -> None:
    b = TraceBuilder()
    b.add(
        name="copy",
        ts_ns=T0 + 50,
        dur_ns=300,
        kind=EventKind.MEMCPY,
        cat="gpu_memcpy",
        pid=3,
        tid=1,
        args={"bytes": 3000},
    )
    b.add(name="k", ts_ns=T0, dur_ns=1, kind=EventKind.KERNEL, cat="kernel", pid=3, tid=0)
    c = device_counters(b.build(), bin_ns=100)
    # 10 bytes/ns over [50, 350): 500, 1000, 1000, 500 bytes per 100 ns bin
    assert c.dma_bandwidth[0].values.tolist() == pytest.approx([5.0, 10.0, 10.0, 5.0])
    queue = next(s for s in c.busy if s.tid == 1)
    assert queue.values.tolist() == pytest.approx([50.0, 100.0, 100.0, 50.0])


def test_cuda_style_device_pids_and_collectives() -> None:
    b = TraceBuilder()
    b.add(name="nccl", ts_ns=T0, dur_ns=1000, kind=EventKind.COLLECTIVE, cat="kernel", pid=1, tid=7)
    b.add(
        name="gemm", ts_ns=T0 + 500, dur_ns=1000, kind=EventKind.KERNEL, cat="kernel", pid=1, tid=8
    )
    b.add(
        name="anno",
        ts_ns=T0,
        dur_ns=5000,
        kind=EventKind.GPU_USER_ANNOTATION,
        cat="gpu_user_annotation",
        pid=1,
        tid=7,
    )  # annotation, not work
    c = device_counters(b.build(), bin_ns=1000)
    busy = {(s.pid, s.tid): s.values.tolist() for s in c.busy}
    assert busy[(1, 7)] == pytest.approx([100.0, 0.0])
    assert busy[(1, 8)] == pytest.approx([50.0, 50.0])
    assert busy[(1, None)] == pytest.approx([100.0, 50.0])
    assert c.dma_bandwidth == ()


def test_against_per_nanosecond_reference() -> None:
    rng = np.random.default_rng(7)
    b = TraceBuilder()
    spans = []
    for _ in range(300):
        pid, tid = int(rng.integers(0, 2)), int(rng.integers(0, 3))
        start, dur = int(rng.integers(0, 5000)), int(rng.integers(0, 400))
        kind = EventKind.MEMCPY if tid == 1 else EventKind.KERNEL
        b.add(
            name="w",
            ts_ns=T0 + start,
            dur_ns=dur,
            kind=kind,
            cat="kernel",
            pid=pid,
            tid=tid,
            args={"bytes": dur * 3} if kind == EventKind.MEMCPY else None,
        )
        spans.append((pid, tid, start, dur))
    c = device_counters(b.build(), bin_ns=250)
    origin = min(s for _, _, s, _ in spans)
    length = c.n_bins * 250
    for series in c.busy:
        covered = np.zeros(length, dtype=bool)
        for pid, tid, start, dur in spans:
            if pid == series.pid and series.tid in (None, tid):
                covered[start - origin : start - origin + dur] = True
        expected = covered.reshape(-1, 250).mean(axis=1) * 100
        assert series.values == pytest.approx(expected), (series.pid, series.tid)
    for series in c.dma_bandwidth:
        per_ns = np.zeros(length)
        for pid, tid, start, dur in spans:
            if pid == series.pid and tid == 1 and dur:
                per_ns[start - origin : start - origin + dur] += 3.0  # bytes = 3 * dur
        expected = per_ns.reshape(-1, 250).sum(axis=1) / 250
        assert series.values == pytest.approx(expected)


def test_auto_bins_and_frame() -> None:
    trace = _small_trace()
    c = device_counters(trace, max_bins=10)
    assert c.n_bins <= 10 and c.bin_ns >= 1000
    frame = c.to_frame()
    assert list(frame.columns) == ["pid", "tid", "name", "unit", "ts_ns", "value"]
    assert len(frame) == c.n_bins * len(c.series)


def test_no_device_work() -> None:
    b = TraceBuilder()
    b.add(name="aten::mm", ts_ns=T0, dur_ns=10, kind=EventKind.CPU_OP, cat="cpu_op", pid=5)
    c = device_counters(b.build())
    assert c.series == () and c.n_bins == 0 and len(c.to_frame()) == 0


def test_absurd_span_still_counts_and_too_fine_bins_refused() -> None:
    b = TraceBuilder()
    b.add(name="early", ts_ns=10, dur_ns=100, kind=EventKind.KERNEL, cat="kernel", pid=0, tid=0)
    b.add(name="late", ts_ns=T0, dur_ns=100, kind=EventKind.KERNEL, cat="kernel", pid=0, tid=1)
    b.add(
        name="later", ts_ns=T0 + 50, dur_ns=100, kind=EventKind.KERNEL, cat="kernel", pid=0, tid=2
    )  # three queues x a 1.7e18 ns span: past one int64 axis
    trace = b.build()
    c = device_counters(trace, max_bins=4)
    busy_ns = {s.tid: float(s.values.sum()) * c.bin_ns / 100 for s in c.busy}
    assert busy_ns == pytest.approx({None: 250.0, 0: 100.0, 1: 100.0, 2: 100.0})
    with pytest.raises(ValueError, match="bins"):
        device_counters(trace, bin_ns=1)
