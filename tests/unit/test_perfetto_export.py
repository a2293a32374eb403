"""Perfetto export on hand-built traces, decoded with perfetto's own protos: track hierarchy,
nesting, flows, counters, args, sequence flags, counts in == out; the wire encoder against
protobuf's own serialiser; ``neuron-prof export`` to .pftrace."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace as PbTrace
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket, TrackEvent
from perfetto_checks import decode_and_check

from neuron_profiler.analysis.counters import device_counters
from neuron_profiler.exporters import _protowire as W
from neuron_profiler.exporters.chrome import write_chrome_trace
from neuron_profiler.exporters.perfetto import SYNTHETIC_PID_BASE, write_perfetto_trace
from neuron_profiler.trace import EventKind, Phase, TraceBuilder, load_trace

T0 = 1_700_000_000_000_000_000
HOST = 4321


def _training_step() -> TraceBuilder:
    """Host op -> runtime call (flow) -> kernel on NeuronCore 0, plus a DMA and a collective."""
    b = TraceBuilder()
    b.process_names.update({HOST: "python", 0: "NeuronCore 0"})
    b.thread_names.update({(HOST, HOST): "main", (0, 0): "compute", (0, 1): "DMA"})
    b.add(
        name="ProfilerStep#1",
        ts_ns=T0,
        dur_ns=10_000,
        kind=EventKind.USER_ANNOTATION,
        cat="user_annotation",
        pid=HOST,
        tid=HOST,
    )
    b.add(
        name="aten::mm",
        ts_ns=T0 + 100,
        dur_ns=2_000,
        kind=EventKind.CPU_OP,
        cat="cpu_op",
        pid=HOST,
        tid=HOST,
        args={
            "External id": 5,
            "Input Dims": [[4, 8], [8, 2]],
            "Input type": ["float", "float"],
            "Sequence number": 3,
        },
    )
    b.add(
        name="nrt_execute",
        ts_ns=T0 + 200,
        dur_ns=500,
        kind=EventKind.RUNTIME,
        cat="privateuse1_runtime",
        pid=HOST,
        tid=HOST,
        args={"correlation": 11},
    )
    b.add(
        name="ac2g",
        ts_ns=T0 + 200,
        ph=Phase.FLOW_START,
        kind=EventKind.FLOW,
        cat="ac2g",
        pid=HOST,
        tid=HOST,
        flow_id=11,
    )
    b.add(
        name="mm_kernel",
        ts_ns=T0 + 3_000,
        dur_ns=4_000,
        kind=EventKind.KERNEL,
        cat="kernel",
        pid=0,
        tid=0,
        args={"correlation": 11, "flops": 128, "emulated": True, "achieved TFLOPS": 0.5},
    )
    b.add(
        name="ac2g",
        ts_ns=T0 + 3_000,
        ph=Phase.FLOW_END,
        kind=EventKind.FLOW,
        cat="ac2g",
        pid=0,
        tid=0,
        flow_id=11,
    )
    b.add(
        name="copy",
        ts_ns=T0 + 1_000,
        dur_ns=1_000,
        kind=EventKind.MEMCPY,
        cat="gpu_memcpy",
        pid=0,
        tid=1,
        args={"bytes": 4096, "direction": "HtoD"},
    )
    b.add(
        name="marker",
        ts_ns=T0 + 500,
        ph=Phase.INSTANT,
        kind=EventKind.CPU_INSTANT,
        cat="cpu_instant_event",
        pid=HOST,
        tid=HOST,
    )
    return b


def _complete_events(trace) -> Counter:
    rows = trace.select(ph=Phase.COMPLETE)
    return Counter(
        (
            trace.name(r),
            int(trace.col("ts_ns")[r]),
            int(trace.col("ts_ns")[r] + trace.col("dur_ns")[r]),
        )
        for r in rows
        if trace.col("dur_ns")[r] > 0
    )


def test_training_step_round_trip(tmp_path: Path) -> None:
    trace = _training_step().build()
    result = write_perfetto_trace(trace, tmp_path / "t.pftrace")
    d = decode_and_check(result.path)
    assert Counter((n, s, e) for _, n, _, s, e in d.slices) == _complete_events(trace)
    assert [(n, ts) for _, n, _, ts in d.instants] == [("marker", T0 + 500)]
    assert (result.slices, result.instants, result.flows) == (5, 1, 1)
    assert result.bytes_written == (tmp_path / "t.pftrace").stat().st_size
    assert result.packets == len(PbTrace.FromString(result.path.read_bytes()).packet)
    host = d.track_named("python")
    assert host.process.pid == HOST
    main = d.track_named("main")
    assert (main.thread.pid, main.thread.tid, main.parent_uuid) == (HOST, HOST, host.uuid)
    core = d.track_named("NeuronCore 0")
    assert core.process.pid >= SYNTHETIC_PID_BASE  # device 0 never becomes Linux pid 0
    assert d.track_named("compute").parent_uuid == core.uuid
    assert d.track_named("DMA").parent_uuid == core.uuid
    # categories travel interned with the names
    assert {(n, c) for _, n, c, _, _ in d.slices} >= {
        ("aten::mm", "cpu_op"),
        ("mm_kernel", "kernel"),
    }


def test_flow_from_runtime_call_to_kernel(tmp_path: Path) -> None:
    trace = _training_step().build()
    d = decode_and_check(write_perfetto_trace(trace, tmp_path / "t.pftrace").path)
    ((flow_id, ends),) = d.flows.items()
    assert sorted((name, term) for _, name, term in ends) == [
        ("mm_kernel", True),
        ("nrt_execute", False),
    ]


def test_args_become_annotations(tmp_path: Path) -> None:
    trace = _training_step().build()
    d = decode_and_check(write_perfetto_trace(trace, tmp_path / "t.pftrace").path)
    mm = next(v for (_, name, _), v in d.args.items() if name == "aten::mm")
    assert mm["External id"] == 5 and mm["Sequence number"] == 3
    assert json.loads(mm["Input Dims"]) == [[4, 8], [8, 2]]  # lists kept as JSON text
    kernel = next(v for (_, name, _), v in d.args.items() if name == "mm_kernel")
    assert kernel == {"correlation": 11, "flops": 128, "emulated": True, "achieved TFLOPS": 0.5}
    no_args = write_perfetto_trace(trace, tmp_path / "bare.pftrace", args=False)
    assert decode_and_check(no_args.path).args == {}


def test_counter_tracks_equal_hand_computation(tmp_path: Path) -> None:
    b = _training_step()
    trace = b.build()
    counters = device_counters(trace, bin_ns=2_000)
    d = decode_and_check(
        write_perfetto_trace(trace, tmp_path / "t.pftrace", counters=counters).path
    )
    by_name = {d.tracks[u].name: pts for u, pts in d.counters.items()}
    # device work: copy [1000, 2000) on DMA, kernel [3000, 7000) on compute: the grid starts
    # at T0+1000 with 3 bins of 2000 ns; a counter is written where its value changes, and 0
    # where the grid ends
    g = T0 + 1_000
    assert by_name["compute busy %"] == [(g, 0.0), (g + 2_000, 100.0), (g + 6_000, 0.0)]
    assert by_name["DMA busy %"] == [(g, 50.0), (g + 2_000, 0.0)]
    assert by_name["busy %"] == [(g, 50.0), (g + 2_000, 100.0), (g + 6_000, 0.0)]
    assert by_name["DMA bandwidth (GB/s)"] == [(g, 4096 / 2_000), (g + 2_000, 0.0)]
    core = d.track_named("NeuronCore 0").uuid
    assert all(d.tracks[u].parent_uuid == core for u in d.counters)


def test_overlapping_work_goes_to_sibling_tracks(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.thread_names[(HOST, 9)] = "worker"
    for name, start, dur in (
        ("a", 0, 100),
        ("b", 50, 100),
        ("c", 60, 20),
        ("d", 120, 10),
        ("e", 0, 100),
        ("z", 100, 50),
    ):
        b.add(
            name=name,
            ts_ns=T0 + start,
            dur_ns=dur,
            kind=EventKind.CPU_OP,
            cat="cpu_op",
            pid=HOST,
            tid=9,
        )
    trace = b.build()
    result = write_perfetto_trace(trace, tmp_path / "o.pftrace")
    d = decode_and_check(result.path)  # asserts every begin/end nests on its track
    assert Counter((n, s, e) for _, n, _, s, e in d.slices) == _complete_events(trace)
    assert result.overlap_tracks >= 1
    worker = d.track_named("worker")
    siblings = [t for t in d.tracks.values() if t.name.startswith("worker (overlap")]
    assert len(siblings) == result.overlap_tracks
    assert all(t.parent_uuid == worker.parent_uuid for t in siblings)  # siblings, not children
    on_main = {n for u, n, _, _, _ in d.slices if u == worker.uuid}
    assert {"a", "z"} <= on_main  # the first of a crossing pair and adjacent work stay put


def test_pathological_overlap_staircase(tmp_path: Path) -> None:
    """300 slices each crossing the next: many sibling tracks, still well nested."""
    b = TraceBuilder()
    for i in range(300):
        b.add(
            name=f"s{i}",
            ts_ns=T0 + i * 10,
            dur_ns=1_000,
            kind=EventKind.KERNEL,
            cat="kernel",
            pid=0,
            tid=3,
        )
    trace = b.build()
    result = write_perfetto_trace(trace, tmp_path / "s.pftrace")
    d = decode_and_check(result.path)
    assert Counter((n, s, e) for _, n, _, s, e in d.slices) == _complete_events(trace)
    assert result.overlap_tracks >= 99  # at most 100 of them are open at once: >= 100 lanes


def test_random_overlaps_many_chunks(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    b = TraceBuilder()
    expected = Counter()
    for i in range(4000):
        pid, tid = (HOST, int(rng.integers(1, 4))) if i % 3 else (int(rng.integers(0, 2)), 7)
        start, dur = int(rng.integers(0, 200_000)), int(rng.integers(0, 3_000))
        kind = EventKind.CPU_OP if pid == HOST else EventKind.KERNEL
        b.add(
            name=f"op{i % 50}", ts_ns=T0 + start, dur_ns=dur, kind=kind, cat="x", pid=pid, tid=tid
        )
        if dur:
            expected[(f"op{i % 50}", T0 + start, T0 + start + dur)] += 1
    trace = b.build()
    result = write_perfetto_trace(trace, tmp_path / "r.pftrace", chunk_packets=997)
    d = decode_and_check(result.path)
    assert Counter((n, s, e) for _, n, _, s, e in d.slices) == expected
    assert len(d.slices) + len(d.instants) == len(trace) == result.slices + result.instants


def test_same_bytes_inline_or_with_one_or_two_encoder_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from neuron_profiler.exporters import perfetto

    b = _training_step()
    for i in range(3000):  # enough packets for several chunks
        b.add(
            name=f"op{i % 7}",
            ts_ns=T0 + 20_000 + i * 10,
            dur_ns=5,
            kind=EventKind.CPU_OP,
            cat="cpu_op",
            pid=HOST,
            tid=HOST,
            args={"i": i, "s": f"x{i % 5}"},
        )
    trace = b.build()
    outputs = []
    for threads in (0, 1, 2):  # 0: inline, no worker thread
        monkeypatch.setattr(perfetto, "ENCODE_THREADS", threads)
        path = write_perfetto_trace(trace, tmp_path / f"{threads}.pftrace", chunk_packets=500).path
        outputs.append(path.read_bytes())
    assert outputs[0] == outputs[1] == outputs[2]
    assert len(decode_and_check(tmp_path / "2.pftrace").args) == 3000 + 4


def test_sequence_flags_and_interning(tmp_path: Path) -> None:
    path = write_perfetto_trace(_training_step().build(), tmp_path / "t.pftrace").path
    packets = PbTrace.FromString(path.read_bytes()).packet
    cleared = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    needs = TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
    assert packets[0].sequence_flags == cleared | needs
    assert sum(1 for p in packets if p.sequence_flags & cleared) == 1
    events = [p.track_event for p in packets if p.HasField("track_event")]
    begins = [e for e in events if e.type == TrackEvent.TYPE_SLICE_BEGIN]
    assert begins and all(e.name_iid and not e.name for e in begins)  # names only by iid
    assert all(p.sequence_flags == needs for p in packets if p.HasField("track_event"))


def test_skipped_events_are_counted(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.add(name="ok", ts_ns=T0, dur_ns=10, pid=HOST, tid=1)
    b.add(name="neg", ts_ns=T0, dur_ns=-5, pid=HOST, tid=1)
    b.add(name="open", ts_ns=T0, ph=Phase.BEGIN, pid=HOST, tid=1)
    b.add(name="orphan", ts_ns=T0 + 2, ph=Phase.FLOW_START, cat="ac2g", pid=HOST, tid=1, flow_id=99)
    b.add(name="lost", ts_ns=T0 + 50, ph=Phase.FLOW_START, cat="ac2g", pid=HOST, tid=1, flow_id=5)
    b.add(name="lost", ts_ns=T0 + 60, ph=Phase.FLOW_END, cat="ac2g", pid=HOST, tid=2, flow_id=5)
    result = write_perfetto_trace(b.build(), tmp_path / "s.pftrace")
    assert result.skipped == {"negative duration": 1, "unpaired begin/end": 1}
    assert result.orphan_flow_endpoints == 1  # id 99 has no other end in the trace
    assert result.unbound_flow_endpoints == 2  # id 5: no slice encloses either end
    assert result.flows == 0 and result.slices == 1
    decode_and_check(result.path)


def test_absurd_time_span(tmp_path: Path) -> None:
    """A stray event near the epoch next to real ones (seen in broken traces) still exports."""
    b = TraceBuilder()
    for tid in range(3):
        b.add(
            name="early",
            ts_ns=10 + tid,
            dur_ns=100,
            kind=EventKind.KERNEL,
            cat="kernel",
            pid=0,
            tid=tid,
        )
        b.add(
            name="late",
            ts_ns=T0 + tid,
            dur_ns=100,
            kind=EventKind.KERNEL,
            cat="kernel",
            pid=0,
            tid=tid,
        )
    b.add(name="ac2g", ts_ns=T0 + 1, ph=Phase.FLOW_START, cat="ac2g", pid=0, tid=1, flow_id=1)
    b.add(name="ac2g", ts_ns=T0 + 2, ph=Phase.FLOW_END, cat="ac2g", pid=0, tid=2, flow_id=1)
    trace = b.build()
    result = write_perfetto_trace(trace, tmp_path / "a.pftrace")
    d = decode_and_check(result.path)
    assert Counter((n, s, e) for _, n, _, s, e in d.slices) == _complete_events(trace)
    assert result.flows == 1


def test_empty_trace(tmp_path: Path) -> None:
    result = write_perfetto_trace(TraceBuilder().build(), tmp_path / "e.pftrace")
    d = decode_and_check(result.path)
    assert d.slices == [] and result.packets >= 1


def test_string_pids_and_tids_name_their_tracks(tmp_path: Path) -> None:
    """Kineto's string pids/tids ("Spans", "Traces") name their tracks when no M event does,
    the empty one ("") says what it is; numbers without a name keep "process N" / "thread N";
    M names still win. (Kineto writes its two markers with ``"s":"g"``, which puts them on
    the global track: here they are thread-scoped, to land on the tracks named.)"""
    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "PyTorch Profiler (0)",
            "pid": "Spans",
            "tid": "PyTorch Profiler",
            "ts": 1,
            "dur": 50,
        },
        {
            "ph": "i",
            "s": "t",
            "name": "Iteration Start",
            "pid": "Traces",
            "tid": "Trace PyTorch Profiler",
            "ts": 1,
        },
        {"ph": "i", "name": "Record Window End", "pid": "", "tid": "", "ts": 60},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 9, "tid": 3, "ts": 2, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 8, "tid": "w", "ts": 2, "dur": 5},
        {"ph": "M", "name": "process_name", "pid": 8, "tid": 0, "args": {"name": "named"}},
        {"ph": "M", "name": "thread_name", "pid": 8, "tid": "w", "args": {"name": "worker"}},
    ]
    src = tmp_path / "in.json"
    src.write_text(json.dumps({"baseTimeNanoseconds": 10**18, "traceEvents": events}))
    d = decode_and_check(write_perfetto_trace(load_trace(src), tmp_path / "o.pftrace").path)
    processes = {t.process.process_name: t for t in d.tracks.values() if t.HasField("process")}
    assert set(processes) == {"Spans", "Traces", UNNAMED_PROCESS, "process 9", "named"}
    assert processes["Spans"].description == 'Chrome trace pid "Spans"'
    children = {
        (
            d.tracks[t.parent_uuid].process.process_name,
            t.thread.thread_name if t.HasField("thread") else t.name,
        )
        for t in d.tracks.values()
        if t.parent_uuid
    }
    assert children == {
        ("Spans", "PyTorch Profiler"),
        ("Traces", "Trace PyTorch Profiler"),
        (UNNAMED_PROCESS, UNNAMED_THREAD),
        ("process 9", "thread 3"),
        ("named", "worker"),
    }


UNNAMED_PROCESS = '(unnamed process, pid "")'
UNNAMED_THREAD = '(unnamed thread, tid "")'


def test_the_empty_string_pid_is_a_named_process_and_stays_in_chrome_json(
    tmp_path: Path,
) -> None:
    """Kineto writes its "Record Window End" marker with ``"pid": "", "tid": ""`` (every
    shared CUDA trace has one): the .pftrace names that process and thread for what they are,
    not ``""``, keeps what is on them there (Kineto's own marker is ``"s":"g"``, global: see
    ``test_instant_scopes_pick_global_process_or_thread_tracks``), and the Chrome JSON export
    keeps the row as it was."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 9, "tid": 3, "ts": 2, "dur": 5},
        {"ph": "i", "s": "t", "name": "Record Window End", "pid": "", "tid": "", "ts": 60},
    ]
    src = tmp_path / "in.json"
    src.write_text(json.dumps({"baseTimeNanoseconds": 10**18, "traceEvents": events}))
    trace = load_trace(src)
    d = decode_and_check(write_perfetto_trace(trace, tmp_path / "o.pftrace").path)
    processes = [t for t in d.tracks.values() if t.HasField("process")]
    names = sorted(t.process.process_name for t in processes)
    assert names == [UNNAMED_PROCESS, "process 9"]
    assert all(t.process.process_name.strip('"') for t in processes)  # no name is only quotes
    (empty,) = [t for t in processes if t.process.process_name == UNNAMED_PROCESS]
    assert empty.description == 'Chrome trace pid ""'
    (thread,) = [t for t in d.tracks.values() if t.parent_uuid == empty.uuid]
    assert thread.name == UNNAMED_THREAD  # a string tid: a named track, not a ThreadDescriptor
    assert [(t, n) for t, n, *_ in d.instants] == [(thread.uuid, "Record Window End")]
    rows = json.loads(write_chrome_trace(trace, tmp_path / "o.json").read_text())
    (marker,) = [e for e in rows["traceEvents"] if e.get("name") == "Record Window End"]
    assert marker["pid"] == "" and marker["tid"] == "" and marker["ph"] == "i"


@pytest.mark.parametrize(
    "values", [[0, 1, 127, 128, 300, 2**32, 2**63 - 1, 2**64 - 1], [-1, -(2**63), 5, -300]]
)
def test_wire_encoder_matches_protobuf(values: list[int]) -> None:
    """Two layouts (with / without a flow id), padded varints, a tail blob, interleaved back."""
    n = len(values)
    uuids = np.array(values, dtype=np.int64 if min(values) < 0 else np.uint64)
    doubles = np.linspace(-1.5, 2.5, n)
    tail = W.tag(10, W.WIRE_VARINT) + W.encode_varint(9) + W.tag(9, W.WIRE_VARINT) + b"\x01"
    layouts = []
    for index in (np.arange(0, n, 2), np.arange(1, n, 2)):
        te = W.FixedRows(len(index))
        te.varint(11, uuids[index])
        te.double(44, doubles[index])
        if index[0] == 0:
            te.fixed64(47, index.astype(np.uint64) * 7)
        te.tail(np.array([len(tail) if i == 1 else 0 for i in index]))  # name_iid 9, row 1
        packet = W.FixedRows(len(index))
        packet.varint(8, index * 1000 + T0)
        packet.message(11, te)
        framed = W.FixedRows(len(index))
        framed.message(1, packet)
        layouts.append((index, framed.matrix()))
    ours = PbTrace.FromString(W.interleave(layouts, n, (np.array([1]), [tail])))
    expected = PbTrace()
    for i, v in enumerate(values):
        p = expected.packet.add(timestamp=i * 1000 + T0)
        p.track_event.track_uuid = v % 2**64
        p.track_event.double_counter_value = float(doubles[i])
        if i % 2 == 0:
            p.track_event.flow_ids.append(i * 7)
        if i == 1:
            p.track_event.name_iid = 9
            p.track_event.type = TrackEvent.TYPE_SLICE_BEGIN
    assert ours == expected


def test_padded_varints_decode_to_their_values() -> None:
    """Every row of a padded column decodes (with perfetto's protos) to its own value."""
    rng = np.random.default_rng(5)
    for _ in range(200):
        base = int(rng.integers(0, 2**62))
        span = int(rng.integers(0, 2 ** int(rng.integers(1, 40))))
        values = np.array([base, base + span, base + span // 3, base + 1, 0, 127], dtype=np.uint64)
        rows = W.FixedRows(len(values))
        rows.varint(11, values)  # TrackEvent.track_uuid
        matrix = rows.matrix()  # one layout: every row has the same width
        decoded = [TrackEvent.FromString(row.tobytes()).track_uuid for row in matrix]
        assert decoded == values.tolist()


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "neuron_profiler.cli.main", *args], capture_output=True, text=True
    )


def test_cli_export_pftrace(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 2, "ts": i * 10, "dur": 5}
        for i in range(20)
    ]
    src = tmp_path / "in.json"
    src.write_text(json.dumps({"baseTimeNanoseconds": 10**18, "traceEvents": events}))
    out = tmp_path / "out.pftrace"
    result = _cli("export", str(src), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert len(decode_and_check(out).slices) == 20
    assert "20 slices" in result.stdout


def test_cli_rejects_unknown_extension(tmp_path: Path) -> None:
    src = tmp_path / "in.json"
    src.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1}]}))
    result = _cli("export", str(src), "-o", str(tmp_path / "out.txt"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "out.txt" in lines[0] and ".pftrace" in lines[0]


def test_cli_progress_bar_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from neuron_profiler.cli import export as export_cli

    monkeypatch.setattr(export_cli, "PROGRESS_MIN_EVENTS", 0)  # show the bar even here
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 2, "ts": i * 10, "dur": 5}
        for i in range(50)
    ]
    src = tmp_path / "in.json"
    src.write_text(json.dumps({"traceEvents": events}))
    for out in (tmp_path / "o.pftrace", tmp_path / "o.json.gz"):
        result = CliRunner().invoke(export_cli.export, [str(src), "-o", str(out)])
        assert result.exit_code == 0, result.output
        assert out.stat().st_size > 0
    assert len(decode_and_check(tmp_path / "o.pftrace").slices) == 50
    src.write_text(json.dumps({"traceEvents": [dict(e, args={"n": 1}) for e in events]}))
    for name, flags in (("with.pftrace", []), ("bare.pftrace", ["--no-args"])):
        result = CliRunner().invoke(
            export_cli.export, [str(src), "-o", str(tmp_path / name), *flags]
        )
        assert result.exit_code == 0, result.output
    assert len(decode_and_check(tmp_path / "with.pftrace").args) == 50
    assert decode_and_check(tmp_path / "bare.pftrace").args == {}
