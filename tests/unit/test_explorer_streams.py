"""``framework_stream_id`` links a runtime call that runs on a worker thread, with no flow id, to
the op of the framework thread that launched it (tests/explorer_fixture.py, ``streams=True``:
the generator knows that op, and the op containment on the call's own thread would find
instead); without the column, or with a value that names no thread, the call links as before;
odd values are counted, never fatal."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from explorer_fixture import HOST_TID, PID, RUNTIME_TID, STREAM_TID, build  # noqa: E402
from explorer_support import require_pyarrow  # noqa: E402

from neuron_profiler.runtime_trace.activities import ActivityKind  # noqa: E402
from neuron_profiler.trace import schema as S  # noqa: E402
from neuron_profiler.trace import vocabulary as V  # noqa: E402

EVENTS_FILE = "SystemProfileEvents.parquet"


@pytest.fixture(scope="module")
def streamed(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    require_pyarrow()
    fx = build(streams=True)
    return fx, fx.write(tmp_path_factory.mktemp("streamed"))


def _external_by_event(result) -> dict[int, int]:  # noqa: ANN001
    placed = result.merge.placed
    main = placed.kind != ActivityKind.GRAPH_OP
    ids = result.converted.event_row[placed.activity[main]] + 1  # event ids count rows from 1
    return dict(zip(ids.tolist(), placed.external_id[main].tolist(), strict=True))


def _alone(directory: Path):  # noqa: ANN202
    from neuron_profiler.explorer.profile_trace import profile_trace
    from neuron_profiler.explorer.reader import read_profile

    return profile_trace(read_profile(directory))


def _stream_meta(result) -> dict[str, int]:  # noqa: ANN001
    meta = result.trace.metadata[V.META_EXPLORER]
    return {k: v for k, v in meta.items() if k.startswith("framework_stream_")}


def test_a_streamed_call_links_to_the_op_of_the_thread_that_launched_it(streamed) -> None:  # noqa: ANN001
    fx, directory = streamed
    res = _alone(directory)
    got = _external_by_event(res)
    assert len(fx.truth.streamed) == 285  # every other tensor call of 585
    want = {e: x for e, x in fx.truth.external.items() if e in got}
    assert {e: got[e] for e in want} == want  # the streamed calls' copies follow their call
    # the decoy op on the calls' own thread is not where they link
    assert all(got[e] != fx.truth.own_thread[e] for e in fx.truth.streamed)
    assert _stream_meta(res) == {
        "framework_stream_linked": 285,
        "framework_stream_not_an_integer": 0,
        "framework_stream_unknown_thread": 0,
        "framework_stream_not_in_host_trace": 0,
        "framework_stream_no_op_around": 0,
    }


def test_a_streamed_call_stays_on_its_own_thread(streamed) -> None:  # noqa: ANN001
    """The libnrt path lays a runtime call on the thread it ran on; so does this one."""
    fx, directory = streamed
    res = _alone(directory)
    placed = res.merge.placed
    rows = {e: i for i, e in enumerate((res.converted.event_row[placed.activity] + 1).tolist())}
    for e in fx.truth.streamed:
        assert (placed.pid[rows[e]], placed.tid[rows[e]]) == (PID, STREAM_TID)


def _without_stream_column(src: Path, dst: Path) -> Path:
    import pyarrow.parquet as pq

    dst.mkdir()
    for f in src.iterdir():
        table = pq.read_table(f)
        if f.name == EVENTS_FILE:
            table = table.drop_columns(["framework_stream_id"])
        pq.write_table(table, dst / f.name)
    return dst


def test_without_the_column_calls_link_on_their_own_thread_as_before(streamed, tmp_path) -> None:  # noqa: ANN001
    fx, directory = streamed
    res = _alone(_without_stream_column(directory, tmp_path / "p"))
    got = _external_by_event(res)
    want = {e: fx.truth.own_thread.get(e, x) for e, x in fx.truth.external.items() if e in got}
    assert {e: got[e] for e in want} == want
    assert _stream_meta(res)["framework_stream_linked"] == 0
    assert res.trace.metadata[V.META_MALFORMED] == 0


def test_odd_stream_values_are_counted_and_link_as_without_them(tmp_path) -> None:
    require_pyarrow()
    fx = build(executions=2, streams=True)
    calls = fx.truth.streamed
    values = {
        calls[0]: "x42",  # not an integer
        calls[1]: "-3",  # not a thread id
        calls[2]: "9" * 20,  # beyond int64
        calls[3]: "777777",  # no such thread
        calls[4]: str(RUNTIME_TID),  # a runtime thread: no framework op
        calls[5]: "",  # absent
    }
    for e, v in values.items():
        fx.events[e - 1]["framework_stream_id"] = v
    res = _alone(fx.write(tmp_path / "p"))
    got = _external_by_event(res)
    for e in calls:
        want = fx.truth.own_thread[e] if e in values else fx.truth.external[e]
        assert got[e] == want, e
    assert _stream_meta(res) == {
        "framework_stream_linked": len(calls) - 6,
        "framework_stream_not_an_integer": 3,
        "framework_stream_unknown_thread": 2,
        "framework_stream_not_in_host_trace": 0,
        "framework_stream_no_op_around": 0,
    }
    assert res.trace.metadata[V.META_MALFORMED] == 3


def _host_trace(fx, pid: int):  # noqa: ANN001, ANN202
    """The profile's framework ops as torch.profiler recorded them (ids 50,000 + k), on their
    own threads, in process ``pid``."""
    from neuron_profiler.trace.model import TraceBuilder

    b = TraceBuilder("host.json")
    host_id = {}
    for k, eid in enumerate(fx.truth.framework_ids):
        ev = fx.events[eid - 1]
        host_id[fx.truth.external[eid]] = 50_000 + k
        b.add(
            name=ev["name"],
            ts_ns=ev["start_ts"],
            dur_ns=ev["end_ts"] - ev["start_ts"],
            kind=S.EventKind.CPU_OP,
            cat="cpu_op",
            pid=pid,
            tid=ev["thread_id"],
            args={"External id": 50_000 + k},
        )
    return b.build(), host_id


def test_on_a_host_trace_the_stream_names_the_thread_of_equal_pid_and_tid(streamed) -> None:  # noqa: ANN001
    from neuron_profiler.explorer.profile_trace import merge_profile
    from neuron_profiler.explorer.reader import read_profile

    fx, directory = streamed
    host, host_id = _host_trace(fx, PID)
    res = merge_profile(host, read_profile(directory))
    got = _external_by_event(res)
    want = {e: host_id[x] for e, x in fx.truth.external.items() if e in got}
    assert {e: got[e] for e in want} == want
    assert _stream_meta(res)["framework_stream_linked"] == 285


def test_on_a_host_trace_of_another_process_the_stream_is_counted(streamed) -> None:  # noqa: ANN001
    """Same tids, other pid: the stream's thread is not the host trace's; the calls link as
    without the column (the host trace's ops are matched by thread, as the merge does)."""
    from neuron_profiler.explorer.profile_trace import merge_profile
    from neuron_profiler.explorer.reader import read_profile

    fx, directory = streamed
    host, host_id = _host_trace(fx, PID + 1)
    res = merge_profile(host, read_profile(directory))
    got = _external_by_event(res)
    assert {e: got[e] for e in fx.truth.streamed} == {
        e: host_id[fx.truth.own_thread[e]] for e in fx.truth.streamed
    }
    meta = _stream_meta(res)
    assert meta["framework_stream_linked"] == 0
    assert meta["framework_stream_not_in_host_trace"] == 285


# -- the rule on hand-made columns ----------------------------------------------------------------
def _columns(rows: list[tuple[str, int, int, int, int, str]]):  # noqa: ANN202
    """(instance, pid, tid, start, end, stream) per event."""
    from neuron_profiler.explorer.columns import EventColumns

    n = len(rows)
    inst, pid, tid, start, end, stream = (list(c) for c in zip(*rows, strict=True))
    instances = sorted(set(inst))
    streams = sorted(set(stream))
    ints = lambda xs: np.asarray(xs, dtype=np.int64)  # noqa: E731
    minus = np.full(n, -1, dtype=np.int64)
    return EventColumns(
        start_ns=ints(start),
        end_ns=ints(end),
        source=np.zeros(n, dtype=np.int8),
        name_code=np.zeros(n, dtype=np.int64),
        names=["e"],
        instance_code=ints([instances.index(i) for i in inst]),
        instances=instances,
        process_id=ints(pid),
        thread_id=ints(tid),
        nc_idx=minus,
        pcore_idx=minus,
        worker_gid=minus,
        flow_row=np.zeros(0, dtype=np.int64),
        flow_value=np.zeros(0, dtype=np.int64),
        exec_id=minus,
        seq_id=minus,
        op_id=minus,
        attributes=[b"{}"] * n,
        stream_code=ints([streams.index(s) for s in stream]),
        streams=streams,
    )


def test_the_rule_by_hand() -> None:
    """Ops: rows 0-2 (framework, instance a: thread 7 [100, 200] id 11 and [120, 150] id 12;
    instance b: thread 7 [100, 200] id 13). Rows 3-8 are runtime events, worked by hand."""
    from neuron_profiler.explorer.streams import ThreadOps, link_by_stream

    ev = _columns(
        [
            ("a", 1, 7, 100, 200, "7"),
            ("a", 1, 7, 120, 150, "7"),
            ("b", 1, 7, 100, 200, "7"),
            ("a", 1, 9, 130, 131, "7"),  # inside both ops of a/7: the inner one, 12
            ("b", 1, 9, 160, 161, "7"),  # instance b's thread 7: 13 (not a's)
            ("a", 1, 9, 300, 301, "7"),  # known thread, no op around: counted
            ("a", 2, 9, 130, 131, "7"),  # pid 2 has no thread 7: unknown
            ("a", 1, 9, 130, 131, "7"),  # already linked (a flow): left alone
            ("a", 1, 9, 130, 131, "7"),  # device work: not host-side
        ]
    )
    fw = np.array([0, 1, 2])
    framework = ThreadOps.of_framework(ev, fw, np.array([11, 12, 13]))
    rows = np.arange(3, 9)
    host_side = np.array([True, True, True, True, True, False])
    corr = np.array([0, 0, 0, 0, 5, 0])
    out, counts = link_by_stream(ev, rows, host_side, corr, framework, framework)
    assert out.tolist() == [12, 13, 0, 0, 5, 0]
    assert (counts.linked, counts.no_op_around, counts.unknown_thread) == (2, 1, 1)
    assert (counts.not_in_host_trace, counts.not_an_integer) == (0, 0)


def test_host_ops_match_on_pid_and_tid_without_instance() -> None:
    from neuron_profiler.explorer.streams import ThreadOps, link_by_stream
    from neuron_profiler.runtime_trace.placement import HostOps

    ev = _columns(
        [
            ("a", 1, 7, 100, 200, "7"),  # the profile's framework op
            ("a", 1, 9, 130, 131, "7"),  # -> host op of pid 1, tid 7: 21
            ("b", 1, 9, 130, 131, "7"),  # instance b: same pid and tid on the host: 21
            ("a", 2, 9, 130, 131, "7"),  # pid 2: no framework thread, no host thread
            ("a", 1, 9, 130, 131, "8"),  # tid 8: a host thread, not a framework one: 22
        ]
    )
    i64 = lambda xs: np.asarray(xs, dtype=np.int64)  # noqa: E731
    host = HostOps(i64([7, 8]), i64([100, 100]), i64([200, 200]), i64([21, 22]), pid=i64([1, 1]))
    framework = ThreadOps.of_framework(ev, np.array([0]), np.array([1]))
    rows = np.arange(1, 5)
    out, counts = link_by_stream(
        ev, rows, np.ones(4, bool), np.zeros(4, np.int64), ThreadOps.of_host(host), framework
    )
    assert out.tolist() == [21, 21, 0, 22]
    assert (counts.linked, counts.unknown_thread, counts.not_in_host_trace) == (3, 1, 0)


def test_a_framework_thread_missing_from_the_host_trace_is_counted() -> None:
    from neuron_profiler.explorer.streams import ThreadOps, link_by_stream
    from neuron_profiler.runtime_trace.placement import HostOps

    ev = _columns([("a", 1, HOST_TID, 100, 200, ""), ("a", 1, 9, 130, 131, str(HOST_TID))])
    i64 = lambda xs: np.asarray(xs, dtype=np.int64)  # noqa: E731
    host = HostOps(i64([HOST_TID]), i64([100]), i64([200]), i64([21]), pid=i64([2]))
    framework = ThreadOps.of_framework(ev, np.array([0]), np.array([1]))
    out, counts = link_by_stream(
        ev,
        np.array([1]),
        np.ones(1, bool),
        np.zeros(1, np.int64),
        ThreadOps.of_host(host),
        framework,
    )
    assert out.tolist() == [0]
    assert (counts.not_in_host_trace, counts.unknown_thread, counts.linked) == (1, 0, 0)
