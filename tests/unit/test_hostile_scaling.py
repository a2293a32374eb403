"""Hostile shapes that made ``analyze`` quadratic, checked against results worked out by hand:
a chain of thousands of nested same-name ops (the op summary merges repeats with pointer
doubling, in about log2(n) passes) and a correlation id shared by thousands of launches and
kernels (each kernel is paired with one launching call, never with every call of its id)."""

from __future__ import annotations

import tracemalloc

import numpy as np
from trace_factory import US

from neuron_profiler.analysis.context import AnalysisContext
from neuron_profiler.analysis.summary import _past_merged, op_kernel_summary
from neuron_profiler.trace import EventKind, Phase, Trace, TraceBuilder
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V

HOST_PID, HOST_TID = 1, 1


def _ops(start_ns: np.ndarray, dur_ns: np.ndarray, name: str) -> Trace:
    """Complete ``cpu_op`` rows on one thread, all called ``name`` (built column-wise: a
    row-by-row builder would dominate the test's time at 200,000 rows)."""
    n = len(start_ns)
    order = np.argsort(start_ns, kind="stable")
    cols = {
        S.TS_NS: start_ns[order].astype(np.int64),
        S.DUR_NS: dur_ns[order].astype(np.int64),
        S.PH: np.full(n, Phase.COMPLETE, np.uint8),
        S.KIND: np.full(n, EventKind.CPU_OP, np.uint8),
        S.NAME_ID: np.zeros(n, np.int32),
        S.CAT_ID: np.ones(n, np.int32),
        S.PID: np.full(n, HOST_PID, np.int64),
        S.TID: np.full(n, HOST_TID, np.int64),
    }
    return Trace(columns=cols, strings=[name, "cpu_op"], raw_args=[])


def test_chain_heads_take_logarithmic_passes() -> None:
    """Two chains (0 <- 1 <- ... <- 199,999 and a root 200,000 with one merged child): every
    row's nearest unmerged ancestor is its chain's root, found in ceil(log2(199,999)) + 1 = 19
    passes (a pass per link would take 199,999)."""
    n = 200_000
    parent = np.r_[np.arange(n) - 1, -1, n]
    merged = np.r_[False, np.ones(n - 1, bool), False, True]
    head, passes = _past_merged(parent, merged)
    assert head[0] == -1 and (head[1:n] == 0).all()
    assert head[n] == -1 and head[n + 1] == n
    assert passes == 19
    # nothing merged: every row's head is its own parent, found without a pass
    head, passes = _past_merged(parent, np.zeros(n + 2, bool))
    assert np.array_equal(head, parent) and passes == 0


def test_nested_chain_of_one_op_is_one_call() -> None:
    """200,000 ``aten::add`` each nested in the previous (ts i µs, dur 2N - 2i µs): each is its
    parent's only op child with its name, so all merge into the outermost: one call of 2N µs,
    all of it self time (merged children are not children)."""
    n = 200_000
    i = np.arange(n, dtype=np.int64)
    ops = op_kernel_summary(AnalysisContext(_ops(i * US, (2 * n - 2 * i) * US, "aten::add"))).ops
    assert [(o.name, o.calls, o.host_total_ns, o.host_self_ns) for o in ops] == [
        ("aten::add", 1, 2 * n * US, 2 * n * US)
    ]


def test_identical_ops_merge_into_one_call() -> None:
    """200,000 identical ``aten::add`` (ts 5 µs, dur 5 µs): equal ranges nest, one chain, one
    call of 5 µs."""
    n = 200_000
    ops = op_kernel_summary(
        AnalysisContext(_ops(np.full(n, 5 * US), np.full(n, 5 * US), "aten::add"))
    ).ops
    assert [(o.name, o.calls, o.host_total_ns, o.host_self_ns) for o in ops] == [
        ("aten::add", 1, 5 * US, 5 * US)
    ]


def _launch(b: TraceBuilder, start_us: int, corr: int, tid: int = HOST_TID) -> None:
    b.add(
        name="cudaLaunchKernel",
        ts_ns=start_us * US,
        dur_ns=2 * US,
        kind=EventKind.RUNTIME,
        cat=V.CAT_RUNTIME,
        pid=HOST_PID,
        tid=tid,
        args={V.ARG_CORRELATION: corr},
    )


def _kernel(b: TraceBuilder, start_us: int, corr: int, device: int = 0) -> None:
    b.add(
        name="k",
        ts_ns=start_us * US,
        dur_ns=2 * US,
        kind=EventKind.KERNEL,
        cat="kernel",
        pid=device,
        tid=7,
        args={V.ARG_DEVICE: device, V.ARG_STREAM: 7, V.ARG_CORRELATION: corr},
    )


def test_each_kernel_has_one_launching_call() -> None:
    """Id 1 is called at 0, 10 and 20 µs; its kernels at 5, 15, 25 and -1 µs were launched by
    the latest call at or before them (0, 10, 20) and, before every call, the earliest (0). Id 2
    (one call, after its kernel) has that call; id 3 has none."""
    b = TraceBuilder()
    for t in (20, 0, 10):
        _launch(b, t, 1)
    _launch(b, 50, 2)
    for t in (5, 15, 25, -1):
        _kernel(b, t, 1)
    _kernel(b, 40, 2)
    _kernel(b, 60, 3)
    trace = b.build()
    ctx = AnalysisContext(trace)
    c = trace.columns
    kernels = np.flatnonzero(c[S.KIND] == EventKind.KERNEL)
    calls = ctx.runtime_calls.launching_call(trace, kernels)
    # kernels by time: -1, 5, 15, 25 (id 1), 40 (id 2), 60 (id 3)
    linked = np.flatnonzero(calls >= 0)
    assert linked.tolist() == [0, 1, 2, 3, 4]
    assert (c[S.TS_NS][calls[linked]] // US).tolist() == [0, 0, 10, 20, 50]


def test_launch_threads_come_from_each_kernels_own_call() -> None:
    """Id 1 is reused: thread 1 calls it at 0 µs for device 0's kernel (5 µs), thread 2 at
    100 µs for device 1's (105 µs). Each device was launched by one thread, not by every
    thread that ever used the id."""
    b = TraceBuilder()
    _launch(b, 0, 1, tid=1)
    _launch(b, 100, 1, tid=2)
    _kernel(b, 5, 1, device=0)
    _kernel(b, 105, 1, device=1)
    ctx = AnalysisContext(b.build())
    assert ctx.launch_threads(0).tolist() == [[HOST_PID, 1]]
    assert ctx.launch_threads(1).tolist() == [[HOST_PID, 2]]


def _shared_id(n: int, steps: int) -> Trace:
    """``n`` launches at 0, 10, 20 ... µs and their kernels 3 µs later, all with correlation id
    1, under ``steps`` ProfilerSteps of 10n µs each (the launches in the first)."""
    b = TraceBuilder()
    for step in range(steps):
        b.add(
            name=f"ProfilerStep#{step + 1}",
            ts_ns=step * 10 * n * US,
            dur_ns=10 * n * US,
            kind=EventKind.USER_ANNOTATION,
            cat="user_annotation",
            pid=HOST_PID,
            tid=HOST_TID,
        )
    for i in range(n):
        _launch(b, i * 10, 1)
        _kernel(b, i * 10 + 3, 1)
    return b.build()


def test_shared_correlation_id_pairs_in_linear_memory() -> None:
    """3,000 launches and 3,000 kernels all with correlation id 1 (the hostile trace that ran
    out of memory): one launching thread, found with memory proportional to the rows (pairing
    every kernel with every call would hold 9,000,000 pairs, 72 MB per int64 column)."""
    n = 3_000
    ctx = AnalysisContext(_shared_id(n, steps=1))
    ctx.work, ctx.runtime_calls  # noqa: B018 - selected before measuring
    tracemalloc.start()
    try:
        dev, pid, tid = ctx.launch_thread_table
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (dev.tolist(), pid.tolist(), tid.tolist()) == ([0], [HOST_PID], [HOST_TID])
    assert peak < 64 * 8 * 2 * n  # a few int64 columns over the 2n rows


def test_hta_breakdowns_are_left_out_when_its_merge_would_explode() -> None:
    """HTA's merge repeats each device row once per host row of its correlation id: 2,100
    launches and kernels sharing id 1 before the last of two steps would be 4.4M rows (HTA
    itself goes quadratic there). The breakdowns are left out with a note; the rest of the
    report stands."""
    from neuron_profiler.analysis import analyze

    n = 2_100
    report = analyze(_shared_id(n, steps=2))
    assert report.hta_temporal is None and report.hta_idle is None
    (note,) = [n for n in report.notes if n.startswith("HTA breakdowns left out")]
    assert f"into {n * n:,}" in note
    assert report.tb_breakdown is not None and len(report.steps) == 2
