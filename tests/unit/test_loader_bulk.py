"""Metadata-heavy traces load in bulk: no per-event Python path over the ``M`` events (a guard
that counts calls, not time), with every name, label and sort index kept as a plain reading of
the JSON gives them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from neuron_profiler.trace import _columns, _metaargs, load_trace
from neuron_profiler.trace import model as M

PROCESSES = 2000  # x 5 M events + 2 kernels each: 14,000 events


def _metadata_heavy(path: Path, *, metadata_first: bool = False) -> dict:
    """``metadata_first``: every M event before the other events, as Kineto writes a trace of
    many device queues (whole pieces of M events only), else each process's M events beside
    its kernels (pieces mixing both)."""
    events = []
    for p in range(PROCESSES):
        pid = 1000 + p
        events += [
            {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"Queue {p}"}},
            {"ph": "M", "name": "process_labels", "pid": pid, "args": {"labels": f"q{p}"}},
            {"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": p}},
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": 7, "args": {"name": "s7"}},
            {
                "ph": "M",
                "name": "thread_sort_index",
                "pid": pid,
                "tid": 7,
                "ts": 5.5,
                "args": {"sort_index": 7},
            },
        ]
        events += [
            {
                "ph": "X",
                "cat": "kernel",
                "name": "k",
                "pid": pid,
                "tid": 7,
                "ts": 10.0 + k,
                "dur": 1.0,
                "args": {"stream": 7},
            }
            for k in range(2)
        ]
    if metadata_first:
        events = [e for e in events if e["ph"] == "M"] + [e for e in events if e["ph"] != "M"]
    doc = {"traceEvents": events}
    path.write_text(json.dumps(doc))
    return doc


@pytest.mark.parametrize("metadata_first", [False, True])
def test_metadata_is_loaded_without_a_per_event_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, metadata_first: bool
) -> None:
    doc = _metadata_heavy(tmp_path / "t.json", metadata_first=metadata_first)
    calls = {"MetaEvent": 0, "meta_args": 0, "ident": 0}
    real_init = M.MetaEvent.__init__
    real_args = _columns.ColumnSink._meta_args
    real_ident = _columns.ColumnSink._ident

    def counted(name, fn):  # noqa: ANN001, ANN202
        def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            calls[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(M.MetaEvent, "__init__", counted("MetaEvent", real_init))
    monkeypatch.setattr(_columns.ColumnSink, "_meta_args", counted("meta_args", real_args))
    monkeypatch.setattr(_columns.ColumnSink, "_ident", counted("ident", real_ident))
    bulk = {"decodes": 0}
    real_decode = _metaargs._decode_dicts

    def decode_dicts(text: bytes) -> list:
        bulk["decodes"] += 1
        return real_decode(text)

    monkeypatch.setattr(_metaargs, "_decode_dicts", decode_dicts)
    only_metadata: list[bool] = []  # per piece: did it hold M events only?
    real_add_events = _columns.ColumnSink._add_events

    def add_events(self, events, *args):  # noqa: ANN001, ANN002, ANN202
        only_metadata.append(all(e.ph == "M" for e in events))
        return real_add_events(self, events, *args)

    monkeypatch.setattr(_columns.ColumnSink, "_add_events", add_events)
    trace = load_trace(tmp_path / "t.json")
    assert calls == {"MetaEvent": 0, "meta_args": 0, "ident": 0}, calls
    assert any(only_metadata) is metadata_first, only_metadata  # both layouts are exercised
    assert len(trace) == 2 * PROCESSES and trace.skipped_events == 0
    metas = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    assert len(trace.meta_events) == len(metas)
    # the args stay text through the load (the name and sort-index dicts read them typed),
    # then each piece's args are decoded at once when first read, never one event at a time
    assert bulk["decodes"] == 0
    args = trace.meta_events.args
    assert list(args) == [e["args"] for e in metas]
    pieces = bulk["decodes"]
    assert 1 <= pieces <= len(json.dumps(doc)) // 100_000 + 1, pieces
    assert args[len(metas) - 1] == metas[-1]["args"] and bulk["decodes"] == pieces  # kept
    monkeypatch.undo()
    # the same as a plain reading of the JSON, in file order
    got = [(m.name, m.pid, m.tid, m.args, m.ts_ns) for m in trace.meta_events]
    want = [
        (
            e["name"],
            e["pid"],
            e.get("tid", 0),
            e["args"],
            None if "ts" not in e else round(e["ts"] * 1000),
        )
        for e in metas
    ]
    assert got == want
    assert trace.process_names == {1000 + p: f"Queue {p}" for p in range(PROCESSES)}
    assert trace.process_sort_index == {1000 + p: p for p in range(PROCESSES)}
    assert trace.thread_names == {(1000 + p, 7): "s7" for p in range(PROCESSES)}
    assert trace.thread_sort_index == {(1000 + p, 7): 7 for p in range(PROCESSES)}


def test_odd_metadata_args_are_repaired_or_skipped_as_before(tmp_path: Path) -> None:
    """The bulk decode falls back to one event at a time for a piece it refuses: a number
    beyond float range kept as text, a non-object args skipped (counted)."""
    (tmp_path / "t.json").write_text(
        '{"traceEvents": ['
        '{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "a", "x": 1e400}},'
        '{"ph": "M", "name": "process_name", "pid": 2, "args": [1, 2]},'
        '{"ph": "M", "name": "thread_name", "pid": 1, "tid": 3, "args": {"name": "t"}},'
        '{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 3, "ts": 1, "dur": 1}]}'
    )
    trace = load_trace(tmp_path / "t.json")
    assert trace.process_names == {1: "a"} and trace.thread_names == {(1, 3): "t"}
    assert trace.skipped_events == 1 and len(trace.meta_events) == 2
    assert trace.load_report.replaced_values == 1


@pytest.mark.parametrize(
    ("args_text", "expected", "replaced"),
    [
        # read as a dict decode reads them: non-ASCII names, numbers of every spelling, nesting
        (
            '{"name": "Gerät → q", "n": 7}'.encode(),
            {"name": "Gerät → q", "n": 7},
            {},
        ),
        (b'{"name": "q", "f": 1.5e3, "g": -2E-2}', {"name": "q", "f": 1500.0, "g": -0.02}, {}),
        (b'{"name": "q", "big": ' + b"9" * 40 + b"}", {"name": "q", "big": int("9" * 40)}, {}),
        (
            b'{"name": "q", "t": [1, {"u": null}], "b": true}',
            {"name": "q", "t": [1, {"u": None}], "b": True},
            {},
        ),
        # what only a dict decode refuses, in a key the typed decode skips: repaired as before
        (b'{"name": "q", "x": 1e400}', {"name": "q", "x": "1e400"}, {"replaced_values": 1}),
        (b'{"name": "q", "x": "\xff"}', {"name": "q", "x": "\ufffd"}, {"replaced_text": 1}),
    ],
)
def test_metadata_args_read_as_a_dict_decode_reads_them(
    tmp_path: Path, args_text: bytes, expected: dict, replaced: dict
) -> None:
    """The typed reading of M events' args (text kept, decoded when first read) gives what a
    dict decode gives, and text a dict decode would refuse (a float beyond range, bytes that
    are not UTF-8: unchecked where the typed decode skips a key) is repaired and counted as
    before."""
    (tmp_path / "t.json").write_bytes(
        b'{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "args": '
        + args_text
        + b'}, {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "t"}},'
        b' {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 2, "ts": 1, "dur": 1}]}'
    )
    trace = load_trace(tmp_path / "t.json")
    assert [m.args for m in trace.meta_events] == [expected, {"name": "t"}]
    assert trace.process_names == {1: expected["name"]}
    assert trace.thread_names == {(1, 2): "t"}
    counts = {"replaced_values": 0, "replaced_text": 0, **replaced}
    assert {k: getattr(trace.load_report, k) for k in counts} == counts


@pytest.mark.parametrize(
    ("meta_ts", "rounds"),
    [(5.0, False), (5.5, True), (None, True)],
)
def test_hta_rounding_read_from_the_metadata_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, meta_ts: float | None, rounds: bool
) -> None:
    """HTA rounds times when some ``ts`` is not a whole µs or missing, ``M`` events' too: on a
    trace whose events are all whole µs the loader's metadata columns decide, with no
    ``MetaEvent`` made per event, as the event-by-event rule decides."""
    from neuron_profiler.analysis.compat.hta import hta_rounds

    events: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": p, "ts": 3, "args": {"name": f"q{p}"}}
        for p in range(10)
    ]
    if meta_ts is None:
        del events[7]["ts"]
    else:
        events[7]["ts"] = meta_ts
    events.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 7, "ts": 10, "dur": 2})
    doc = {"traceEvents": events, "baseTimeNanoseconds": 1500}
    (tmp_path / "t.json").write_text(json.dumps(doc))
    trace = load_trace(tmp_path / "t.json")
    made = {"MetaEvent": 0}
    real_init = M.MetaEvent.__init__

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        made["MetaEvent"] += 1
        return real_init(*args, **kwargs)

    monkeypatch.setattr(M.MetaEvent, "__init__", counted)
    assert hta_rounds(trace) is rounds
    assert made["MetaEvent"] == 0
    monkeypatch.undo()
    one_by_one = dataclasses.replace(trace, meta_events=tuple(trace.meta_events))
    assert hta_rounds(one_by_one) is rounds
