"""Device rows find their launching runtime call without a ``correlation`` arg: by an ac2g flow,
then by the op's External id (docs/analysis.md, "How launches are linked"). Hand-written
Kineto-shaped traces (µs), each figure worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from neuron_profiler.analysis import Options, analyze
from neuron_profiler.analysis._correlation import runtime_calls
from neuron_profiler.analysis.context import AnalysisContext
from neuron_profiler.analysis.device_costs import _launching_ops
from neuron_profiler.analysis.diff import diff
from neuron_profiler.analysis.graph_launches import launch_sites as graph_launch_sites
from neuron_profiler.trace import load_trace

US = 1000
HOST = {"pid": 100, "tid": 100}
GPU = {"pid": 0, "tid": 7}


def _x(cat: str, name: str, ts: int, dur: int, where: dict[str, int], **args: Any) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, **where, "args": args}


def _flow(ph: str, flow_id: int, ts: int, where: dict[str, int]) -> dict:
    event = {"ph": ph, "cat": "ac2g", "name": "ac2g", "id": flow_id, "ts": ts, **where}
    if ph == "f":
        event["bp"] = "e"
    return event


def _two_launches(*, corr: bool, flows: bool, ext: bool, kernel_args: bool = True) -> list[dict]:
    """One 1000 µs step: aten::mm (0-100) launches at 10-20 a kernel running 30-200;
    aten::relu (600-700) launches at 610-620 a kernel running 650-1000. The device waits
    0-30 and 200-650 for launches that began after the gap did: 30 + 450 = 480 µs of
    host_bound_launch (the 30 µs gap is shorter than the 50 µs minimum gap, and is
    host_bound_launch by the short-gap rule: its launch began after it began)."""
    events = [_x("user_annotation", "ProfilerStep#1", 0, 1000, HOST)]
    for k, (op, start, launch, k_start, k_end) in enumerate(
        [("aten::mm", 0, 10, 30, 200), ("aten::relu", 600, 610, 650, 1000)], start=1
    ):
        ids: dict[str, int] = {}
        if ext:
            ids["External id"] = k
        if corr:
            ids["correlation"] = k
        events.append(_x("cpu_op", op, start, 100, HOST, **{"External id": k}))
        events.append(_x("cuda_runtime", "cudaLaunchKernel", launch, 10, HOST, **ids))
        dev_args = {"device": 0, "stream": 7, **ids} if kernel_args else {}
        events.append(_x("kernel", f"{op}_kernel", k_start, k_end - k_start, GPU, **dev_args))
        if flows:
            events += [_flow("s", 50 + k, launch, HOST), _flow("f", 50 + k, k_start, GPU)]
    return events


def _load(tmp_path: Path, events: list[dict]):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return load_trace(path)


FORMS = {
    "correlation": {"corr": True, "flows": True, "ext": True},
    "flows and External id": {"corr": False, "flows": True, "ext": True},
    "flows only, kernels without args": {
        "corr": True,
        "flows": True,
        "ext": False,
        "kernel_args": False,
    },
    "External id only": {"corr": False, "flows": False, "ext": True},
}


@pytest.mark.parametrize("form", list(FORMS))
def test_launches_link_without_correlation(tmp_path: Path, form: str) -> None:
    """Every form links each kernel to its cudaLaunchKernel: launch starts 10 and 610 µs,
    ends 20 and 620, launched from host thread (100, 100), the late launches' idle is
    host_bound_launch (480 µs; without the links it was 450 µs "other" and 30 µs
    short_gaps), and the kernels' op is the aten op around the call (the projection's op
    names)."""
    trace = _load(tmp_path, _two_launches(**FORMS[form]))
    ctx = AnalysisContext(trace, Options(min_gap_ns=50 * US))
    w = ctx.work
    assert (w.launch // US).tolist() == [10, 610]
    assert (w.launch_end // US).tolist() == [20, 620]
    sites = ctx.launch_sites
    assert sites.pid.tolist() == [100, 100] and sites.tid.tolist() == [100, 100]
    assert (sites.start_ns // US).tolist() == [10, 610]
    assert ctx.launch_threads(0).tolist() == [[100, 100]]
    inner, _ = _launching_ops(ctx, np.arange(len(w)))
    assert [trace.name(int(r)) for r in inner] == ["aten::mm", "aten::relu"]
    graph_sites = graph_launch_sites(ctx, np.arange(len(w)), np.zeros(0, np.int64))
    assert [trace.name(int(r)) for r in graph_sites.op] == ["aten::mm", "aten::relu"]
    r = analyze(trace, Options(min_gap_ns=50 * US, top=50))
    assert r.idle.by_cause_ns["host_bound_launch"] == 480 * US
    assert r.idle.by_cause_ns["other"] == r.idle.by_cause_ns["short_gaps"] == 0


def test_correlation_path_adds_no_fallback(tmp_path: Path) -> None:
    """A trace whose rows all carry correlation ids links nothing else (the fast path)."""
    calls = runtime_calls(_load(tmp_path, _two_launches(corr=True, flows=True, ext=True)))
    assert calls.with_fallback is calls and calls.ids.tolist() == [1, 2]


def test_correlation_wins_over_flows_and_external_ids(tmp_path: Path) -> None:
    """Where the correlation id names a call, flows and External ids that point elsewhere
    are not read: the first kernel's flow and External id name the second call."""
    events = _two_launches(corr=True, flows=False, ext=False)
    events[3]["args"]["External id"] = 2  # the first kernel (row 3), the second call's op
    events += [_flow("s", 9, 610, HOST), _flow("f", 9, 30, GPU)]
    ctx = AnalysisContext(_load(tmp_path, events))
    assert (ctx.work.launch // US).tolist() == [10, 610]


def test_flow_before_external_id(tmp_path: Path) -> None:
    """Without correlation ids, a flow decides over an External id that disagrees with it:
    the first kernel's flow names the call at 10, its External id (2) the call at 610; the
    second kernel has only its External id (2), and the call at 610 launches it."""
    events = _two_launches(corr=False, flows=False, ext=True)
    events[3]["args"]["External id"] = 2
    events += [_flow("s", 9, 10, HOST), _flow("f", 9, 30, GPU)]
    ctx = AnalysisContext(_load(tmp_path, events))
    assert (ctx.work.launch // US).tolist() == [10, 610]


def test_one_op_several_launches_pair_in_time_order(tmp_path: Path) -> None:
    """One op (External id 1), no correlation ids, no flows: an occupancy query (10-12), two
    launches (12-20, 30-40), a stream synchronize (40-300); kernels 25-100 and 110-200. The
    synchronize never launches; of the three other calls the last two pair with the two
    kernels in time order (the query before them launches nothing): launches 12 and 30.
    A third op's one call (cudaGraphLaunch at 400) launches both its kernels."""
    ext = {"External id": 1}
    graph = {"External id": 3}
    events = [
        _x("user_annotation", "ProfilerStep#1", 0, 1000, HOST),
        _x("cpu_op", "aten::mm", 0, 300, HOST, **ext),
        _x("cuda_runtime", "cudaOccupancyMaxActiveBlocksPerMultiprocessor", 10, 2, HOST, **ext),
        _x("cuda_runtime", "cudaLaunchKernel", 12, 8, HOST, **ext),
        _x("cuda_runtime", "cudaLaunchKernel", 30, 10, HOST, **ext),
        _x("cuda_runtime", "cudaStreamSynchronize", 40, 260, HOST, **ext),
        _x("kernel", "k1", 25, 75, GPU, **ext),
        _x("kernel", "k2", 110, 90, GPU, **ext),
        _x("cpu_op", "graph", 390, 100, HOST, **graph),
        _x("cuda_runtime", "cudaGraphLaunch", 400, 20, HOST, **graph),
        _x("kernel", "g1", 430, 100, GPU, **graph),
        _x("kernel", "g2", 530, 100, GPU, **graph),
    ]
    ctx = AnalysisContext(_load(tmp_path, events))
    assert (ctx.work.launch // US).tolist() == [12, 30, 400, 400]
    assert (ctx.work.launch_end // US).tolist() == [20, 40, 420, 420]


def test_unlinked_rows_stay_unlinked(tmp_path: Path) -> None:
    """A kernel with neither correlation id, flow nor External id has no launch, and a flow
    whose start lies on no runtime call links nothing."""
    events = _two_launches(corr=False, flows=False, ext=False)
    events += [_flow("s", 9, 300, HOST), _flow("f", 9, 30, GPU)]  # (no call at 300)
    ctx = AnalysisContext(_load(tmp_path, events))
    assert (ctx.work.launch == np.iinfo(np.int64).min).all()
    assert len(ctx.runtime_calls.with_fallback.linked) == 0


def test_diff_sees_no_change_when_only_the_linkage_form_differs(tmp_path: Path) -> None:
    """The same run written with and without correlation ids: the diff's device time goes to
    the same ops on both sides (aten::mm 170 µs, aten::relu 350 µs), every row Δ 0 (without
    the links the kernels were rows of their own on one side)."""
    a = _load(tmp_path, _two_launches(corr=True, flows=True, ext=True))
    (tmp_path / "b").mkdir()
    b = _load(tmp_path / "b", _two_launches(corr=False, flows=True, ext=True))
    d = diff(a, b)
    assert d.delta_ms == 0
    assert all(abs(r.delta_ms) < 1e-12 for r in d.rows), [(r.key, r.delta_ms) for r in d.rows]


def test_a_reused_correlation_id_names_its_latest_earlier_call(tmp_path: Path) -> None:
    """Correlation 7 is used twice (a merged trace whose counters restarted): aten::mm on
    thread 1 calls cudaLaunchKernel at 100 µs, aten::relu on thread 2 at 5000 µs; the kernel
    carrying 7 runs at 6000 µs. It was launched by the latest call before it (5000 µs, thread
    2, inside aten::relu), and every analysis says so: the launch thread table, the launch
    sites, the work's launch span, the projection's launching op and the graph's launch site
    (they used to disagree: the table said thread 2, the rest the earliest call, thread 1)."""
    t1, t2 = {"pid": 100, "tid": 1}, {"pid": 100, "tid": 2}
    events = [
        _x("user_annotation", "ProfilerStep#1", 0, 10_000, t1),
        _x("cpu_op", "aten::mm", 90, 100, t1),
        _x("cuda_runtime", "cudaLaunchKernel", 100, 50, t1, correlation=7),
        _x("cpu_op", "aten::relu", 4990, 100, t2),
        _x("cuda_runtime", "cudaLaunchKernel", 5000, 50, t2, correlation=7),
        _x("kernel", "k", 6000, 500, GPU, device=0, stream=7, correlation=7),
    ]
    trace = _load(tmp_path, events)
    ctx = AnalysisContext(trace)
    w = ctx.work
    assert ctx.launch_threads(0).tolist() == [[100, 2]]
    assert ctx.launch_sites.tid.tolist() == [2]
    assert (ctx.launch_sites.start_ns // US).tolist() == [5000]
    assert (w.launch // US).tolist() == [5000] and (w.launch_end // US).tolist() == [5050]
    inner, _ = _launching_ops(ctx, np.arange(len(w)))
    assert [trace.name(int(r)) for r in inner] == ["aten::relu"]
    graph_sites = graph_launch_sites(ctx, np.arange(len(w)), np.zeros(0, np.int64))
    assert [trace.name(int(r)) for r in graph_sites.op] == ["aten::relu"]
