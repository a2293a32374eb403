"""Host sync points on real CUDA traces (aten::item with its D2H copy, stream, event and device
synchronize): per sync name, the calls, host time and D2H copies the analyzer reports equal a
plain-Python count over the raw JSON, and the groups' idle adds up to the host_sync idle.

The count applies the sync rule on its own (docs/analysis.md#host_sync): a runtime wait is a
sync; ``.item()`` / ``_local_scalar_dense`` / ``is_nonzero`` / ``nonzero`` are syncs only when a wait or a D2H
copy's launch lies inside them on their thread; only calls beginning inside a ProfilerStep
(or, without any, between the first and the last op) count."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import pytest

from neuron_profiler.analysis import analyze
from neuron_profiler.trace import load_trace
from neuron_profiler.trace import vocabulary as V

TRACES = [
    "hta/tests/data/critical_path/cuda_event_sync/event_sync_trace.json.gz",
    "hta/tests/data/trace_filter/sampled_rank-0.json.gz",
    "hta/tests/data/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
    "kineto/tb_plugin/test/gpu_metrics_input.json",
]
RESNET = "kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
HOST_CATS = {"cpu_op", "Operator", "cuda_runtime", "cuda_driver", "Runtime", "user_annotation"}


def _events(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        doc = json.load(f, parse_float=Decimal)
    out = []
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and "dur" in e:
            start = int(Decimal(e["ts"]) * 1000)
            out.append({**e, "start": start, "end": start + int(Decimal(e["dur"]) * 1000)})
    return out


def _expected(path: Path) -> dict[str, tuple[int, int, int, int, int]]:
    """name -> (calls, host ns, D2H count, D2H bytes, D2H ns), counted from the raw events:
    a call inside another sync on its thread (the first in the file when they have one span)
    counts for that one; a D2H copy is the call's when its launching runtime call lies on the
    call's thread between the start of the call (of the cpu_op around it, for a runtime sync)
    and its end, after the previous call on the thread."""
    ev = _events(path)

    def thread(e: dict) -> tuple:
        return e["pid"], e["tid"]

    def is_wait(e: dict) -> bool:
        return e["name"] in V.HOST_WAIT_NAMES or e["name"].startswith(V.SYNC_PREFIX)

    runtime = {
        e["args"]["correlation"]: e
        for e in ev
        if e.get("cat") in HOST_CATS and "correlation" in e.get("args", {})
    }
    d2h_launches = [
        runtime[c["args"]["correlation"]]
        for c in ev
        if "DtoH" in c["name"]
        and c.get("cat") == "gpu_memcpy"
        and c.get("args", {}).get("correlation") in runtime
    ]
    candidates = [
        e for e in ev if e.get("cat") in HOST_CATS and (is_wait(e) or e["name"] in V.SYNC_OP_NAMES)
    ]
    points = [(thread(w), w["start"]) for w in candidates if is_wait(w)]
    points += [(thread(w), w["start"]) for w in d2h_launches]

    def waited(e: dict) -> bool:
        return is_wait(e) or any(
            t == thread(e) and e["start"] <= at <= e["end"] for t, at in points
        )

    steps = [e for e in ev if e["name"].startswith("ProfilerStep#")]
    if not steps:  # the whole trace as one step: from the first to the last op
        ops_ = [e for e in ev if e.get("cat") in ("cpu_op", "Operator", "user_annotation")]
        steps = [{"start": min(o["start"] for o in ops_), "end": max(o["end"] for o in ops_)}]

    def in_steps(e: dict) -> bool:
        return any(s["start"] <= e["start"] <= s["end"] for s in steps)

    chosen = {id(e) for e in candidates if waited(e) and in_steps(e)}
    syncs = [(i, e) for i, e in enumerate(ev) if id(e) in chosen]

    def outer(i: int, e: dict) -> bool:
        return not any(
            thread(f) == thread(e)
            and f["start"] <= e["start"]
            and f["end"] >= e["end"]
            and ((f["start"], f["end"]) != (e["start"], e["end"]) or j < i)
            for j, f in syncs
            if j != i
        )

    calls = sorted((e for i, e in syncs if outer(i, e)), key=lambda e: e["start"])
    ops = [e for e in ev if e.get("cat") in ("cpu_op", "Operator")]
    windows, last_end = [], {}
    for e in calls:
        issuer = e
        if e.get("cat") not in ("cpu_op", "Operator"):
            around = [
                o
                for o in ops
                if thread(o) == thread(e) and o["start"] <= e["start"] and o["end"] >= e["end"]
            ]
            issuer = max(around, key=lambda o: (o["start"], -o["end"]), default=e)
        lo = max(issuer["start"], last_end.get(thread(e), -1))
        windows.append((thread(e), lo, e["end"]))
        last_end[thread(e)] = e["end"] + 1
    got = {e["name"]: [0, 0, 0, 0, 0] for e in calls}
    for e in calls:
        got[e["name"]][0] += 1
        got[e["name"]][1] += e["end"] - e["start"]
    for copy in ev:
        launch = runtime.get(copy.get("args", {}).get("correlation"))
        if "DtoH" not in copy["name"] or copy.get("cat") != "gpu_memcpy" or launch is None:
            continue
        for e, (t, lo, hi) in zip(calls, windows, strict=True):
            if t == thread(launch) and lo <= launch["start"] <= hi:
                g = got[e["name"]]
                g[2] += 1
                g[3] += int(copy["args"].get("bytes", 0))
                g[4] += copy["end"] - copy["start"]
                break
    return {k: tuple(v) for k, v in got.items()}


@pytest.mark.parametrize("name", TRACES)
def test_sync_groups_match_the_raw_trace(shared_traces: Path, name: str) -> None:
    path = shared_traces / name
    report = analyze(load_trace(path))
    got = {
        g.name: (g.calls, g.host_ns, g.d2h_count, g.d2h_bytes, g.d2h_ns)
        for g in report.findings.syncs
    }
    assert got == _expected(path)
    worst = max(d.by_cause_ns["host_sync"] for d in report.idle.devices)
    assert sum(g.idle_ns for g in report.findings.syncs) == worst


def test_item_with_its_copy_is_found(shared_traces: Path) -> None:
    """The traces hold what the test is about: .item() with its D2H copy and synchronize
    (event_sync_trace's inside ``if tensor:``, aten::is_nonzero: the outermost sync)."""
    names = {n: _expected(shared_traces / n) for n in TRACES}
    assert names[TRACES[0]]["aten::is_nonzero"][2] == 1
    calls, _, d2h, *_ = names[TRACES[1]]["aten::item"]
    assert calls >= 3 and d2h == calls
    assert names[TRACES[2]]["cudaStreamSynchronize"][0] == 16


def test_item_of_a_host_tensor_is_no_sync(shared_traces: Path) -> None:
    """gpu_metrics_input's aten::item reads a host tensor (no D2H copy, no wait inside it):
    not a sync, where the old name-only rule counted it; sampled_rank-0's hold their copies."""
    path = shared_traces / TRACES[3]
    assert sum(e["name"] == "aten::item" for e in _events(path)) == 1
    report = analyze(load_trace(path))
    assert "aten::item" not in {g.name for g in report.findings.syncs}
    report = analyze(load_trace(shared_traces / TRACES[1]))
    assert {g.name: g.calls for g in report.findings.syncs}["aten::item"] == 3


def test_call_site_from_call_stacks_of_a_2021_trace(shared_traces: Path) -> None:
    """The 2021 resnet50 sample carries "Call stack" args: the stream-sync finding names a user
    frame (the first frame outside torch) of an op around one of its syncs."""
    path = shared_traces / RESNET
    ev = _events(path)
    ops = [e for e in ev if e.get("cat") == "Operator" and e.get("args", {}).get("Call stack")]
    frames = set()
    for sync in (e for e in ev if e["name"] == "cudaStreamSynchronize"):
        around = [
            o
            for o in ops
            if (o["pid"], o["tid"]) == (sync["pid"], sync["tid"])
            and o["start"] <= sync["start"]
            and o["end"] >= sync["end"]
        ]
        for o in around:
            user = [f for f in o["args"]["Call stack"].split(";") if "torch/" not in f]
            file, _, rest = user[0].partition("(")
            line, _, func = rest.partition("): ")
            frames.add(f"{file}:{line} {func}")
    report = analyze(load_trace(path))
    (finding,) = [
        f for f in report.findings.findings if f.kind == "host_sync:cudaStreamSynchronize"
    ]
    assert frames and finding.call_site in frames
