"""Offline merge: emulator-format device events onto a small host trace, checked event by event."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from neuron_profiler.emulator.runtime import EmulatedRuntime
from neuron_profiler.errors import TraceLoadError
from neuron_profiler.exporters.chrome import write_chrome_trace
from neuron_profiler.runtime_trace import format as F
from neuron_profiler.runtime_trace.merge import merge_device_events, merge_files
from neuron_profiler.trace import load_trace
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as L
from neuron_profiler.trace.model import Trace, TraceBuilder

HOST_PID, TID = 4321, 777
T0 = 1_800_000_000_000_000_000
OPS = [
    ("aten::mm", 11),
    ("aten::copy_", 12),
    ("c10d::allreduce_", 13),
    ("aten::nonzero", 14),
    ("aten::item", 15),
]


def host_trace() -> Trace:
    b = TraceBuilder("host.json")
    b.add(
        name="ProfilerStep#1",
        ts_ns=T0,
        dur_ns=1_000_000,
        kind=S.EventKind.USER_ANNOTATION,
        cat="user_annotation",
        pid=HOST_PID,
        tid=TID,
    )
    for i, (name, ext) in enumerate(OPS):
        b.add(
            name=name,
            ts_ns=T0 + i * 100_000,
            dur_ns=50_000,
            kind=S.EventKind.CPU_OP,
            cat="cpu_op",
            pid=HOST_PID,
            tid=TID,
            args={"External id": ext},
        )
    b.process_names[HOST_PID] = "python"
    return b.build()


def emulated_payload(rt: EmulatedRuntime) -> bytes:
    """What the emulated device records for OPS (one launch each), fetched once."""
    rt.sys_trace_start()
    X = F.EXT_KEY
    for i, (name, corr) in enumerate(OPS[:3]):
        t = T0 + i * 100_000 + 1_000
        rt.record_span(
            0,
            F.NRT_MODEL_SUBMIT,
            TID,
            t,
            t + 2_000,
            {"exec_id": i + 1, "model_id": 1, X: {F.X_OP: name, F.X_CORRELATION_ID: corr}},
        )
        d0, d1 = t + 5_000, t + 5_000 + 4_000 * (i + 1)
        ext = {F.X_OP: name, F.X_CORRELATION_ID: corr, F.X_MODELLED: True, F.X_LAUNCH_NS: t}
        if i == 0:
            etype, ext = (
                F.NC_EXEC_RUNNING,
                {**ext, F.X_FLOPS: 8_000_000, F.X_BYTES: 48_000, F.X_QUEUE: F.QUEUE_COMPUTE},
            )
        elif i == 1:
            etype, ext = (
                F.DMEM_BUF_COPYIN,
                {**ext, F.X_BYTES: 1 << 20, F.X_DIRECTION: F.H2D, F.X_QUEUE: F.QUEUE_DMA},
            )
        else:
            etype, ext = (
                F.CC_RUNNING,
                {
                    **ext,
                    F.X_BYTES: 4096,
                    F.X_COLLECTIVE_OP: "allreduce",
                    F.X_RANKS: [0, 1],
                    F.X_ALGORITHM: "ring",
                    F.X_QUEUE: F.QUEUE_COLLECTIVE,
                },
            )
        rt.record_span(
            0,
            etype,
            TID,
            d0,
            d1,
            {"exec_id": i + 1, "nc_timestamp_ns": rt.nc_timestamp_ns(d0), X: ext},
            {"exec_id": i + 1, "nc_timestamp_ns": rt.nc_timestamp_ns(d1)},
        )
    t = T0 + 3 * 100_000 + 1_000
    rt.record_span(
        1,
        F.EXT_FALLBACK,
        TID,
        t,
        t + 9_000,
        {
            X: {
                F.X_OP: "aten::nonzero",
                F.X_REASON: "unsupported op",
                F.X_SHAPES: [[4, 4]],
                F.X_DTYPES: ["float32"],
                F.X_CORRELATION_ID: 14,
            }
        },
    )
    t = T0 + 4 * 100_000 + 1_000
    rt.record_span(1, F.EXT_HOST_SYNC, TID, t, t + 3_000, {X: {F.X_SYNC_REASON: "item"}})
    payload = rt.sys_trace_fetch()
    rt.sys_trace_stop()
    return payload


@pytest.fixture()
def runtime() -> EmulatedRuntime:
    return EmulatedRuntime(cores=2, chip_name="trn2")


def _rows(trace: Trace, cat: str) -> list[int]:
    return [i for i in range(len(trace)) if trace.category(i) == cat]


def test_emulator_events_land_as_the_layout_says(runtime: EmulatedRuntime) -> None:
    result = merge_device_events(host_trace(), [emulated_payload(runtime)])
    tr = result.trace
    # 3 runtime calls + their 3 device activities + 1 fallback + 1 host sync
    assert result.activities == 8 and result.unpaired == 0 and result.malformed == 0
    assert result.linked == 8 and result.unlinked == 0  # the sync: by containment
    c = tr.columns
    assert (c[S.TS_NS][1:] >= c[S.TS_NS][:-1]).all()
    kernel = _rows(tr, L.CAT_KERNEL)
    memcpy = _rows(tr, L.CAT_MEMCPY)
    assert len(kernel) == 2 and len(memcpy) == 1  # compute op + collective; the DMA
    mm = next(i for i in kernel if tr.args(i).get(L.ARG_OP) == "aten::mm")
    assert tr.name(mm) == "NeuronCore: mm"  # no engine in this payload: the core's name
    a = tr.args(mm)
    dur_s = 4_000 / 1e9
    assert c[S.TS_NS][mm] == T0 + 6_000 and c[S.DUR_NS][mm] == 4_000  # via the sync point
    assert (c[S.PID][mm], c[S.TID][mm]) == (0, L.queue_stream(0, 0))
    assert a["External id"] == 11 and a[L.ARG_FLOPS] == 8_000_000
    assert a[L.ARG_TFLOPS] == pytest.approx(8_000_000 / dur_s / 1e12, rel=1e-5)
    assert a[L.ARG_GBPS] == pytest.approx(48_000 / dur_s / 1e9, rel=1e-5)
    assert a[L.ARG_EMULATED] is True
    dma = tr.args(memcpy[0])
    assert dma[L.ARG_DIRECTION] == "h2d" and dma["External id"] == 12
    assert dma[L.ARG_BANDWIDTH] == pytest.approx((1 << 20) / (8_000 / 1e9) / 1e9, rel=1e-5)
    assert c[S.TID][memcpy[0]] == L.queue_stream(0, 1)
    cc = next(i for i in kernel if i != mm)
    cca = tr.args(cc)
    assert c[S.TID][cc] == L.queue_stream(0, 2)
    assert cca[L.ARG_COLLECTIVE] == "allreduce" and cca[L.ARG_GROUP_RANKS] == [0, 1]
    assert cca[L.ARG_GROUP_SIZE] == 2 and cca[L.ARG_ALGORITHM] == "ring"
    assert cca[L.ARG_IS_COLLECTIVE] is True and cca["External id"] == 13


def test_host_side_rows_flows_and_metadata(runtime: EmulatedRuntime) -> None:
    result = merge_device_events(host_trace(), [emulated_payload(runtime)])
    tr = result.trace
    c = tr.columns
    calls = _rows(tr, L.CAT_RUNTIME)
    submits = [i for i in calls if tr.args(i).get("exec_id") is not None]
    assert len(submits) == 3
    assert {(int(c[S.PID][i]), int(c[S.TID][i])) for i in calls} == {(HOST_PID, TID)}
    fallback = [i for i in calls if tr.name(i).startswith(L.FALLBACK_PREFIX)]
    assert all(tr.args(i)[L.ARG_IS_FALLBACK] is True for i in fallback)
    assert len(fallback) == 1 and c[S.KIND][fallback[0]] == S.EventKind.FALLBACK
    fa = tr.args(fallback[0])
    assert tr.name(fallback[0]).endswith("aten::nonzero") and fa["External id"] == 14
    assert fa[L.ARG_FALLBACK_REASON] == "unsupported op" and c[S.PID][fallback[0]] == HOST_PID
    sync = [i for i in calls if i not in submits and i not in fallback]
    assert len(sync) == 1 and tr.args(sync[0])["External id"] == 15  # contained in aten::item
    # one ac2g arrow per runtime call: from the call (host) to its device work (core 0)
    starts = [i for i in range(len(tr)) if c[S.PH][i] == S.Phase.FLOW_START]
    ends = {int(c[S.FLOW_ID][i]): i for i in range(len(tr)) if c[S.PH][i] == S.Phase.FLOW_END}
    assert len(starts) == len(ends) == result.flows == 3
    call_ts = {int(c[S.TS_NS][i]) for i in submits}
    for s in starts:
        f = ends[int(c[S.FLOW_ID][s])]
        assert int(c[S.TS_NS][s]) in call_ts and c[S.PID][s] == HOST_PID
        assert c[S.PID][f] == 0 and c[S.TS_NS][f] == c[S.TS_NS][s] + 5_000
    assert tr.process_names[0] == "NeuronCore 0"
    assert tr.process_sort_index[0] > HOST_PID
    assert tr.thread_names[(0, L.queue_stream(0, 1))] == "DMA"
    assert tr.metadata["deviceProperties"] == [  # cores 0 and 1 seen, from the envelope
        {**p, "peaks_known": True} for p in runtime.device_properties()
    ]
    assert tr.metadata["neuron_peaks"] == "modelled"
    assert tr.metadata["neuron_dropped_events"] == {"0": 0, "1": 0}
    assert tr.metadata["neuron_timing_modelled"] is True
    host_rows = sum(
        1
        for i in range(len(tr))
        if c[S.PID][i] == HOST_PID and tr.category(i) in ("cpu_op", "user_annotation")
    )
    assert host_rows == len(host_trace())  # host events kept, none duplicated


def test_chrome_export_reloads_to_the_same_events(runtime: EmulatedRuntime, tmp_path: Path) -> None:
    merged = merge_device_events(host_trace(), [emulated_payload(runtime)]).trace
    back = load_trace(write_chrome_trace(merged, tmp_path / "m.json.gz"))
    assert len(back) == len(merged)
    for col in (S.TS_NS, S.DUR_NS, S.PID, S.TID, S.EXTERNAL_ID, S.STREAM, S.PH, S.KIND):
        assert (back.col(col) == merged.col(col)).all(), col
    assert (merged.col(S.STREAM) >= 0).any()  # device rows carry their queue
    assert back.process_names == merged.process_names
    assert back.metadata["deviceProperties"] == merged.metadata["deviceProperties"]


def test_ring_buffer_drops_and_split_fetches(tmp_path: Path) -> None:
    rt = EmulatedRuntime(cores=1)
    rt.sys_trace_start(max_events_per_nc=4)
    for i in range(4):  # 8 events into a ring of 4: the 4 oldest are dropped
        t = T0 + i * 100_000 + 1_000
        rt.record_span(
            0,
            F.NC_EXEC_RUNNING,
            TID,
            t,
            t + 500,
            {"exec_id": i, "nc_timestamp_ns": rt.nc_timestamp_ns(t)},
            {"exec_id": i, "nc_timestamp_ns": rt.nc_timestamp_ns(t + 500)},
        )
    first = rt.sys_trace_fetch(max_events=3)  # the last pair is split across two fetches
    second = rt.sys_trace_fetch()
    rt.sys_trace_stop()
    (tmp_path / "a.json").write_bytes(first)
    with gzip.open(tmp_path / "b.json.gz", "wb") as f:
        f.write(second)
    host = tmp_path / "host.json"
    write_chrome_trace(host_trace(), host)
    result = merge_files(host, [tmp_path / "a.json", tmp_path / "b.json.gz"])
    assert result.dropped == {0: 4} and result.activities == 2 and result.unpaired == 0
    assert result.trace.metadata["neuron_dropped_events"] == {"0": 4}


def test_bad_device_input_names_the_file(tmp_path: Path) -> None:
    host = tmp_path / "host.json"
    write_chrome_trace(host_trace(), host)
    cases = {
        "missing.json": None,
        "bad.json": b"{nope",
        "other.json": b'{"traceEvents": []}',
        "empty.json": b"  \n",
    }
    for name, content in cases.items():
        path = tmp_path / name
        if content is not None:
            path.write_bytes(content)
        with pytest.raises(TraceLoadError) as err:
            merge_files(host, [path])
        assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_core_whose_pid_the_host_uses_moves_to_a_free_pid() -> None:
    """Every CUDA trace uses pid 0: core 0 moves to the first free pid >= 2**20, still named
    "NeuronCore 0"; a real capture (no extension) says its peaks are unknown."""
    b = TraceBuilder("gpu.json")
    b.add(name="k", ts_ns=T0, dur_ns=10, kind=S.EventKind.KERNEL, cat="kernel", pid=0, tid=7)
    payload = json.dumps(
        {
            "events": [
                {
                    "event_type": F.NC_EXEC_RUNNING,
                    "phase": "start",
                    "tracking_id": 1,
                    "nc_idx": 0,
                    "thread_id": 1,
                    "timestamp_ns": T0,
                    "data": {},
                },
                {
                    "event_type": F.NC_EXEC_RUNNING,
                    "phase": "stop",
                    "tracking_id": 1,
                    "nc_idx": 0,
                    "thread_id": 1,
                    "timestamp_ns": T0 + 5,
                    "data": {},
                },
            ]
        }
    ).encode()
    result = merge_device_events(b.build(), [payload])
    tr, c = result.trace, result.trace.columns
    assert result.relocated_cores == {0: 2**20}
    kernels = np.flatnonzero(c[S.CAT_ID] == tr.string_id(L.CAT_KERNEL))
    assert sorted(c[S.PID][kernels].tolist()) == [0, 2**20]  # the host's own kernel stays
    assert tr.process_names[2**20] == "NeuronCore 0"
    assert tr.metadata[L.META_RELOCATED_CORES] == {"0": 2**20}
    assert tr.metadata[L.META_PEAKS] == "unknown"
    assert tr.metadata["deviceProperties"][-1] == {
        "id": 0,
        "name": "NeuronCore 0",
        "emulated": False,
        "peaks_known": False,
    }


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "neuron_profiler.cli.main", "merge", *args],
        capture_output=True,
        text=True,
    )


def test_cli_merges_and_bad_input_is_one_line_exit_2(
    runtime: EmulatedRuntime, tmp_path: Path
) -> None:
    host = tmp_path / "host.json"
    write_chrome_trace(host_trace(), host)
    dev = tmp_path / "dev.json"
    dev.write_bytes(emulated_payload(runtime))
    out = tmp_path / "out.json.gz"
    ok = _cli(str(host), str(dev), "-o", str(out))
    assert ok.returncode == 0, ok.stderr
    assert "merged 8 device activities" in ok.stdout
    assert len(load_trace(out)) == len(host_trace()) + 8 + 2 * 3  # + one s/f pair per call
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    for args in ([str(host), str(bad)], [str(tmp_path / "nohost.json"), str(dev)]):
        res = _cli(*args, "-o", str(tmp_path / "x.json"))
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1 and "Traceback" not in res.stderr
        assert args[0] in lines[0] or args[1] in lines[0]
    assert not (tmp_path / "x.json").exists()


def test_cli_refuses_an_input_given_twice(runtime: EmulatedRuntime, tmp_path: Path) -> None:
    """The same device file twice (here once through a symlink) merged every activity twice,
    half of them unpaired, without a word."""
    host = tmp_path / "host.json"
    write_chrome_trace(host_trace(), host)
    dev = tmp_path / "dev.json"
    dev.write_bytes(emulated_payload(runtime))
    (tmp_path / "again.json").symlink_to(dev)
    out = tmp_path / "out.json"
    res = _cli(str(host), str(dev), str(tmp_path / "again.json"), "-o", str(out))
    assert res.returncode == 2 and "given twice" in res.stderr and str(dev) in res.stderr
    assert not out.exists()
