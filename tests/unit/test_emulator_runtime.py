"""The emulated runtime's system-trace API: libnrt semantics (capture window, fetch once, per-core
selection, max count, bounded ring dropping oldest and counting), output the parser reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from neuron_profiler.emulator.runtime import (
    EmulatedRuntime,
    current_correlation_id,
    get_runtime,
    set_correlation_provider,
)
from neuron_profiler.errors import EmulatorError
from neuron_profiler.runtime_trace import format as F
from neuron_profiler.runtime_trace.activities import ActivityKind
from neuron_profiler.runtime_trace.parser import parse_system_trace

T0 = 1_750_000_000_000_000_000


def _instants(rt: EmulatedRuntime, core: int, n: int, first: int = 0) -> None:
    for i in range(first, first + n):
        rt.record(
            core,
            F.NRT_TENSOR_ALLOCATE,
            F.INSTANT,
            rt.new_tracking_id(),
            7,
            T0 + i,
            {"tensor_id": i, "size": 4 * i},
        )


def _events(payload: bytes) -> tuple[list[dict], dict]:
    doc = json.loads(payload)
    assert doc["data_version"] == 2
    real = [e for e in doc["events"] if e["event_type"] != F.TIMESTAMP_SYNC_POINT]
    return real, doc["neuron_profiler"]


def test_ring_overflow_drops_oldest_and_counts_once() -> None:
    rt = EmulatedRuntime(cores=2)
    rt.sys_trace_start(max_events_per_nc=5)
    _instants(rt, 0, 12)
    _instants(rt, 1, 3)
    events, ext = _events(rt.sys_trace_fetch())
    core0 = [e["data"]["tensor_id"] for e in events if e["nc_idx"] == 0]
    assert core0 == [7, 8, 9, 10, 11]  # the 5 newest survive
    assert ext["dropped_events"] == {"0": 7, "1": 0}
    assert ext["emulated"] is True and ext["chip"] == "trn2" and ext["speed_factor"] == 1.0
    events, ext = _events(rt.sys_trace_fetch())
    assert events == [] and ext["dropped_events"] == {"0": 0, "1": 0}  # reported once


def test_fetch_once_per_core_and_max_events() -> None:
    rt = EmulatedRuntime(cores=2)
    rt.sys_trace_start()
    _instants(rt, 0, 6)
    _instants(rt, 1, 4, first=100)
    one, ext = _events(rt.sys_trace_fetch(nc_idx=1))
    assert (
        {e["nc_idx"] for e in one} == {1} and len(one) == 4 and set(ext["dropped_events"]) == {"1"}
    )
    first, _ = _events(rt.sys_trace_fetch(nc_idx=0, max_events=4))
    assert [e["data"]["tensor_id"] for e in first] == [0, 1, 2, 3]  # oldest first
    _instants(rt, 0, 1, first=6)
    rest, _ = _events(rt.sys_trace_fetch())
    assert [e["data"]["tensor_id"] for e in rest] == [4, 5, 6]
    assert _events(rt.sys_trace_fetch())[0] == []
    ids = [e["id"] for e in one + first + rest]
    assert len(set(ids)) == len(ids)


def test_capture_only_between_start_and_stop_with_filters() -> None:
    rt = EmulatedRuntime(cores=3)
    _instants(rt, 0, 2)  # before start: not captured
    rt.sys_trace_start(cores={0, 2}, event_types={F.NRT_TENSOR_ALLOCATE})
    with pytest.raises(EmulatorError, match="already started"):
        rt.sys_trace_start()
    _instants(rt, 0, 2, first=10)
    _instants(rt, 1, 2, first=20)  # core not selected
    rt.record(2, F.NRT_TENSOR_FREE, F.INSTANT, 1, 7, T0, {"tensor_id": 1, "size": 4})  # type off
    rt.sys_trace_stop()
    _instants(rt, 0, 2, first=30)  # after stop: not captured
    events, _ = _events(rt.sys_trace_fetch())  # fetch after stop still hands out the window
    assert [(e["nc_idx"], e["data"]["tensor_id"]) for e in events] == [(0, 10), (0, 11)]
    rt.sys_trace_start()  # a new start begins with empty buffers
    assert _events(rt.sys_trace_fetch())[0] == []


def test_device_clock_maps_back_through_sync_point_and_parses() -> None:
    rt = EmulatedRuntime(cores=2)
    rt.sys_trace_start()
    launch, start, stop = T0 + 1_000, T0 + 16_000, T0 + 50_000
    ext = {F.EXT_KEY: {F.X_OP: "aten::mm", F.X_CORRELATION_ID: 9, F.X_MODELLED: True}}
    rt.record_span(1, F.NRT_MODEL_SUBMIT, 5, launch, launch + 800, {"exec_id": 3, **ext})
    rt.record_span(
        1,
        F.NC_EXEC_RUNNING,
        5,
        start,
        stop,
        {"exec_id": 3, "nc_timestamp_ns": rt.nc_timestamp_ns(start, 1), **ext},
        {"nc_timestamp_ns": rt.nc_timestamp_ns(stop, 1)},
    )
    payload = rt.sys_trace_fetch()
    doc = json.loads(payload)
    syncs = [e for e in doc["events"] if e["event_type"] == F.TIMESTAMP_SYNC_POINT]
    assert len(syncs) == 1 and syncs[0]["nc_idx"] == 1
    sync = syncs[0]["data"]
    assert sync["nc_timestamp_ns"] != sync["cpu_timestamp_ns"]  # the device clock really differs
    assert syncs[0]["timestamp_ns"] == sync["nc_timestamp_ns"]
    for e in doc["events"]:
        if "nc_timestamp_ns" in e["data"]:  # the real runtime's override: device clock
            assert e["timestamp_ns"] == e["data"]["nc_timestamp_ns"]
        if "nc_timestamp_ns" in e["data"] and e is not syncs[0]:
            mapped = (
                sync["cpu_timestamp_ns"] + e["data"]["nc_timestamp_ns"] - sync["nc_timestamp_ns"]
            )
            assert mapped in (start, stop)
    acts = parse_system_trace(payload)
    assert len(acts) == 2 and acts.unpaired == 0 and acts.malformed == 0
    kernel = list(acts.kind).index(ActivityKind.KERNEL)
    call = list(acts.kind).index(ActivityKind.RUNTIME_CALL)
    assert (acts.start_ns[kernel], acts.end_ns[kernel]) == (start, stop)
    assert (acts.start_ns[call], acts.end_ns[call]) == (launch, launch + 800)
    assert acts.exec_id[kernel] == acts.exec_id[call] == 3
    assert list(acts.correlation_id) == [9, 9] and set(acts.core) == {1}
    assert acts.names[acts.name_id[kernel]] == "aten::mm"


def test_overflow_split_pair_never_crashes_parser() -> None:
    rt = EmulatedRuntime(cores=1)
    rt.sys_trace_start(max_events_per_nc=3)
    for i in range(4):  # 8 events into a ring of 3: a start loses its stop's partner
        rt.record_span(0, F.NC_EXEC_RUNNING, 1, T0 + 10 * i, T0 + 10 * i + 5, {"exec_id": i})
    payload = rt.sys_trace_fetch()
    assert json.loads(payload)["neuron_profiler"]["dropped_events"] == {"0": 5}
    acts = parse_system_trace(payload)
    assert acts.unpaired == 1 and len(acts) == 2  # one whole pair and one lone stop


def test_concurrent_recording_loses_nothing_uncounted() -> None:
    rt = EmulatedRuntime(cores=1)
    rt.sys_trace_start(max_events_per_nc=500)
    per_thread, fetched, dropped = 3000, [], []

    def work() -> None:
        _instants(rt, 0, per_thread)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        events, ext = _events(rt.sys_trace_fetch(max_events=200))
        fetched.extend(events)
        dropped.append(ext["dropped_events"]["0"])
    for t in threads:
        t.join()
    events, ext = _events(rt.sys_trace_fetch())
    fetched.extend(events)
    dropped.append(ext["dropped_events"]["0"])
    assert len(fetched) + sum(dropped) == 2 * per_thread
    assert len({e["id"] for e in fetched}) == len(fetched)


def test_device_properties_per_logical_core() -> None:
    props = EmulatedRuntime(cores=2, chip_name="trn2", speed_factor=0.5).device_properties()
    assert [p["name"] for p in props] == ["NeuronCore 0", "NeuronCore 1"]
    assert [p["id"] for p in props] == [0, 1]
    p = props[0]
    # AWS: 667 TFLOPS per chip, 4 logical cores; every peak after the speed factor (0.5)
    assert p["peak_bf16_tflops"] == pytest.approx(667 / 4 * 0.5)
    assert p["peak_fp32_tflops"] == pytest.approx(667 / 4 / 4 * 0.5)  # FP32 at 1/4 of BF16
    assert p["peak_tflops"]["TensorE"]["float32"] == p["peak_fp32_tflops"]
    assert p["peak_tflops"]["VectorE"]["bfloat16"] == pytest.approx(0.492 * 0.5)
    assert p["hbm_bytes"] == 96 * 2**30 // 4 and p["hbm_gbps"] == pytest.approx(2900 / 4 * 0.5)
    assert p["host_link_gbps"] == pytest.approx(64 / 4 * 0.5)
    assert p["collective_link_gbps"] == pytest.approx(100 * 0.5)
    assert p["emulated"] is True and p["speed_factor"] == 0.5 and p["chip"] == "trn2"
    trn3 = EmulatedRuntime(cores=1, chip_name="trn3").device_properties()[0]
    assert trn3["chip"] == "trn3" and trn3["hbm_bytes"] == 144 * 2**30 // 8


def test_singleton_and_correlation_provider() -> None:
    assert get_runtime() is get_runtime()
    try:
        set_correlation_provider(lambda: 42)
        assert current_correlation_id() == 42
    finally:
        set_correlation_provider(None)
    assert current_correlation_id() == 0


def test_bad_arguments_raise() -> None:
    rt = EmulatedRuntime(cores=1)
    with pytest.raises(ValueError, match="max_events_per_nc"):
        rt.sys_trace_start(max_events_per_nc=0)
    with pytest.raises(ValueError, match="max_events"):
        rt.sys_trace_fetch(max_events=-1)
    with pytest.raises(ValueError, match="unknown chip"):
        EmulatedRuntime(chip_name="trn9")


def test_runtime_imports_without_torch() -> None:
    env = {k: v for k, v in os.environ.items() if k != "NEURON_PROFILER_EMULATE"}
    code = (
        "import sys; import neuron_profiler.emulator.runtime as r; r.get_runtime()"
        ".sys_trace_fetch(); import neuron_profiler.emulator.scheduler, "
        "neuron_profiler.emulator.fallback, neuron_profiler.emulator; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.strip() == "False"


def test_record_launch_respects_type_filter_and_ring() -> None:
    def launch(rt: EmulatedRuntime, exec_id: int) -> None:
        builders = (
            lambda p: {"exec_id": p[0], "who": "call"},
            lambda p: {"exec_id": p[0]},
            lambda p: {"exec_id": p[0], "who": "work"},
            lambda p: {"exec_id": p[0]},
        )
        rt.record_launch(
            0,
            F.NRT_MODEL_SUBMIT,
            F.NC_EXEC_RUNNING,
            9,
            (T0, T0 + 5),
            (T0 + 10, T0 + 20),
            builders,
            (exec_id,),
        )

    rt = EmulatedRuntime(cores=1)
    rt.sys_trace_start(event_types={F.NC_EXEC_RUNNING})
    launch(rt, 1)
    events, _ = _events(rt.sys_trace_fetch())
    assert [(e["event_type"], e["phase"]) for e in events] == [
        (F.NC_EXEC_RUNNING, F.START),
        (F.NC_EXEC_RUNNING, F.STOP),
    ]
    assert events[0]["data"] == {"exec_id": 1, "who": "work"}
    rt.sys_trace_stop()
    rt.sys_trace_start(max_events_per_nc=6)
    launch(rt, 2)
    launch(rt, 3)  # 8 events into 6: the call pair of exec 2 is dropped
    events, ext = _events(rt.sys_trace_fetch())
    assert ext["dropped_events"] == {"0": 2} and len(events) == 6
    assert [e["data"]["exec_id"] for e in events] == [2, 2, 3, 3, 3, 3]
