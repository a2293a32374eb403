"""Captures shaped as libnrt 2.31 writes them (tests/realistic_capture.py) through the parser and
the placement: device clocks hours away and drifting, exec_id only on the kbl stages, async
calls with and without nrta_seq_id, host-timed copies, collective barriers, unknown types, drops,
calls on a thread torch does not profile. Every expectation comes from the generator's truth."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import numpy as np
import pytest
from realistic_capture import Capture

from neuron_profiler.collectors import session as CS
from neuron_profiler.runtime_trace.activities import ActivityKind
from neuron_profiler.runtime_trace.parser import SyncPoints, parse_system_traces
from neuron_profiler.trace import vocabulary as V

PROFILED, UNPROFILED = 11, 99
HOST_PID = 4242
_KIND_TYPES = {
    ActivityKind.KERNEL: "nc_exec_running",
    ActivityKind.COLLECTIVE: "cc_running",
    ActivityKind.COLLECTIVE_WAIT: "cc_exec_barrier",
}


def _workload(cap: Capture, t: int, *, seq0: int) -> int:
    """A mix of every shape, on a profiled thread (inside host ops) and an unprofiled one."""
    free = {0: 0, 1: 0}
    op = cap.host_op(PROFILED, t, 300_000)
    free[0] = cap.execute(tid=PROFILED, core=0, start=t + 10_000, device_dur=40_000)  # eager op
    op = cap.host_op(PROFILED, op.end + 5_000, 300_000)
    free[0] = cap.execute(
        tid=PROFILED,
        core=0,
        start=op.start + 10_000,
        device_dur=30_000,
        api="nrta_execute_schedule",
        seq=seq0,
        queue_free=free[0],
    )
    op = cap.host_op(PROFILED, op.end + 5_000, 300_000)
    free[1] = cap.execute(
        tid=PROFILED,
        core=1,
        start=op.start + 10_000,
        device_dur=30_000,
        api="nrta_execute_schedule",
        seq=seq0 + 1,
        device_seq=False,
    )
    op = cap.host_op(PROFILED, op.end + 5_000, 900_000)  # a compiled graph: one long execution
    free[0] = cap.execute(
        tid=PROFILED,
        core=0,
        start=op.start + 10_000,
        device_dur=700_000,
        model_id=7,
        queue_free=free[0],
    )
    op = cap.host_op(PROFILED, op.end + 5_000, 200_000)
    cap.copy(
        tid=PROFILED, core=1, start=op.start + 10_000, direction="h2d", size=1 << 20, dur=80_000
    )
    op = cap.host_op(PROFILED, op.end + 5_000, 200_000)
    cap.copy(tid=PROFILED, core=0, start=op.start + 10_000, direction="d2h", size=4096, dur=20_000)
    op = cap.host_op(PROFILED, op.end + 5_000, 400_000)
    cap.collective(tid=PROFILED, core=0, start=op.start + 10_000, wait=150_000, dur=60_000)
    cap.collective(
        tid=PROFILED, core=1, start=op.start + 20_000, wait=5_000, dur=60_000, algorithm=None
    )
    cap.tensor_events(tid=PROFILED, core=1, t=op.start + 300_000, size=512)
    cap.execute(tid=UNPROFILED, core=1, start=op.end + 10_000, device_dur=20_000)
    op = cap.host_op(PROFILED, op.end + 100_000, 200_000)
    cap.submit(tid=PROFILED, core=0, start=op.start + 5_000, device_dur=20_000)
    cap.odd_events(core=0, t=op.end + 20_000)
    return op.end + 300_000


def _capture() -> tuple[Capture, list[bytes]]:
    """Two fetches: the first with sync points on both cores, the second per core, with none on
    core 1 (its stamps map through the sync points kept from the first fetch)."""
    cap = Capture(cores=2, epoch_hours=3, drift_ppm=40)
    t = cap.now
    for core in (0, 1):
        cap.sync(core, t)
    t = _workload(cap, t + 1_000, seq0=100)
    for core in (0, 1):
        cap.sync(core, t)
    first = cap.fetch()
    t = _workload(cap, t + 2_000_000_000, seq0=200)  # 2 s on: 40 ppm of drift is 80 µs
    cap.sync(0, t)
    memory = SyncPoints()
    memory.keep(first)
    return cap, [first, memory.envelope(), cap.fetch([0]), cap.fetch([1])]


def _intervals(cap: Capture) -> CS.Intervals:
    a = np.array([(o.tid, o.corr, o.start, o.end) for o in cap.ops], dtype=np.int64)
    return CS.Intervals(tid=a[:, 0], correlation=a[:, 1], push_ns=a[:, 2], pop_ns=a[:, 3])


@pytest.fixture(scope="module")
def captured() -> tuple[Capture, list[bytes]]:
    return _capture()


def test_device_times_map_through_sync_points_to_the_truth(captured) -> None:
    cap, payloads = captured
    acts = parse_system_traces(payloads[2:])  # without the kept sync points: core 1 unmapped
    assert acts.unmapped > 0 and not (acts.core[np.isin(acts.kind, list(_KIND_TYPES))] == 1).any()
    acts = parse_system_traces(payloads)
    assert acts.unmapped == 0
    got: dict[tuple[str, int], list] = defaultdict(list)
    for kind, etype in _KIND_TYPES.items():
        for i in np.flatnonzero(acts.kind == kind).tolist():
            got[(etype, int(acts.core[i]))].append((int(acts.start_ns[i]), int(acts.end_ns[i])))
    want: dict[tuple[str, int], list] = defaultdict(list)
    for (etype, core, _), span in cap.truth.device.items():
        want[(etype, core)].append(span)
    assert sorted(got) == sorted(want)
    for key, spans in want.items():
        assert len(got[key]) == len(spans), key
        for (s, e), (ts, te) in zip(sorted(got[key]), sorted(spans), strict=True):
            assert abs(s - ts) <= 1_000 and abs(e - te) <= 1_000, (key, s - ts, e - te)
    # the test has teeth: one offset per core, without following the drift, is off by far more
    last = max(cap.truth.device.values())[0]
    assert (
        abs(cap.device_ns(1, last) - cap.device_ns(1, cap.ops[0].start) - (last - cap.ops[0].start))
        > 50_000
    )


def _placed(cap: Capture, payloads: list[bytes]) -> CS.SessionResult:
    joined = b"[" + b",".join(payloads) + b"]"
    return CS.build_session_result(
        joined,
        window=(0, 2**62),
        intervals=_intervals(cap),
        host_pid=HOST_PID,
        props=[],
        source_name="libnrt",
        provenance={"runtime_version": "2.31.22.0"},
    )


def _rows(result: CS.SessionResult) -> list[dict]:
    c, p = result.records.rows, result.placement
    return [
        {
            "name": result.records.names[c["name_id"][i]],
            "pid": int(c["pid"][i]),
            "tid": int(c["tid"][i]),
            "start": int(c["start_ns"][i]),
            "end": int(c["end_ns"][i]),
            "ext": int(c["external_id"][i]),
            "corr": int(c["correlation"][i]),
            "kind": int(p.kind[i]),
            "flow": int(c["flow_id"][i]),
            "flow_start": bool(c["flow_start"][i]),
            "bytes": int(c["bytes"][i]),
            "core": int(p.device[i]),
            "args": dict(result.records.args[c["args_id"][i]]) if c["args_id"][i] >= 0 else {},
        }
        for i in range(len(result.records))
    ]


def test_calls_link_through_kbl_stages_and_seq_ids_to_their_ops(captured) -> None:
    cap, payloads = captured
    result = _placed(cap, payloads)
    rows = _rows(result)
    calls = sorted(
        (r for r in rows if r["kind"] == ActivityKind.RUNTIME_CALL), key=lambda r: r["start"]
    )
    want = [cap.truth.call_op[t] for t in sorted(cap.truth.call_op)]
    assert [r["ext"] for r in calls] == want
    unlinked = sum(1 for x in want if x == 0)
    assert unlinked == 2  # the calls on the unprofiled thread (one per workload)
    assert json.loads(result.metadata[V.META_UNLINKED_CALLS]) == unlinked
    # every piece of device work carries its call's correlation, and the same External id
    call_by_corr = {r["corr"]: r for r in calls if r["corr"] >= 0}
    work = [
        r
        for r in rows
        if r["kind"] in (ActivityKind.KERNEL, ActivityKind.COLLECTIVE, ActivityKind.DMA)
    ]
    assert len(work) == len(cap.truth.work_call)
    for w in work:
        call = call_by_corr[w["corr"]]
        assert w["ext"] == call["ext"] and w["start"] >= call["start"]  # never before its call
        assert w["core"] == w["pid"]  # device = the core, placed on its own process
    starts = {r["flow"] for r in rows if r["flow_start"]}
    ends = {r["flow"] for r in rows if r["flow"] and not r["flow_start"]}
    assert starts == ends and len(starts) == len(work)


def test_copies_are_host_timed_dma_rows_with_their_bytes_counted_once(captured) -> None:
    cap, payloads = captured
    rows = _rows(_placed(cap, payloads))
    dma = sorted((r for r in rows if r["kind"] == ActivityKind.DMA), key=lambda r: r["start"])
    want = [cap.truth.copies[t] for t in sorted(cap.truth.copies)]
    assert [(r["args"].get(V.ARG_DIRECTION) or r["name"], r["bytes"]) for r in dma] == [
        (V.MEMCPY_NAMES[d], size) for d, size in want
    ]
    for r in dma:
        assert r["args"][V.ARG_HOST_TIMED] == "true" and r["tid"] == V.queue_stream(r["core"], 1)
    calls = [r for r in rows if r["name"] in ("nrt_tensor_write", "nrt_tensor_read")]
    assert len(calls) == len(dma) and all(r["bytes"] == -1 for r in calls)


def test_collective_barriers_are_wait_slices_on_the_collective_thread(captured) -> None:
    cap, payloads = captured
    rows = _rows(_placed(cap, payloads))
    waits = [r for r in rows if r["kind"] == ActivityKind.COLLECTIVE_WAIT]
    truth = [v for k, v in cap.truth.device.items() if k[0] == "cc_exec_barrier"]
    assert len(waits) == len(truth) == 4
    assert sorted(r["end"] - r["start"] for r in waits) == pytest.approx(
        sorted(e - s for s, e in truth), abs=2_000
    )
    for r in waits:
        assert r["name"] == V.COLLECTIVE_WAIT_NAME
        assert r["args"][V.ARG_COLLECTIVE_WAIT] == "true"
        assert r["tid"] == V.queue_stream(r["core"], 2) and r["ext"] == 0  # no collective's
    cc = [r for r in rows if r["kind"] == ActivityKind.COLLECTIVE]
    assert Counter(r["args"].get(V.ARG_ALGORITHM) for r in cc) == {'"ring"': 2, None: 2}


def test_unknown_types_kept_empty_payloads_not_malformed_provenance(captured) -> None:
    cap, payloads = captured
    result = _placed(cap, payloads)
    names = Counter(r["name"] for r in _rows(result))
    for etype in (
        "hw_notify",
        "notification_consume_errors",
        "nrt_dma_mem_alloc",
        "tensor_block",
        "nrt_tensor_allocate",
        "nrt_tensor_free",
        "kbl_exec_pre",
        "kbl_exec_core",
        "nrt_model_submit",
        "numerical_err",
        "nrt_model_switch",
        "nrt_dma_mem_dealloc",
        "nrt_profile_add_node_info",
    ):
        assert names[etype] > 0, etype
    meta = {k: json.loads(v) for k, v in result.metadata.items()}
    assert meta[V.META_MALFORMED] == 0 and meta[V.META_UNPAIRED] == 0
    assert meta[V.META_SOURCE] == "libnrt" and meta[V.META_RUNTIME_VERSION] == "2.31.22.0"
    assert meta[V.META_DROPPED] == V.DROPS_UNKNOWN  # the real envelope has no drop count
    assert meta[V.META_HIDDEN_TYPES] == ["timestamp_sync_point"]  # consumed, not shown
    assert meta[V.META_PEAKS] == "unknown"
    alloc = next(r for r in _rows(result) if r["name"] == "nrt_dma_mem_alloc")
    assert json.loads(alloc["args"][V.ARG_DATA])["usage_type"] == "tensor"


def test_ring_buffer_drops_are_unknown_and_lone_halves_counted() -> None:
    cap = Capture(cores=1, epoch_hours=1, drift_ppm=10)
    cap.sync(0, cap.now)
    t = cap.now + 1_000
    for _ in range(5):
        t = cap.execute(tid=PROFILED, core=0, start=t, device_dur=10_000) + 1_000
    cap.sync(0, t)
    payload = cap.fetch(drop_oldest=4)  # the sync point and the first call's start... lost
    events = json.loads(payload)["events"]
    halves: Counter = Counter()
    for e in events:
        if e["phase"] in ("start", "stop") and e["event_type"] != "timestamp_sync_point":
            halves[(e["event_type"], e["tracking_id"])] += 1
    lone = sum(1 for n in halves.values() if n == 1)
    result = CS.build_session_result(
        payload,
        window=(0, 2**62),
        intervals=CS.Intervals.empty(),
        host_pid=HOST_PID,
        props=[],
        source_name="libnrt",
    )
    meta = {k: json.loads(v) for k, v in result.metadata.items()}
    assert lone > 0 and meta[V.META_UNPAIRED] == lone
    assert meta[V.META_DROPPED] == V.DROPS_UNKNOWN  # never "0 dropped"
