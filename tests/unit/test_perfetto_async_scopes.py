"""Perfetto export of what Kineto rarely writes but the Trace Event Format has: nestable async
events (b/e/n) on async tracks, instant scopes (g / p / t), counter values written as text.

Expectations come from the input JSON itself (a plain stack walk per async tree, the spec's
rules), and the .pftrace is decoded with perfetto's own protos (``perfetto_checks``)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace as PbTrace
from perfetto_checks import Decoded, decode_and_check

from neuron_profiler.exporters import write_trace
from neuron_profiler.exporters._async import pair_nested
from neuron_profiler.exporters.chrome import write_chrome_trace
from neuron_profiler.exporters.perfetto import write_perfetto_trace
from neuron_profiler.trace import load_trace

BASE_NS = 1_700_000_000_000_000_000


def _load(tmp_path: Path, events: list[dict[str, Any]], name: str = "in.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"baseTimeNanoseconds": BASE_NS, "traceEvents": events}))
    return path


def _ns(us: float) -> int:
    return BASE_NS + round(us * 1000)


def _process_of(d: Decoded, uuid: int) -> str:
    """The Chrome pid (as its process track's description spells it) a track lies under."""
    desc = d.tracks[uuid]
    while not desc.HasField("process"):
        desc = d.tracks[desc.parent_uuid]
    return desc.description.removeprefix("Chrome trace pid ")


def _expected_async(events: list[dict[str, Any]]) -> tuple[Counter, Counter, int]:
    """The spec's reading, event by event: one tree per (cat, id), an ``id2`` object read as
    the id when there is none, its "local" ids one tree per process; in time order (file
    order breaks ties) each e closes the latest open b of its name in that tree. Returns the
    slices (name, start, end, pid of the b, cat, id as JSON), the instants (``n`` events, and
    pairs at one time) and the count of b/e left unpaired."""
    stacks: dict[tuple, list] = {}
    slices: Counter = Counter()
    instants: Counter = Counter()
    unpaired = 0
    order = sorted(
        (i for i, e in enumerate(events) if e["ph"] in "bne" and ("id" in e or "id2" in e)),
        key=lambda i: (events[i]["ts"], i),
    )
    for i in order:
        e = events[i]
        key = (e.get("cat", ""), json.dumps(e["id"] if "id" in e else e["id2"]))
        tree = key + (e["name"], e["pid"] if "local" in e.get("id2", {}) else None)
        if e["ph"] == "n":
            instants[(e["name"], _ns(e["ts"]), str(e["pid"]), *key)] += 1
        elif e["ph"] == "b":
            stacks.setdefault(tree, []).append(e)
        elif stacks.get(tree):
            b = stacks[tree].pop()
            start, end = _ns(b["ts"]), _ns(e["ts"])
            target = slices if end > start else instants
            row = (b["name"], start, end, str(b["pid"]), *key)
            target[row if end > start else row[:2] + row[3:]] += 1
        else:
            unpaired += 1
    return slices, instants, unpaired + sum(len(s) for s in stacks.values())


def _async_track_key(d: Decoded, uuid: int) -> tuple[str, str]:
    """(cat, id as JSON) from an async track's description: 'async events, cat "c", id 5'
    ('id2 {"local":"0x2"}' for an id2: then the JSON of that object)."""
    text = d.tracks[uuid].description.removeprefix("async events, cat ")
    cat, _, the_id = text.partition(", ")
    kind, _, value = the_id.partition(" ")
    return json.loads(cat), value if kind == "id" else json.dumps(json.loads(value))


ASYNC_EVENTS: list[dict[str, Any]] = [
    {"ph": "X", "cat": "cpu_op", "name": "host", "pid": 1, "tid": 1, "ts": 0, "dur": 200},
    # one tree (cat "net", int id 7): nested, then a child that outlives its parent (crossing)
    {"ph": "b", "cat": "net", "name": "request", "id": 7, "pid": 1, "tid": 1, "ts": 10},
    {
        "ph": "b",
        "cat": "net",
        "name": "dns",
        "id": 7,
        "pid": 1,
        "tid": 2,
        "ts": 12,
        "args": {"q": 1},
    },
    {"ph": "n", "cat": "net", "name": "sent", "id": 7, "pid": 1, "tid": 3, "ts": 13},
    {
        "ph": "e",
        "cat": "net",
        "name": "dns",
        "id": 7,
        "pid": 1,
        "tid": 1,
        "ts": 15,
        "args": {"r": 2},
    },
    {"ph": "b", "cat": "net", "name": "read", "id": 7, "pid": 1, "tid": 1, "ts": 40},
    {"ph": "e", "cat": "net", "name": "request", "id": 7, "pid": 1, "tid": 1, "ts": 50},
    {"ph": "e", "cat": "net", "name": "read", "id": 7, "pid": 1, "tid": 1, "ts": 60},
    # same id, other category: another tree; same name twice nested in it
    {"ph": "b", "cat": "disk", "name": "io", "id": 7, "pid": 1, "tid": 1, "ts": 20},
    {"ph": "b", "cat": "disk", "name": "io", "id": 7, "pid": 1, "tid": 1, "ts": 21},
    {
        "ph": "e",
        "cat": "disk",
        "name": "io",
        "id": 7,
        "pid": 1,
        "tid": 1,
        "ts": 22,
        "args": {"x": 1},
    },
    {"ph": "e", "cat": "disk", "name": "io", "id": 7, "pid": 1, "tid": 1, "ts": 30},
    # text ids ("0x1", the spec's own spelling), two processes, a pair at one time
    {"ph": "b", "cat": "net", "name": "hex", "id": "0x1", "pid": 2, "tid": 5, "ts": 70},
    {"ph": "e", "cat": "net", "name": "hex", "id": "0x1", "pid": 2, "tid": 5, "ts": 90},
    {"ph": "b", "cat": "net", "name": "hex", "id": "0x1", "pid": 1, "tid": 5, "ts": 95},
    {"ph": "e", "cat": "net", "name": "hex", "id": "0x1", "pid": 1, "tid": 5, "ts": 99},
    {"ph": "b", "cat": "net", "name": "blink", "id": 8, "pid": 1, "tid": 1, "ts": 100},
    {"ph": "e", "cat": "net", "name": "blink", "id": 8, "pid": 1, "tid": 1, "ts": 100},
    # left out, counted: an end with nothing open, a begin never ended, an event without id
    {"ph": "e", "cat": "net", "name": "late", "id": 9, "pid": 1, "tid": 1, "ts": 110},
    {"ph": "b", "cat": "net", "name": "open", "id": 9, "pid": 1, "tid": 1, "ts": 120},
    {"ph": "b", "cat": "net", "name": "no id", "pid": 1, "tid": 1, "ts": 130},
    # id2: "local" ids name one tree per process, "global" ones one across processes
    {
        "ph": "b",
        "cat": "net",
        "name": "loc",
        "id2": {"local": "0x5"},
        "pid": 1,
        "tid": 1,
        "ts": 150,
    },
    {
        "ph": "b",
        "cat": "net",
        "name": "loc",
        "id2": {"local": "0x5"},
        "pid": 2,
        "tid": 1,
        "ts": 155,
    },
    {
        "ph": "e",
        "cat": "net",
        "name": "loc",
        "id2": {"local": "0x5"},
        "pid": 1,
        "tid": 1,
        "ts": 160,
    },
    {
        "ph": "e",
        "cat": "net",
        "name": "loc",
        "id2": {"local": "0x5"},
        "pid": 2,
        "tid": 1,
        "ts": 165,
    },
    {"ph": "b", "cat": "net", "name": "glo", "id2": {"global": 6}, "pid": 1, "tid": 1, "ts": 170},
    {"ph": "e", "cat": "net", "name": "glo", "id2": {"global": 6}, "pid": 2, "tid": 1, "ts": 175},
    # a legacy async letter the export does not draw: still "unknown phase"
    {"ph": "S", "cat": "net", "name": "legacy", "id": 3, "pid": 1, "tid": 1, "ts": 140},
    # a flow from the host slice to an instant on another thread: async slices sit between
    # the thread slices and the thread instants in the export's candidates
    {"ph": "i", "s": "t", "name": "tick", "pid": 1, "tid": 2, "ts": 190},
    {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 4, "pid": 1, "tid": 1, "ts": 5},
    {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 4, "pid": 1, "tid": 2, "ts": 190, "bp": "e"},
]


def test_async_events_become_slices_on_async_tracks(tmp_path: Path) -> None:
    trace = load_trace(_load(tmp_path, ASYNC_EVENTS))
    result = write_perfetto_trace(trace, tmp_path / "a.pftrace")
    d = decode_and_check(result.path)  # nesting per track, parents declared, interning
    want_slices, want_instants, unpaired = _expected_async(ASYNC_EVENTS)
    assert len(want_slices) == 10 and unpaired == 2  # (the reference itself)
    async_tracks = {u for u, t in d.tracks.items() if t.description.startswith("async events")}
    got_slices = Counter(
        (name, start, end, _process_of(d, track), *_async_track_key(d, track))
        for track, name, _, start, end in d.slices
        if track in async_tracks
    )
    assert got_slices == want_slices
    got_instants = Counter(
        (name, ts, _process_of(d, track), *_async_track_key(d, track))
        for track, name, _, ts in d.instants
        if track in async_tracks
    )
    assert got_instants == want_instants
    assert result.skipped == {
        "unpaired async begin/end": 2,
        "async event without id": 1,
        "unknown phase": 1,
    }
    # one track per (pid, cat, id), a child of its process; a crossing child on an overlap one
    keys = Counter((_process_of(d, u), *_async_track_key(d, u)) for u in async_tracks)
    assert keys[("1", "net", "7")] == 2 and keys[("1", "disk", "7")] == 1
    assert keys[("1", "net", '"0x1"')] == keys[("2", "net", '"0x1"')] == 1
    assert all(d.tracks[d.tracks[u].parent_uuid].HasField("process") for u in async_tracks)
    names = {d.tracks[u].name for u in async_tracks}
    assert {"request", "request (overlap 1)", "io", "hex", "blink"} <= names
    # the e's args where its b has none; the b's where both have some (the e's counted)
    assert [a for (_, n, _), a in d.args.items() if n == "io"] == [{"x": 1}]
    assert [a for (_, n, _), a in d.args.items() if n == "dns"] == [{"q": 1}]
    assert result.parts_left_out == {"args of async end events whose begin has args": 1}
    bare = write_perfetto_trace(trace, tmp_path / "bare.pftrace", args=False)
    assert bare.parts_left_out == {} and bare.skipped == result.skipped
    assert result.slices == 1 + 10 and result.instants == len(want_instants) + 1
    assert result.flows == 1
    bound = {name for (_, name, _), ids in d.slice_flows.items() if ids}
    assert bound == {"host", "tick"}


def test_async_text_ids_pair_after_a_chrome_round_trip(tmp_path: Path) -> None:
    """The tester's case: ``"0x1"`` ids survive load -> Chrome JSON -> load -> .pftrace."""
    original = load_trace(_load(tmp_path, ASYNC_EVENTS))
    again = load_trace(write_chrome_trace(original, tmp_path / "rt.json"))
    first = write_perfetto_trace(original, tmp_path / "1.pftrace")
    second = write_perfetto_trace(again, tmp_path / "2.pftrace")
    assert (first.slices, first.instants, first.skipped) == (
        second.slices,
        second.instants,
        second.skipped,
    )
    a, b = decode_and_check(first.path), decode_and_check(second.path)
    assert sorted(s[1:] for s in a.slices) == sorted(s[1:] for s in b.slices)
    assert sorted(s[3] - s[4] for s in b.slices if s[1] == "hex") == [-20_000, -4_000]


def test_pairing_matches_a_stack_walk() -> None:
    """The vectorised pairing against a plain stack walk on random sequences."""
    rng = np.random.default_rng(3)
    for _ in range(500):
        n = int(rng.integers(0, 40))
        group = np.sort(rng.integers(0, 4, n))
        is_begin = rng.random(n) < 0.55
        stacks: dict[int, list[int]] = {}
        want = []
        for i, (g, b) in enumerate(zip(group.tolist(), is_begin.tolist(), strict=True)):
            if b:
                stacks.setdefault(g, []).append(i)
            elif stacks.get(g):
                want.append((stacks[g].pop(), i))
        begins, ends = pair_nested(group, is_begin)
        assert sorted(zip(begins.tolist(), ends.tolist(), strict=True)) == sorted(want)


def test_instant_scopes_pick_global_process_or_thread_tracks(tmp_path: Path) -> None:
    """ "s":"g" -> one global track (no parent, whatever the pid: Kineto's two markers),
    "s":"p" -> the process track, "s":"t" or none -> the thread track."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 5, "tid": 6, "ts": 0, "dur": 100},
        {"ph": "i", "s": "g", "name": "Iteration Start", "pid": "Traces", "tid": "T", "ts": 1},
        {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 90},
        {"ph": "i", "s": "p", "name": "proc mark", "pid": 5, "tid": 6, "ts": 10},
        {"ph": "i", "s": "p", "name": "other proc", "pid": 9, "tid": 1, "ts": 11},
        {"ph": "i", "s": "t", "name": "thread mark", "pid": 5, "tid": 6, "ts": 12},
        {"ph": "I", "name": "default mark", "pid": 5, "tid": 6, "ts": 13},
    ]
    result = write_perfetto_trace(load_trace(_load(tmp_path, events)), tmp_path / "s.pftrace")
    d = decode_and_check(result.path)
    where = {name: d.tracks[track] for track, name, _, _ in d.instants}
    assert len(d.instants) == result.instants == 6
    for name in ("Iteration Start", "Record Window End"):
        assert not where[name].parent_uuid and not where[name].HasField("process")
    assert where["Iteration Start"].uuid == where["Record Window End"].uuid
    assert where["proc mark"].process.pid == 5
    assert where["other proc"].process.pid == 9
    for name in ("thread mark", "default mark"):
        assert (where[name].thread.pid, where[name].thread.tid) == (5, 6)
    processes = {t.process.pid for t in d.tracks.values() if t.HasField("process")}
    assert processes == {5, 9}  # global instants need no process track of their own


def test_counter_values_as_numeric_text_are_drawn_and_others_counted(tmp_path: Path) -> None:
    """As Perfetto's JSON importer does: ``"4"`` is 4; text that is no number, bools and
    objects are left out, and counted (never silently): per value, or per event when it had
    no numeric value at all."""
    events = [
        {"ph": "C", "name": "mem", "pid": 1, "ts": 100, "args": {"a": 1.5, "b": 2}},
        {"ph": "C", "name": "mem", "pid": 1, "ts": 150, "args": {"a": 3, "b": "4"}},
        {"ph": "C", "name": "mem", "pid": 1, "ts": 160, "args": {"a": "-2.5e1", "b": "lots"}},
        {"ph": "C", "name": "mem", "pid": 1, "ts": 170, "args": {"a": True, "b": [1]}},
        {"ph": "C", "name": "mem", "pid": 1, "ts": 180, "args": {"a": "", "b": "0x10"}},
    ]
    result = write_perfetto_trace(load_trace(_load(tmp_path, events)), tmp_path / "c.pftrace")
    d = decode_and_check(result.path)
    by_name = {d.tracks[u].name: points for u, points in d.counters.items()}
    assert by_name["mem a"] == [(_ns(100), 1.5), (_ns(150), 3.0), (_ns(160), -25.0)]
    assert by_name["mem b"] == [(_ns(100), 2.0), (_ns(150), 4.0)]
    assert result.skipped == {"counter without numeric value": 2}  # the events at 170, 180
    assert result.parts_left_out == {"counter value not numeric": 1}  # "lots" beside -2.5e1
    summary = write_trace(load_trace(_load(tmp_path, events)), tmp_path / "w.pftrace").summary
    assert "left out: 2 events: 2 counter without numeric value" in summary
    assert summary.endswith("; also left out of events written: 1 counter value not numeric)")


def test_same_packets_whatever_the_chunk_size(tmp_path: Path) -> None:
    """Async slices, async, scoped and thread instants and counters merged into the emission
    order: chunks of 2 packets give the TrackEvent packets one chunk gives (interned data
    packets fall between chunks, so the files differ there)."""
    events = [*ASYNC_EVENTS, {"ph": "i", "s": "g", "name": "g", "pid": 1, "tid": 1, "ts": 12}]
    events += [{"ph": "i", "s": "p", "name": "p", "pid": 2, "tid": 5, "ts": 80}]
    events += [{"ph": "C", "name": "c", "pid": 1, "ts": 15, "args": {"v": "3"}}]
    trace = load_trace(_load(tmp_path, events))
    one = write_perfetto_trace(trace, tmp_path / "one.pftrace", chunk_packets=1 << 20)
    small = write_perfetto_trace(trace, tmp_path / "small.pftrace", chunk_packets=2)
    assert _track_events(one.path) == _track_events(small.path)
    assert decode_and_check(small.path).instants == decode_and_check(one.path).instants


def _track_events(path: Path) -> list[Any]:
    return [p for p in PbTrace.FromString(path.read_bytes()).packet if p.HasField("track_event")]
