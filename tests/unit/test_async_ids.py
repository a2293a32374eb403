"""Ids of async events (``b``/``e``/``n``) and flows (``s``/``t``/``f``) as chrome://tracing
compares them: by their text (Catapult keys a tree by ``cat + ":" + id`` in JavaScript), so an
explicit ``-1`` is an id, ``3.0`` is ``3``, ``3.5`` is ``"3.5"``, ``true`` is ``"true"``, and
``2**64 - 1`` is kept (its digits), never read as the hex text ``"0xffffffffffffffff"``.

Expectations are written out by hand per case (which b pairs with which e), and the .pftrace
is decoded with perfetto's own protos (``perfetto_checks``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from perfetto_checks import decode_and_check

from neuron_profiler.exporters.chrome import write_chrome_trace
from neuron_profiler.exporters.perfetto import write_perfetto_trace
from neuron_profiler.trace import load_trace
from neuron_profiler.trace import schema as S

BASE_NS = 1_700_000_000_000_000_000
U64_MAX = 2**64 - 1


def _write(tmp_path: Path, events: list[dict[str, Any]]) -> Path:
    path = tmp_path / "in.json"
    path.write_text(json.dumps({"baseTimeNanoseconds": BASE_NS, "traceEvents": events}))
    return path


def _pair(name: str, begin: object, end: object, at: int) -> list[dict[str, Any]]:
    """A b at ``at`` µs and an e 1 µs later, named ``name``, with ids ``begin`` / ``end``."""
    event = {"cat": "c", "name": name, "pid": 1, "tid": 1}
    return [
        {**event, "ph": "b", "id": begin, "ts": at},
        {**event, "ph": "e", "id": end, "ts": at + 1},
    ]


CASES: list[tuple[str, object, object, bool]] = [  # (name, b's id, e's id, they pair)
    ("minus one", -1, -1, True),
    ("minus one as text", -1, "-1", True),
    ("minus five", -5, -5, True),
    ("integral float", 3, 3.0, True),
    ("integral float as text", 4.0, "4", True),
    ("fraction", 3.5, 3.5, True),
    ("fraction as text", 3.5, "3.5", True),
    ("fraction is not its floor", 5.5, 5, False),
    ("bool", True, True, True),
    ("bool as text", False, "false", True),
    ("bool is not one", True, 1, False),
    ("u64 max", U64_MAX, U64_MAX, True),
    ("u64 max as text", U64_MAX, str(U64_MAX), True),
    ("u64 max is not its hex text", U64_MAX, "0xffffffffffffffff", False),
    ("hex text pairs with itself", "0xffffffffffffffff", "0xffffffffffffffff", True),
    ("null is no id", None, None, False),
]


def _events() -> list[dict[str, Any]]:
    events = [{"ph": "X", "cat": "cpu_op", "name": "host", "pid": 1, "tid": 1, "ts": 0, "dur": 900}]
    for k, (name, begin, end, _) in enumerate(CASES):
        events += _pair(name, begin, end, 10 + 10 * k)
    events.append({"ph": "n", "cat": "c", "name": "no id", "pid": 1, "tid": 1, "ts": 800})
    return events


def _slices(path: Path) -> dict[str, tuple[int, str]]:
    """name -> (duration in ns, its async track's description) of each async slice."""
    d = decode_and_check(path)
    return {
        name: (end - start, d.tracks[track].description)
        for track, name, _, start, end in d.slices
        if d.tracks[track].description.startswith("async events")
    }


def test_every_id_spelling_pairs_as_chrome_tracing_reads_it(tmp_path: Path) -> None:
    trace = load_trace(_write(tmp_path, _events()))
    assert trace.load_report.dropped_ids == 0 and trace.skipped_events == 0
    result = write_perfetto_trace(trace, tmp_path / "out.pftrace")
    slices = _slices(result.path)
    paired = {name for name, _, _, pairs in CASES if pairs}
    assert set(slices) == paired
    assert all(dur == 1000 for dur, _ in slices.values())
    unpaired = 2 * sum(not pairs for name, _, _, pairs in CASES if name != "null is no id")
    assert result.skipped == {
        "unpaired async begin/end": unpaired,
        "async event without id": 2 + 1,  # the null pair and the n without an id
    }
    # tracks say the id as it was written: numbers bare, text quoted
    assert slices["minus one"][1] == 'async events, cat "c", id -1'
    assert slices["u64 max"][1] == f'async events, cat "c", id {U64_MAX}'
    assert slices["fraction"][1] == 'async events, cat "c", id "3.5"'
    assert slices["bool"][1] == 'async events, cat "c", id "true"'
    assert slices["integral float"][1] == 'async events, cat "c", id 3'


def test_id_minus_one_is_not_the_missing_id(tmp_path: Path) -> None:
    """The column's -1 means "no id": an explicit -1 is a label of its digits instead, and
    three trees (-1, "-1" joined to it, and an event without id) stay apart."""
    events = _pair("a", -1, "-1", 10) + [
        {"ph": "b", "cat": "c", "name": "a", "pid": 1, "tid": 1, "ts": 12}  # no id
    ]
    trace = load_trace(_write(tmp_path, events))
    ids = trace.col(S.FLOW_ID).tolist()
    assert ids[0] == ids[1] != -1 and ids[2] == -1
    assert trace.id_labels[ids[0]] == "-1"


def test_flows_with_explicit_minus_one_and_u64_ids_bind(tmp_path: Path) -> None:
    """s/f flows read their ids by the same rule: ids -1 and 2**64 - 1 make two arrows."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "src", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
        {"ph": "X", "cat": "kernel", "name": "dst", "pid": 1, "tid": 2, "ts": 20, "dur": 10},
    ]
    for flow_id in (-1, U64_MAX):
        flow = {"cat": "ac2g", "name": "ac2g", "id": flow_id, "pid": 1}
        events += [
            {**flow, "ph": "s", "tid": 1, "ts": 5},
            {**flow, "ph": "f", "tid": 2, "ts": 25, "bp": "e"},
        ]
    trace = load_trace(_write(tmp_path, events))
    result = write_perfetto_trace(trace, tmp_path / "f.pftrace")
    assert result.flows == 2 and not result.skipped
    d = decode_and_check(result.path)
    assert len(d.flows) == 2 and all(len(ends) == 2 for ends in d.flows.values())


def test_ids_round_trip_through_chrome_json(tmp_path: Path) -> None:
    """The Chrome export writes each id back so that it reads as the same id: -1 and 2**64 -
    1 as numbers, 3.5 and true as their text (the id they are: ``"3.5"``, ``"true"``)."""
    trace = load_trace(_write(tmp_path, _events()))
    out = write_chrome_trace(trace, tmp_path / "rt.json")
    written = {
        (e["name"], e["ph"]): e.get("id", "absent")
        for e in json.loads(out.read_text())["traceEvents"]
        if e["ph"] in "be"
    }
    assert written[("minus one", "b")] == -1 and written[("minus one as text", "e")] == -1
    assert written[("u64 max", "b")] == U64_MAX and written[("u64 max", "e")] == U64_MAX
    assert written[("fraction", "b")] == "3.5" and written[("bool", "b")] == "true"
    assert written[("integral float", "e")] == 3
    assert written[("null is no id", "b")] == "absent"
    again = load_trace(out)
    first = write_perfetto_trace(trace, tmp_path / "1.pftrace")
    second = write_perfetto_trace(again, tmp_path / "2.pftrace")
    assert _slices(first.path) == _slices(second.path)
    assert first.skipped == second.skipped


def test_bools_among_plain_ints_are_not_zero_and_one(tmp_path: Path) -> None:
    """A piece whose ids are all ints or bools (the ints' fast conversion takes True as 1):
    true and false stay the labels "true" / "false", apart from 1 and 0."""
    values = [True, 1, False, 0, 7]
    events = [
        {"ph": "n", "cat": "c", "name": f"n{k}", "pid": 1, "tid": 1, "ts": k, "id": v}
        for k, v in enumerate(values)
    ]
    trace = load_trace(_write(tmp_path, events))
    names = [trace.name(r) for r in range(len(trace))]
    ids = dict(zip(names, trace.col(S.FLOW_ID).tolist(), strict=True))
    assert [trace.id_labels.get(ids[f"n{k}"], ids[f"n{k}"]) for k in range(5)] == [
        "true",
        1,
        "false",
        0,
        7,
    ]
