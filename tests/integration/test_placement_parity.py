"""The live collector and the offline merge write the same device rows (one placement).

Two ways in:
- a synthetic system-trace payload in the real runtime's shape (no correlation ids: linked by
  containment in the host ops), through ``build_session_result`` + the C++ bridge's conversion
  on one side and ``merge_device_events`` on a host trace holding the same ops on the other;
- a real profile on the emulated device (eager ops on two cores and a compiled graph): the live
  trace's device rows against the merge of the same run's payload onto the live trace with its
  device rows taken out.
Core pids never collide with host pids here (that case is the merge's own test).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")

from neuron_profiler.collectors import session as CS  # noqa: E402
from neuron_profiler.runtime_trace.merge import merge_device_events  # noqa: E402
from neuron_profiler.runtime_trace.placement import CATEGORIES  # noqa: E402
from neuron_profiler.trace import load_trace  # noqa: E402
from neuron_profiler.trace import schema as S  # noqa: E402
from neuron_profiler.trace import vocabulary as V  # noqa: E402
from neuron_profiler.trace.model import Trace, TraceBuilder  # noqa: E402

HOST_PID, TID = 4242, 42
T0 = 1_700_000_000_000_000_000
_CAT_OF_KINETO = {
    CS.KINETO_KERNEL: V.CAT_KERNEL,
    CS.KINETO_MEMCPY: V.CAT_MEMCPY,
    CS.KINETO_RUNTIME: V.CAT_RUNTIME,
    CS.KINETO_DRIVER: V.CAT_DRIVER,
    CS.KINETO_OVERHEAD: V.CAT_OVERHEAD,
}


_TRACKING = itertools.count(1)  # one tracking id per span, across the module's captures


def _span(
    events: list,
    etype: str,
    core: int,
    start: int,
    stop: int,
    data: dict,
    tid: int = TID,
) -> None:
    base = {"event_type": etype, "tracking_id": next(_TRACKING), "nc_idx": core, "thread_id": tid}
    events += [
        {**base, "phase": "start", "timestamp_ns": start, "data": data},
        {**base, "phase": "stop", "timestamp_ns": stop, "data": {}},
    ]


def _payload() -> tuple[bytes, list[tuple[int, int, int, int]]]:
    """A capture with a repeated exec_id on a backed-up queue, copies, a collective, a fallback,
    a host sync, a tensor event and an unknown type; and the host ops (corr, tid, start, end)."""
    ops = [
        (11, TID, T0, T0 + 1_000),
        (12, TID, T0 + 1_000, T0 + 2_000),
        (13, TID, T0 + 3_000, T0 + 4_000),
        (14, TID, T0 + 5_000, T0 + 6_000),
        (15, TID, T0 + 7_000, T0 + 8_000),
    ]
    ev: list[dict] = []
    _span(ev, "nrt_execute", 0, T0 + 100, T0 + 200, {"exec_id": 7})  # in op 11
    _span(ev, "nrt_execute", 0, T0 + 1_100, T0 + 1_200, {"exec_id": 7})  # in op 12, same exec_id
    _span(ev, "nc_exec_running", 0, T0 + 2_500, T0 + 2_900, {"exec_id": 7})  # queue backed up
    _span(ev, "nc_exec_running", 0, T0 + 2_900, T0 + 3_300, {"exec_id": 7})
    _span(ev, "nrt_tensor_write", 1, T0 + 3_100, T0 + 3_200, {"exec_id": 8})  # in op 13
    _span(
        ev,
        "dmem_buf_copyin",
        1,
        T0 + 3_300,
        T0 + 3_600,
        {"exec_id": 8, "neuron_profiler": {"bytes": 4096, "direction": "h2d"}},
    )
    _span(ev, "nrt_execute", 0, T0 + 5_100, T0 + 5_200, {"exec_id": 9})  # in op 14
    _span(
        ev,
        "cc_running",
        0,
        T0 + 5_400,
        T0 + 5_900,
        {
            "exec_id": 9,
            "algorithm": "ring",
            "neuron_profiler": {"collective": "allreduce", "bytes": 8192, "ranks": [0, 1]},
        },
    )
    _span(
        ev,
        "neuron_profiler.cpu_fallback",
        0,
        T0 + 7_100,
        T0 + 7_500,
        {
            "neuron_profiler": {
                "op": "aten::foo",
                "reason": "float64",
                "shapes": [[2, 2]],
                "dtypes": ["float64"],
                "flops": 64,
                "bytes": 96,
                "dtype": "float64",
                "engine": "VectorE",
            }
        },
    )
    _span(
        ev,
        "neuron_profiler.host_sync",
        0,
        T0 + 7_600,
        T0 + 7_900,
        {"neuron_profiler": {"sync": "item", "op": "aten::item"}},
    )
    ev.append(
        {
            "event_type": "nrt_tensor_allocate",
            "phase": "instant",
            "tracking_id": 99,
            "nc_idx": 1,
            "thread_id": TID,
            "timestamp_ns": T0 + 3_050,
            "data": {"tensor_id": 5, "size": 64},
        }
    )
    ev.append(
        {
            "event_type": "hw_notify",
            "phase": "instant",
            "tracking_id": 100,
            "nc_idx": 0,
            "thread_id": 0,
            "timestamp_ns": T0 + 2_600,
            "data": {"hint": 3},
        }
    )
    return json.dumps({"events": ev, "data_version": 2}).encode(), ops


def _host_trace(ops: list[tuple[int, int, int, int]]) -> Trace:
    b = TraceBuilder("host.json")
    for corr, tid, start, end in ops:
        b.add(
            name=f"aten::op{corr}",
            ts_ns=start,
            dur_ns=end - start,
            kind=S.EventKind.CPU_OP,
            cat="cpu_op",
            pid=HOST_PID,
            tid=tid,
            args={"External id": corr},
        )
    return b.build()


def _normal(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True) for r in rows)


def _collector_rows(result: CS.SessionResult) -> tuple[list[str], list[str]]:
    from neuron_profiler.collectors._build import load_testing_bridge

    _, _, converted = load_testing_bridge().convert_records(result.records.to_dict(), render=True)
    rows, flows = [], []
    for ktype, name, pid, tid, ts, dur, corr, flow, flow_start, meta in converted:
        args = json.loads("{" + meta + "}")
        if corr:
            args[V.ARG_EXTERNAL_ID] = corr  # what Kineto writes for a linked activity
        rows.append(
            {
                "ts": ts,
                "dur": dur,
                "name": name,
                "cat": _CAT_OF_KINETO[ktype],
                "pid": pid,
                "tid": tid,
                "args": args,
            }
        )
        if flow:
            flows.append({"id": flow, "start": bool(flow_start), "pid": pid, "tid": tid, "ts": ts})
    return _normal(rows), _normal(flows)


def _trace_rows(trace: Trace) -> tuple[list[str], list[str]]:
    """Device rows (our categories) and ac2g flow endpoints of a loaded or merged trace."""
    c = trace.columns
    cats = np.array([trace.strings[i] for i in c[S.CAT_ID]], dtype=object)
    rows, flows = [], []
    for i in np.flatnonzero(np.isin(cats, CATEGORIES)).tolist():
        rows.append(
            {
                "ts": int(c[S.TS_NS][i]),
                "dur": int(c[S.DUR_NS][i]),
                "name": trace.name(i),
                "cat": cats[i],
                "pid": int(c[S.PID][i]),
                "tid": int(c[S.TID][i]),
                "args": trace.args(i),
            }
        )
    for i in np.flatnonzero(cats == V.CAT_FLOW).tolist():
        flows.append(
            {
                "id": int(c[S.FLOW_ID][i]),
                "start": int(c[S.PH][i]) == S.Phase.FLOW_START,
                "pid": int(c[S.PID][i]),
                "tid": int(c[S.TID][i]),
                "ts": int(c[S.TS_NS][i]),
            }
        )
    return _normal(rows), _normal(flows)


def test_synthetic_capture_places_identically() -> None:
    payload, ops = _payload()
    a = np.array(ops, dtype=np.int64)
    live = CS.build_session_result(
        payload,
        window=(T0, T0 + 10_000),
        host_pid=HOST_PID,
        props=[],
        intervals=CS.Intervals(tid=a[:, 1], correlation=a[:, 0], push_ns=a[:, 2], pop_ns=a[:, 3]),
    )
    merged = merge_device_events(_host_trace(ops), [payload])
    live_rows, live_flows = _collector_rows(live)
    merged_rows, merged_flows = _trace_rows(merged.trace)
    assert len(live_rows) == 12 and live_rows == merged_rows
    assert len(live_flows) == 8 and live_flows == merged_flows
    # the fallback's device cost rides in its args on both paths, with no "achieved" rate
    (fallback,) = [
        json.loads(r)["args"]
        for r in live_rows
        if json.loads(r)["name"] == V.FALLBACK_PREFIX + "aten::foo"
    ]
    assert {k: fallback.get(k) for k in (V.ARG_FLOPS, V.ARG_BYTES, V.ARG_DTYPE, V.ARG_ENGINE)} == {
        V.ARG_FLOPS: 64,
        V.ARG_BYTES: 96,
        V.ARG_DTYPE: "float64",
        V.ARG_ENGINE: "VectorE",
    }
    assert V.ARG_TFLOPS not in fallback and V.ARG_GBPS not in fallback
    # the repeated exec_id: each kernel has its own call, so its own op and its own arrow
    kernels = [json.loads(r) for r in live_rows if json.loads(r)["cat"] == V.CAT_KERNEL]
    by_ts = {k["ts"]: k["args"] for k in kernels}
    assert by_ts[T0 + 2_500][V.ARG_EXTERNAL_ID] == 11 and by_ts[T0 + 2_900][V.ARG_EXTERNAL_ID] == 12
    assert by_ts[T0 + 2_500][V.ARG_CORRELATION] != by_ts[T0 + 2_900][V.ARG_CORRELATION]


def test_window_between_two_calls_keeps_the_second_kernel() -> None:
    """The window starts after the first nrt_execute: its kernel goes, the second call's stays
    although both kernels run after the window opened."""
    payload, ops = _payload()
    a = np.array(ops, dtype=np.int64)
    live = CS.build_session_result(
        payload,
        window=(T0 + 500, T0 + 10_000),
        host_pid=HOST_PID,
        props=[],
        intervals=CS.Intervals(tid=a[:, 1], correlation=a[:, 0], push_ns=a[:, 2], pop_ns=a[:, 3]),
    )
    rows = [json.loads(r) for r in _collector_rows(live)[0]]
    kernels = [
        r
        for r in rows
        if r["cat"] == V.CAT_KERNEL and r["pid"] == 0 and not r["args"].get(V.ARG_IS_COLLECTIVE)
    ]
    assert [(k["ts"], k["args"][V.ARG_EXTERNAL_ID]) for k in kernels] == [(T0 + 2_900, 12)]
    assert live.excluded == 2


LIVE = r"""
import json, sys
from pathlib import Path
import torch
from neuron_profiler import emulator
emulator.enable(cores=2, chip="trn2")
from neuron_profiler import collectors
from neuron_profiler.collectors.sources import EmulatorSource
from torch.profiler import ProfilerActivity, profile

out = Path(sys.argv[1])
class Tee:
    name = "emulator"
    def __init__(self):
        self.inner = EmulatorSource()
    def start(self, m, c):
        self.inner.start(m, c)
    def stop(self):
        payload = self.inner.stop()
        (out / "payload.json").write_bytes(payload)
        return payload
    def device_properties(self):
        return self.inner.device_properties()
collectors.set_source(Tee())
NEURON = collectors.NEURON
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
model = model.to("neuron:0")
x = torch.randn(16, 32)
w = torch.randn(8, 8, device="neuron:1")
graph = torch.compile(lambda t: (t @ t).sin().relu(), backend="neuron")
graph(w)  # compiled outside the profile
with profile(activities=[ProfilerActivity.CPU, NEURON]) as p:
    for _ in range(2):
        y = model(x.to("neuron:0")).sum()
        y.backward()
        (w @ w).relu()
        graph(w)
        torch.randn(4, 4, dtype=torch.float64).to("neuron:0").exp().cpu()
        y.item()
p.export_chrome_trace(str(out / "live.json"))
"""


def _without_device_rows(trace: Trace) -> Trace:
    """The live trace as a CPU-only profile of the same run would be."""
    c = trace.columns
    cats = np.array([trace.strings[i] for i in c[S.CAT_ID]], dtype=object)
    cores = {p for p, name in trace.process_names.items() if name.startswith(V.CORE_PROCESS_PREFIX)}
    keep = ~np.isin(cats, [*CATEGORIES, V.CAT_FLOW]) & ~np.isin(c[S.PID], list(cores))
    return dataclasses.replace(
        trace,
        columns={k: v[keep] for k, v in c.items()},
        process_names={p: n for p, n in trace.process_names.items() if p not in cores},
        thread_names={k: n for k, n in trace.thread_names.items() if k[0] not in cores},
        meta_events=tuple(m for m in trace.meta_events if m.pid not in cores),
        metadata={
            k: v
            for k, v in trace.metadata.items()
            if not k.startswith("neuron_") and k != "deviceProperties"
        },
    )


def test_live_profile_and_merge_of_its_capture_agree(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", LIVE, str(tmp_path)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    live = load_trace(tmp_path / "live.json")
    merged = merge_device_events(
        _without_device_rows(live), [(tmp_path / "payload.json").read_bytes()]
    ).trace
    live_rows, live_flows = _trace_rows(live)
    merged_rows, merged_flows = _trace_rows(merged)
    kinds = Counter(json.loads(r)["cat"] for r in live_rows)
    assert kinds[V.CAT_KERNEL] > 20 and kinds[V.CAT_MEMCPY] >= 4 and kinds[V.CAT_RUNTIME] > 20
    assert kinds[V.CAT_GRAPH_OP] == 2 * 3  # the compiled graph's mm, sin, relu per call
    # the graph's execution is linked to its op; the ops nested in it are not (key_averages
    # would count the execution's device time twice)
    rows = [json.loads(r) for r in live_rows]
    graphs = [r for r in rows if V.ARG_GRAPH_ID in r["args"] and r["cat"] == V.CAT_KERNEL]
    assert len(graphs) == 2 and all(V.ARG_EXTERNAL_ID in g["args"] for g in graphs)
    assert not any(V.ARG_EXTERNAL_ID in r["args"] for r in rows if r["cat"] == V.CAT_GRAPH_OP)
    assert live_rows == merged_rows
    assert live_flows == merged_flows
    assert merged.metadata["deviceProperties"] == live.metadata["deviceProperties"]
