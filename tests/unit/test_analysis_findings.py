"""Findings on small synthetic traces: a CPU fallback with its copies and a modelled native
time, exposed copies, collective waits, the ranking, and that no idle time is counted twice."""

from __future__ import annotations

import numpy as np
import pytest
from trace_factory import US, Build

from neuron_profiler.trace import EventKind
from neuron_profiler.trace import vocabulary as V

PEAK_TFLOPS, HBM_GBPS = 100.0, 1000.0


def fallback_trace() -> Build:
    """Step 0-1000 µs: a kernel, then a fallback (host 100-400) whose D2H copy runs 100-120
    and H2D copy 380-400; the device idles 120-380; a kernel 400-1000."""
    b = Build().step(1, 0, 1000)
    b.b.metadata["deviceProperties"] = [
        {V.PROP_ID: 0, V.PROP_PEAK_BF16_TFLOPS: PEAK_TFLOPS, V.PROP_HBM_GBPS: HBM_GBPS}
    ]
    b.kernel(0, 100, launch_us=0)
    b.host(
        V.FALLBACK_PREFIX + "aten::unique",
        100,
        400,
        kind=EventKind.FALLBACK,
        cat=V.CAT_RUNTIME,
        args={
            V.ARG_EXTERNAL_ID: 5,
            V.ARG_IS_FALLBACK: True,
            V.ARG_OP: "aten::unique",
            V.ARG_SHAPES: [[1000]],
            V.ARG_DTYPES: ["float32"],
            V.ARG_FALLBACK_REASON: "why",
            V.ARG_FLOPS: 1e9,
            V.ARG_BYTES: 1e6,
        },
    )
    for lo, hi, direction in ((100, 120, "d2h"), (380, 400, "h2d")):
        b.kernel(
            lo,
            hi,
            launch_us=lo,
            kind=EventKind.MEMCPY,
            stream=2,
            name=V.MEMCPY_NAMES[direction],
            args={V.ARG_EXTERNAL_ID: 5, V.ARG_DIRECTION: direction, V.ARG_BYTES: 4000},
        )
    b.kernel(400, 1000, launch_us=390)
    return b


def test_fallback_group_with_native_time() -> None:
    r = fallback_trace().report()
    (g,) = r.findings.fallbacks
    assert (g.op, g.shapes, g.dtypes, g.reason, g.calls) == (
        "aten::unique",
        "[[1000]]",
        "['float32']",
        "why",
        1,
    )
    assert (g.d2h_count, g.d2h_bytes, g.d2h_ns) == (1, 4000, 20 * US)
    assert (g.h2d_count, g.h2d_bytes, g.h2d_ns) == (1, 4000, 20 * US)
    assert g.host_ns == 300 * US and g.idle_ns == 260 * US
    native = max(1e9 / (PEAK_TFLOPS * 1e12), 1e6 / (HBM_GBPS * 1e9)) * 1e9  # roofline, ns
    assert g.native_ns == pytest.approx(native, abs=1)
    assert g.recoverable_ns == pytest.approx(260 * US + 40 * US - native, abs=1)
    kinds = [f.kind for f in r.findings.findings]
    assert kinds[0] == "cpu_fallback:aten::unique"
    assert "exposed_copies" not in kinds  # a fallback's copies belong to the fallback
    assert r.findings.findings[0].recoverable_pct == pytest.approx(
        100 * g.recoverable_ns / (1000 * US), abs=0.01
    )


def test_native_time_unknown_without_peaks() -> None:
    b = fallback_trace()
    b.b.metadata["deviceProperties"] = [{V.PROP_ID: 0, V.PROP_PEAKS_KNOWN: False}]
    (g,) = b.report().findings.fallbacks
    assert g.native_ns is None and g.recoverable_ns == 300 * US  # idle + copies: upper bound


def test_exposed_copies_and_collective_waits() -> None:
    b = Build().step(1, 0, 1000)
    b.kernel(0, 200, launch_us=0)
    b.kernel(150, 300, launch_us=0, kind=EventKind.MEMCPY, stream=2, name=V.MEMCPY_NAMES["h2d"])
    b.kernel(300, 420, launch_us=0, name=V.COLLECTIVE_WAIT_NAME, stream=3)
    b.kernel(400, 1000, launch_us=0)
    r = b.report()
    got = {f.kind: f.recoverable_ns for f in r.findings.findings}
    assert got["exposed_copies"] == 100 * US  # 200-300: DMA alone
    # 300-400: waiting for a peer, no work: idle (the wait's 400-420 is under compute)
    assert got["idle:collective_wait"] == 100 * US
    assert r.idle.devices[0].idle_ns == 100 * US
    assert r.idle.by_cause_ns["collective_wait"] == 100 * US
    (d,) = r.breakdown.devices
    assert d.busy_ns.tolist() == [900 * US] and d.collective_wait_ns.tolist() == [100 * US]
    assert d.collective_ns.tolist() == [0]  # a wait is no transfer


def test_sync_points_grouped_by_the_outermost_sync() -> None:
    """aten::item holds cudaStreamSynchronize: the idle after it goes to aten::item, once;
    the synchronize alone (another call) is its own group."""
    b = Build().step(1, 0, 1000)
    b.kernel(0, 100, launch_us=0)
    b.host("aten::item", 50, 130)
    b.host("cudaStreamSynchronize", 60, 110, kind=EventKind.RUNTIME, cat="cuda_runtime")
    b.kernel(300, 400, launch_us=290)  # gap 100-300 begins inside aten::item
    b.host("cudaDeviceSynchronize", 380, 410, kind=EventKind.RUNTIME, cat="cuda_runtime")
    b.kernel(600, 1000, launch_us=590)  # gap 400-600
    r = b.report()
    got = {g.name: (g.calls, g.idle_ns // US) for g in r.findings.syncs}
    assert got == {"aten::item": (1, 200), "cudaDeviceSynchronize": (1, 200)}
    assert sum(g.idle_ns for g in r.findings.syncs) == r.idle.by_cause_ns["host_sync"]
    kinds = {f.kind for f in r.findings.findings}
    assert {"host_sync:aten::item", "host_sync:cudaDeviceSynchronize"} <= kinds


def _side_thread_sync(linked: bool) -> Build:
    """Step 0-1000 µs: thread 100 launches a kernel at 10 (20-520) and waits in
    cudaDeviceSynchronize 200-525; the next kernel launches at 700 (710-1000): a host_sync gap
    520-710. Thread 200, which launches nothing, waits in cudaStreamSynchronize 150-600, around
    the gap's start too. ``linked``: the launches are linked to their work (else no device
    work has a known launching thread, and every thread counts)."""
    b = Build().step(1, 0, 1000)
    b.kernel(20, 520, launch_us=10 if linked else None)
    b.host("cudaDeviceSynchronize", 200, 525, kind=EventKind.RUNTIME, cat="cuda_runtime")
    b.host("aten::sum", 525, 700)
    b.kernel(710, 1000, launch_us=700 if linked else None)
    b.host("cudaStreamSynchronize", 150, 600, kind=EventKind.RUNTIME, cat="cuda_runtime", tid=200)
    return b


def test_syncs_on_threads_that_launch_nothing_are_counted_apart() -> None:
    """The sync table holds the syncs that can cost device idle, on the threads the idle rules
    judge the device's gaps on (``causes.LaunchThreads``): thread 200's wait is not one of
    them (it neither takes the gap, which began in both, nor is listed at 0 ms); the report
    says so in a note, with its name, calls and host time."""
    r = _side_thread_sync(linked=True).report()
    assert r.idle.by_cause_ns["host_sync"] == 190 * US
    assert [(g.name, g.calls, g.idle_ns // US) for g in r.findings.syncs] == [
        ("cudaDeviceSynchronize", 1, 190)
    ]
    from neuron_profiler.analysis.report import note_syncs_elsewhere
    from neuron_profiler.analysis.syncs import ElsewhereSyncs

    elsewhere = ElsewhereSyncs(1, 450 * US, (("cudaStreamSynchronize", 1, 450 * US),))
    assert note_syncs_elsewhere(elsewhere) in r.notes
    assert "cudaStreamSynchronize x1; 0.450 ms on the host" in note_syncs_elsewhere(elsewhere)


def test_without_linked_launches_every_threads_syncs_count() -> None:
    """No launch linked: the idle rules judge the gaps on every thread, and so does the sync
    table (both syncs listed; the gap goes to the one that began first around its start)."""
    r = _side_thread_sync(linked=False).report()
    got = {g.name: (g.calls, g.idle_ns // US) for g in r.findings.syncs}
    assert got == {"cudaStreamSynchronize": (1, 190), "cudaDeviceSynchronize": (1, 0)}
    assert not any("launch no device work" in n for n in r.notes)


@pytest.mark.parametrize("seed", range(6))
def test_no_idle_time_counted_twice(seed: int) -> None:
    """Random host spans of every cause over random work: the idle findings plus the fallback
    groups' idle never exceed the worst device's idle time."""
    rng = np.random.default_rng(seed)
    b = Build().step(1, 0, 3000).step(2, 3000, 6000)
    for _ in range(30):
        s = int(rng.integers(0, 6000))
        b.kernel(s, s + int(rng.integers(1, 150)), launch_us=max(0, s - int(rng.integers(0, 300))))
    names = [
        ("enumerate(DataLoader)#It.__next__", EventKind.USER_ANNOTATION),
        (V.SYNC_PREFIX + "item", EventKind.RUNTIME),
        (V.FALLBACK_PREFIX + "aten::nonzero", EventKind.FALLBACK),
    ]
    for _ in range(12):
        s = int(rng.integers(0, 6000))
        name, kind = names[int(rng.integers(3))]
        b.host(
            name,
            s,
            s + int(rng.integers(10, 400)),
            kind=kind,
            cat=V.CAT_RUNTIME,
            args={V.ARG_EXTERNAL_ID: int(rng.integers(1, 1000)), V.ARG_OP: "aten::nonzero"}
            if kind == EventKind.FALLBACK
            else None,
        )
    r = b.report(min_gap_us=int(rng.integers(1, 60)))
    idle = sum(
        f.recoverable_ns for f in r.findings.findings if f.kind.startswith(("idle:", "host_sync:"))
    )
    idle += sum(g.idle_ns for g in r.findings.fallbacks)
    assert idle <= max(d.idle_ns for d in r.idle.devices)


@pytest.mark.parametrize("seed", range(20))
def test_any_mix_of_rows_is_analysed(seed: int) -> None:
    """Rows of every kind with odd values (zero and huge durations, equal starts, missing or
    wrong-typed args, steps that overlap): analyze, the JSON document and the terminal report
    never fail."""
    import io
    import json

    import jsonschema
    from rich.console import Console

    from neuron_profiler.analysis import analyze
    from neuron_profiler.reports.json_report import schema_text, to_document
    from neuron_profiler.reports.terminal import render_terminal
    from neuron_profiler.trace import TraceBuilder

    rng = np.random.default_rng(seed)
    b = TraceBuilder("random")
    kinds = list(EventKind)
    names = [
        "ProfilerStep#1",
        "ProfilerStep#2",
        "aten::mm",
        V.FALLBACK_PREFIX + "aten::x",
        V.SYNC_PREFIX + "item",
        "enumerate(DataLoader)#A.__next__",
        "TensorE: mm",
        V.COLLECTIVE_WAIT_NAME,
        V.MEMCPY_NAMES["d2h"],
        "Activity Buffer Request",
    ]
    for _ in range(int(rng.integers(0, 60))):
        args = rng.choice(
            [
                None,
                {
                    V.ARG_STREAM: int(rng.integers(-2, 4)),
                    V.ARG_CORRELATION: int(rng.integers(-1, 5)),
                },
                {V.ARG_STREAM: "x", V.ARG_BYTES: "many", V.ARG_FLOPS: None},
                {V.ARG_EXTERNAL_ID: int(rng.integers(0, 4)), V.ARG_OP: 3},
            ]
        )
        b.add(
            name=str(rng.choice(names)),
            ts_ns=int(rng.integers(0, 10**6)),
            dur_ns=int(rng.choice([0, 1, 999, 10**5, 10**9])),
            kind=kinds[rng.integers(len(kinds))],
            cat=str(rng.choice(["kernel", "cpu_op", "user_annotation", "cuda_runtime", ""])),
            pid=int(rng.integers(0, 3)),
            tid=int(rng.integers(0, 3)),
            args=args,
        )
    b.metadata["deviceProperties"] = [{V.PROP_PEAK_BF16_TFLOPS: 1.0, V.PROP_HBM_GBPS: 1.0}]
    report = analyze(b.build())
    jsonschema.validate(json.loads(json.dumps(to_document([report]))), json.loads(schema_text()))
    render_terminal([report], console=Console(file=io.StringIO(), width=100))


def test_fallback_row_filed_by_category_is_grouped_by_its_name(tmp_path) -> None:  # noqa: ANN001
    """A row of category ``cpu_fallback`` named ``aten::bincount`` (no prefix, no ``op`` arg)
    is a fallback of aten::bincount: its group is that op, not the name less 14 characters
    (it used to be ''): ``vocabulary.fallback_op``, the one rule."""
    import json

    from neuron_profiler.analysis import analyze
    from neuron_profiler.trace import load_trace

    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 1000},
        {"ph": "X", "cat": "cpu_op", "name": "aten::bincount", "ts": 10, "dur": 500},
        {"ph": "X", "cat": "cpu_fallback", "name": "aten::bincount", "ts": 20, "dur": 400},
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 600, "dur": 100, "pid": 2, "tid": 7},
    ]
    for e in events[:3]:
        e.update(pid=1, tid=1, args={"External id": 5})
    events[3]["args"] = {"stream": 7, "device": 0, "correlation": 9}
    path = tmp_path / "fb.json"
    path.write_text(json.dumps({"traceEvents": events}))
    r = analyze(load_trace(path))
    assert [(g.op, g.calls) for g in r.fallback_pareto.groups] == [("aten::bincount", 1)]
    assert V.fallback_op(V.fallback_name("aten::nonzero")) == "aten::nonzero"


def test_is_nonzero_is_a_sync_of_its_own() -> None:
    """``if tensor:`` runs aten::is_nonzero, which reads the value to the host: the
    cudaStreamSynchronize inside it (200-525 µs, the device idle 200-710) is its wait, and the
    sync group is named after the op the script called (``vocabulary.SYNC_OP_NAMES``, the one
    set the analysis and the CPU-only projection read)."""
    b = Build().step(1, 0, 1000)
    b.kernel(0, 200, launch_us=0)
    b.host("aten::is_nonzero", 190, 530)
    b.host("cudaStreamSynchronize", 200, 525, kind=EventKind.RUNTIME, cat="cuda_runtime")
    b.kernel(710, 1000, launch_us=700)
    r = b.report()
    assert [(g.name, g.calls) for g in r.findings.syncs] == [("aten::is_nonzero", 1)]
