"""The libnrt ctypes path against tests/fake_libnrt (same symbols, documented JSON shape)."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from neuron_profiler.collectors.libnrt import LibnrtError, SysTrace
from neuron_profiler.collectors.session import Intervals, build_session_result
from neuron_profiler.collectors.sources import LibnrtSource
from neuron_profiler.errors import CollectorUnavailableError

FAKE_SRC = Path(__file__).resolve().parents[1] / "fake_libnrt" / "fake_libnrt.c"


@pytest.fixture(scope="module")
def fake_lib_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc not found: cannot build tests/fake_libnrt")
    out = tmp_path_factory.mktemp("fake_libnrt") / "libnrt_fake.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(out), str(FAKE_SRC)], check=True)
    return out


@pytest.fixture()
def st(fake_lib_path: Path):
    trace = SysTrace.load(str(fake_lib_path))
    ctl = ctypes.CDLL(str(fake_lib_path))  # same handle: test-only controls of the fake
    ctl.fake_nrt_record.argtypes = [ctypes.c_uint32, ctypes.c_char_p, ctypes.c_char_p]
    ctl.fake_nrt_fail.argtypes = [ctypes.c_char_p, ctypes.c_int]
    ctl.fake_nrt_dropped.restype = ctypes.c_uint64
    ctl.fake_nrt_fail(b"", 0)
    yield trace, ctl
    ctl.fake_nrt_fail(b"", 0)
    try:
        trace.stop()
    except LibnrtError:
        pass


def _event(
    nc: int, etype: str, phase: str, tracking: int, ts: int, tid: int = 7, data: dict | None = None
) -> bytes:
    return json.dumps(
        {
            "event_type": etype,
            "phase": phase,
            "id": tracking * 2 + (phase == "stop"),
            "tracking_id": tracking,
            "nc_idx": nc,
            "thread_id": tid,
            "timestamp_ns": ts,
            "data": data or {},
        }
    ).encode()


def _record(ctl, nc: int, etype: str, *args, **kw) -> int:
    return ctl.fake_nrt_record(nc, etype.encode(), _event(nc, etype, *args, **kw))


def test_missing_library_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CollectorUnavailableError, match="libnrt not loadable"):
        SysTrace.load(str(tmp_path / "no_such_libnrt.so"))


def test_fetch_hands_events_out_once(st) -> None:
    trace, ctl = st
    trace.start(max_events_per_nc=100)
    for i in range(3):
        assert _record(ctl, 0, "nc_exec_running", "start", i, 1000 + i) == 1
    first = json.loads(trace.fetch())
    assert first["data_version"] == 2 and len(first["events"]) == 3
    assert json.loads(trace.fetch())["events"] == []
    _record(ctl, 0, "nc_exec_running", "start", 9, 2000)
    assert [e["tracking_id"] for e in json.loads(trace.fetch())["events"]] == [9]


def test_capture_only_between_start_and_stop(st) -> None:
    trace, ctl = st
    assert _record(ctl, 0, "nc_exec_running", "start", 1, 10) == 0  # not started
    trace.start()
    trace.stop()
    assert _record(ctl, 0, "nc_exec_running", "start", 2, 20) == 0


def test_core_and_event_type_selection(st) -> None:
    trace, ctl = st
    trace.start(cores={1}, event_types={"nc_exec_running"})
    assert _record(ctl, 0, "nc_exec_running", "start", 1, 10) == 0  # core 0 not selected
    assert _record(ctl, 1, "nrt_execute", "start", 2, 11) == 0  # type not selected
    assert _record(ctl, 1, "nc_exec_running", "start", 3, 12) == 1
    events = json.loads(trace.fetch())["events"]
    assert [(e["nc_idx"], e["event_type"]) for e in events] == [(1, "nc_exec_running")]
    assert trace.cores() == (1,)
    assert "nc_exec_running" in trace.event_types()


def test_fetch_options_core_and_max(st) -> None:
    trace, ctl = st
    trace.start()
    for i in range(5):
        _record(ctl, 0, "nc_exec_running", "start", i, 100 + i)
        _record(ctl, 1, "nc_exec_running", "start", 10 + i, 100 + i)
    one = json.loads(trace.fetch(nc_idx=1, max_events_per_nc=2))["events"]
    assert [e["tracking_id"] for e in one] == [10, 11]
    rest = json.loads(trace.fetch())["events"]
    assert sorted(e["tracking_id"] for e in rest) == [0, 1, 2, 3, 4, 12, 13, 14]


def test_ring_buffer_drops_oldest(st) -> None:
    trace, ctl = st
    trace.start(max_events_per_nc=4)
    for i in range(10):
        _record(ctl, 0, "nc_exec_running", "start", i, 100 + i)
    events = json.loads(trace.fetch())["events"]
    assert [e["tracking_id"] for e in events] == [6, 7, 8, 9]
    assert ctl.fake_nrt_dropped(0) == 6


def test_error_codes_raise_naming_the_call(st) -> None:
    trace, ctl = st
    with pytest.raises(LibnrtError, match="nrt_sys_trace_fetch_events returned NRT_STATUS 1"):
        trace.fetch()  # not started
    trace.start()
    with pytest.raises(LibnrtError, match="nrt_sys_trace_start returned NRT_STATUS 1"):
        trace.start()  # already started
    ctl.fake_nrt_fail(b"nrt_sys_trace_fetch_events", 4)
    with pytest.raises(LibnrtError, match="NRT_STATUS 4"):
        trace.fetch()


def test_source_links_runtime_calls_by_containment(st) -> None:
    """Real-runtime path: no correlation ids in the JSON; host op intervals give them."""
    trace, ctl = st
    src = LibnrtSource(trace)
    src.start(max_events_per_nc=1000, correlation=None)
    t0 = 1_000_000
    # two aten ops on thread 7: [t0, t0+1000] (corr 11) and [t0+2000, t0+3000] (corr 12)
    for k, base in enumerate([t0, t0 + 2000]):
        _record(ctl, 0, "nrt_execute", "start", 100 + k, base + 100, data={"exec_id": k + 1})
        _record(ctl, 0, "nrt_execute", "stop", 100 + k, base + 400)
        _record(ctl, 0, "nc_exec_running", "start", 200 + k, base + 500, data={"exec_id": k + 1})
        _record(ctl, 0, "nc_exec_running", "stop", 200 + k, base + 900)
    payload = src.stop()
    iv = Intervals(
        np.array([7, 7]),
        np.array([11, 12]),
        np.array([t0, t0 + 2000]),
        np.array([t0 + 1000, t0 + 3000]),
    )
    res = build_session_result(
        payload,
        window=(t0, t0 + 10_000),
        intervals=iv,
        host_pid=1,
        props=src.device_properties(),
        source_name=src.name,
    )
    cols = res.records.rows
    kinds = {5: "kernel", 24: "runtime"}
    got = sorted(
        (kinds[int(t)], int(c), int(e))
        for t, c, e in zip(cols["kineto_type"], cols["external_id"], cols["exec_id"], strict=True)
    )
    assert got == [("kernel", 11, 1), ("kernel", 12, 2), ("runtime", 11, 1), ("runtime", 12, 2)]
    assert res.metadata["neuron_source"] == '"libnrt"'
    assert res.source_count == 4


@pytest.mark.parametrize("env, kept", [(None, False), ("1", True), ("no", False)])
def test_source_leaves_tensor_events_off_unless_asked(st, monkeypatch, env, kept) -> None:
    trace, ctl = st
    if env is None:
        monkeypatch.delenv("NEURON_PROFILER_TENSOR_EVENTS", raising=False)
    else:
        monkeypatch.setenv("NEURON_PROFILER_TENSOR_EVENTS", env)
    source = LibnrtSource(trace)
    source.start(max_events_per_nc=100, correlation=None)
    assert _record(ctl, 0, "nrt_tensor_allocate", "instant", 1, 10) == int(kept)
    assert _record(ctl, 0, "nc_exec_running", "start", 2, 11) == 1  # every other type stays on
    assert _record(ctl, 0, "nrt_execute", "start", 3, 12) == 1
    types = [e["event_type"] for e in json.loads(source.stop())["events"]]
    assert types == (["nrt_tensor_allocate"] if kept else []) + ["nc_exec_running", "nrt_execute"]


def _record_capture(ctl, payload: bytes) -> None:
    """Feed a realistic capture's events to the fake runtime, core by core, as it records."""
    for ev in json.loads(payload)["events"]:
        ctl.fake_nrt_record(ev["nc_idx"], ev["event_type"].encode(), json.dumps(ev).encode())


def test_real_shaped_sessions_map_with_sync_points_kept_across_fetches(st, fake_lib_path) -> None:
    """Two sessions on the real shape: the second has no sync point for core 1, whose device
    clock is hours away and drifting; the source keeps the first session's sync points, so its
    stamps still map to the generator's truth. The runtime version is in the trace."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from realistic_capture import Capture

    trace, ctl = st
    LibnrtSource._sync_memory.clear()
    cap = Capture(cores=2, epoch_hours=5, drift_ppm=80)
    t = cap.now
    results, second_start = [], 0
    for session in range(2):
        second_start = t
        src = LibnrtSource(trace)
        src.start(max_events_per_nc=10_000, correlation=None)
        if session == 0:
            cap.sync(0, t)
            cap.sync(1, t)
        for _ in range(3):
            t = max(cap.execute(tid=7, core=c, start=t, device_dur=30_000) for c in (0, 1))
        if session == 0:  # 100 ms after the first: stamps are whole ns, so the slope from two
            t += 100_000_000  # sync points is good to 1 ns per spacing (15 ns here, 1.5 s on)
            cap.sync(0, t)
            cap.sync(1, t)
        _record_capture(ctl, cap.fetch())
        results.append(
            build_session_result(
                src.stop(),
                window=(0, 2**62),
                intervals=Intervals.empty(),
                host_pid=1,
                props=src.device_properties(),
                source_name=src.name,
                provenance=src.provenance(),
            )
        )
        t += 1_500_000_000  # 1.5 s later: 120 µs of drift at 80 ppm
    second = results[1].placement
    kernels = second.kind == 1
    got = sorted(
        zip(second.device[kernels].tolist(), second.start_ns[kernels].tolist(), strict=True)
    )
    truth = sorted(
        (core, span[0])
        for (etype, core, _), span in cap.truth.device.items()
        if etype == "nc_exec_running" and span[0] >= second_start
    )
    assert len(got) == 6 and [c for c, _ in got] == [c for c, _ in sorted(truth)]
    for (_, s), (_, ts) in zip(got, sorted(truth), strict=True):
        assert abs(s - ts) <= 1_000
    assert json.loads(results[1].metadata["neuron_unmapped_events"]) == 0
    assert json.loads(results[1].metadata["neuron_runtime_version"]) == "2.31.22.0 (fake_libnrt)"


def test_runtime_version_is_optional(tmp_path: Path) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("gcc not found: cannot build tests/fake_libnrt")
    out = tmp_path / "libnrt_old.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O1", "-DFAKE_NO_VERSION", "-o", str(out), str(FAKE_SRC)],
        check=True,
    )
    assert SysTrace.load(str(out)).version() is None


INSPECT_ENABLE = "NEURON_RT_INSPECT_ENABLE"  # AWS: conflicts with torch.profiler-driven capture


def test_collector_never_sets_inspect_enable(st, monkeypatch) -> None:
    """torch.profiler drives the capture (nrt_sys_trace_*): inspect mode, which AWS documents as
    conflicting with torch.profiler, is never switched on: no collector source names the
    variable, and a whole start/stop cycle leaves the environment without it."""
    root = Path(__file__).resolve().parents[2] / "neuron_profiler" / "collectors"
    sources = [p for p in root.rglob("*") if p.suffix in {".py", ".cpp", ".h"}]
    assert len(sources) > 5
    assert [p.name for p in sources if INSPECT_ENABLE in p.read_text()] == []
    monkeypatch.delenv(INSPECT_ENABLE, raising=False)
    trace, _ = st
    src = LibnrtSource(trace)
    src.start(100, None)
    assert INSPECT_ENABLE not in os.environ
    src.stop()
    assert INSPECT_ENABLE not in os.environ
