"""The split load: a large plain file's second half decoded by a forked child while this process
decodes the first half (loader.py, forked.py). Whatever happens at the boundary or in
either half, the Trace must be the one a whole load gives: each test loads the same file both
ways and compares every column (string ids resolved to their text), the args, the M events,
the name dicts and the load report."""

from __future__ import annotations

import json
import mmap
import os
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from neuron_profiler import forked as _fork
from neuron_profiler.trace import load_trace, loader
from neuron_profiler.trace import schema as S
from neuron_profiler.trace._columns import ColumnSink
from neuron_profiler.trace._stream import events_middle, find_boundary

BASE_NS = 1_700_000_000_000_000_000


def _events(n: int, *, first: int = 0) -> list[dict[str, Any]]:
    """Kineto-like events of every kind the loader treats apart: M events (names, sort
    indexes, string pids and tids), X ops with ids in their args, B/E pairs, flows, instants,
    counters; string ids that repeat and ones that appear only late."""
    out: list[dict[str, Any]] = []
    for i in range(first, first + n):
        pid: int | str = i % 7 if i % 5 else f"host-{i % 3}"
        if i % 40 == 0:
            out.append(
                {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"p{i}"}}
            )
            out.append(
                {
                    "ph": "M",
                    "name": "thread_sort_index",
                    "pid": pid,
                    "tid": f"stream {i % 4}",
                    "args": {"sort_index": i},
                }
            )
        ts = 1000 + i * 3.5
        out.append(
            {
                "ph": "X",
                "cat": "cpu_op" if i % 3 else "kernel",
                "name": f"aten::op{i % 11}" if i % 97 else f"late name {i}",
                "pid": pid,
                "tid": i % 4,
                "ts": ts,
                "dur": 2.25,
                "args": {"External id": i, "correlation": i + 7, "Input Dims": [[i % 5, 3]]},
            }
        )
        if i % 9 == 0:
            out.append({"ph": "B", "name": "span", "pid": 3, "tid": 9, "ts": ts})
        if i % 9 == 4:
            out.append({"ph": "E", "pid": 3, "tid": 9, "ts": ts + 1})
        if i % 13 == 0:
            out.append(
                {"ph": "s", "id": i, "pid": 1, "tid": 1, "ts": ts, "cat": "ac2g", "name": "f"}
            )
            out.append(
                {"ph": "f", "id": i, "pid": 2, "tid": 2, "ts": ts + 1, "cat": "ac2g", "bp": "e"}
            )
        if i % 17 == 0:
            out.append({"ph": "i", "s": "t", "name": "mark", "pid": 1, "tid": 1, "ts": ts})
        if i % 23 == 0:
            out.append({"ph": "C", "name": "mem", "pid": 1, "ts": ts, "args": {"bytes": i}})
    return out


def _write(path: Path, events: list[dict[str, Any]], *, tail: bool = True) -> Path:
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "X"}], "traceEvents": events}
    if tail:
        doc |= {"baseTimeNanoseconds": BASE_NS, "displayTimeUnit": "ns"}
    path.write_text(json.dumps(doc, indent=1))  # (indent: whitespace between events, as Kineto)
    return path


def _snapshot(trace: Any) -> dict[str, Any]:
    """The trace with string ids resolved (a split load may number strings differently)."""
    strings = np.array(trace.strings, dtype=object)
    columns = {k: v.copy() for k, v in trace.columns.items()}
    for key in (S.NAME_ID, S.CAT_ID):
        columns[key] = strings[columns[key]]
    meta = trace.meta_events
    return {
        "columns": columns,
        "args": list(trace.raw_args),
        "meta": (meta.name, meta.pid.tolist(), meta.tid.tolist(), list(meta.args), meta.cat),
        "meta_times": (meta.ts_ns.tolist(), meta.has_ts.tolist(), meta.form.tolist()),
        "names": (trace.process_names, trace.thread_names),
        "sort": (trace.process_sort_index, trace.thread_sort_index),
        "labels": trace.pid_labels,
        "metadata": trace.metadata,
        "report": (trace.load_report, trace.skipped_events, trace.truncated),
    }


def _assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["columns"].keys() == b["columns"].keys()
    for key, column in a["columns"].items():
        assert np.array_equal(column, b["columns"][key]), key
    for key in a:
        if key != "columns":
            assert a[key] == b[key], key


@pytest.fixture
def split(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Split every plain file, whatever its size or the machine (the test runner's own threads
    would otherwise rule forking out); returns a list that counts the halves appended."""
    monkeypatch.setenv(loader.SPLIT_ENV, "1")
    monkeypatch.setattr(_fork, "fork_is_safe", lambda: True)
    monkeypatch.setattr(loader, "usable_cores", lambda: 2)
    appended: list[int] = []
    absorb = ColumnSink.absorb

    def counted(self: ColumnSink, part: Any) -> None:
        appended.append(part.rows)
        absorb(self, part)

    monkeypatch.setattr(ColumnSink, "absorb", counted)
    return appended


def _whole(path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    with monkeypatch.context() as m:
        m.setenv(loader.SPLIT_ENV, "0")
        return _snapshot(load_trace(path))


def test_split_load_equals_the_whole_load(
    tmp_path: Path, split: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path / "t.json", _events(6000))
    whole = _whole(path, monkeypatch)
    halves = _snapshot(load_trace(path))
    assert len(split) == 1 and 0 < split[0] < len(whole["columns"][S.TS_NS])  # it did split
    _assert_same(halves, whole)
    assert whole["metadata"]["baseTimeNanoseconds"] == BASE_NS  # (read by the child)
    assert "late name 5917" in set(whole["columns"][S.NAME_ID])


def test_a_later_name_in_the_second_half_wins(
    tmp_path: Path, split: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same process named in both halves: the last name in the file wins, as it does in a
    whole load; a string pid first seen in the second half keeps its text."""
    events = _events(3000)
    rename = {"ph": "M", "name": "process_name", "pid": "host-1", "tid": 0, "args": {"name": "z"}}
    events += [rename, {"ph": "X", "name": "n", "pid": "only-late", "tid": 1, "ts": 1, "dur": 1}]
    path = _write(tmp_path / "t.json", events)
    halves = _snapshot(load_trace(path))
    assert split
    _assert_same(halves, _whole(path, monkeypatch))
    labels = {text: i for i, text in halves["labels"].items()}
    assert halves["names"][0][labels["host-1"]] == "z"
    assert "only-late" in labels


def test_text_ids_in_the_second_half_are_renumbered_as_labels(
    tmp_path: Path, split: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Async ids written as text (``"0x1"``) in both halves, one pair split across them, and
    ids held as labels (-1, 2**64 - 1, 3.5) in the second: the child's label ids are
    renumbered into this process's, so the pair still shares one id."""
    events = _events(3000)
    pair = {"cat": "async", "name": "req", "pid": 1, "tid": 1, "id": "0x1"}
    events.insert(10, {**pair, "ph": "b", "ts": 5})
    events.insert(20, {**pair, "ph": "b", "ts": 6, "id": "first-half"})
    events += [{**pair, "ph": "e", "ts": 9}, {**pair, "ph": "b", "ts": 7, "id": "late"}]
    # ids the column holds as labels too: -1 (its "none"), beyond int64, a fraction
    events += [{**pair, "ph": "n", "ts": 8, "id": v} for v in (-1, 2**64 - 1, 3.5)]
    path = _write(tmp_path / "t.json", events)
    trace = load_trace(path)
    assert split
    halves = _snapshot(trace)
    _assert_same(halves, _whole(path, monkeypatch))
    async_rows = np.flatnonzero(halves["columns"][S.CAT_ID] == "async")
    texts = sorted(trace.id_labels[int(i)] for i in trace.col(S.FLOW_ID)[async_rows])
    assert texts == sorted(["0x1", "0x1", "first-half", "late", "-1", str(2**64 - 1), "3.5"])


def test_a_boundary_inside_a_string_is_caught(
    tmp_path: Path, split: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The split point falls inside an args string that reads like events (``},{``): the
    child decodes a fake event from it, the first half cannot end there, so the file is loaded
    whole and the fake event never appears."""
    fake = '},{"ph":"X","name":"FAKE","pid":1,"tid":1,"ts":1,"dur":1},{"x":"'
    events = _events(500)
    events.append(
        {"ph": "X", "name": "big", "pid": 1, "tid": 1, "ts": 5, "dur": 1, "args": {"s": fake * 80}}
    )
    events += _events(500, first=500)
    path = _write(tmp_path / "t.json", events)
    text = path.read_bytes()
    inside = text.index(b"FAKE") + 100  # (the estimate of the middle event, put in the string)
    monkeypatch.setattr(loader, "events_middle", lambda *_, **__: inside)
    candidate, _ = find_boundary(path, inside, len(text))
    assert candidate < text.index(b"aten", inside)  # the gap found is in the string
    halves = _snapshot(load_trace(path))
    assert not split  # not appended: loaded whole
    _assert_same(halves, _whole(path, monkeypatch))
    assert "FAKE" not in set(halves["columns"][S.NAME_ID])


@pytest.mark.parametrize("where", ["truncated", "damaged", "repaired"])
def test_trouble_in_the_second_half_gives_the_whole_loads_result(
    tmp_path: Path, split: list[int], monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A file cut off mid-write (the child's tail), invalid JSON, or a value only the repair
    path reads (NaN) in the second half: the result, warnings included, is the whole load's."""
    path = _write(tmp_path / "t.json", _events(4000))
    text = path.read_bytes()
    at = text.index(b'"ph": "X"', len(text) * 3 // 4)
    if where == "truncated":
        text = text[:at]
    elif where == "damaged":
        text = text[:at] + b"}}garbage" + text[at:]
    else:
        dur = text.index(b'"dur": 2.25', at)
        text = text[:dur] + b'"dur": NaN' + text[dur + len(b'"dur": 2.25') :]
    path.write_bytes(text)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        halves = _snapshot(load_trace(path))
    with monkeypatch.context() as m, warnings.catch_warnings(record=True) as whole_seen:
        warnings.simplefilter("always")
        m.setenv(loader.SPLIT_ENV, "0")
        whole = _snapshot(load_trace(path))
    _assert_same(halves, whole)
    assert [str(w.message) for w in seen] == [str(w.message) for w in whole_seen]
    if where == "truncated":
        assert halves["report"][2] and split  # a cut-off file keeps the split
    if where == "damaged":
        assert halves["report"][0].damage and not split  # damage: loaded whole


def test_trouble_in_the_first_half_loads_whole(
    tmp_path: Path, split: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A value only the repair path reads (NaN) before the boundary: loaded whole (a NaN
    duration leaves its event no place: skipped, counted once)."""
    path = _write(tmp_path / "t.json", _events(4000))
    text = path.read_bytes()
    dur = text.index(b'"dur": 2.25', len(text) // 5)
    path.write_bytes(text[:dur] + b'"dur": NaN' + text[dur + len(b'"dur": 2.25') :])
    halves = _snapshot(load_trace(path))
    assert not split
    _assert_same(halves, _whole(path, monkeypatch))
    assert halves["report"][0].replaced_values == 0 and halves["report"][1] == 1


def test_a_failed_child_leaves_the_load_to_this_process(
    tmp_path: Path, split: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path / "t.json", _events(3000))

    def crash(*_: Any) -> None:
        raise MemoryError("the child ran out of memory")

    monkeypatch.setattr(loader, "_decode_second_half", crash)
    halves = _snapshot(load_trace(path))
    assert not split
    _assert_same(halves, _whole(path, monkeypatch))


def test_no_split_where_it_is_off_small_or_compressed(
    tmp_path: Path, split: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    import gzip

    path = _write(tmp_path / "t.json", _events(2000))
    monkeypatch.setenv(loader.SPLIT_ENV, "0")
    load_trace(path)
    monkeypatch.setenv(loader.SPLIT_ENV, str(path.stat().st_size + 1))  # smaller than the limit
    load_trace(path)
    monkeypatch.setenv(loader.SPLIT_ENV, "1")
    packed = tmp_path / "t.json.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    load_trace(packed)  # (gzip cannot be entered in the middle)
    assert not split
    load_trace(path)
    assert len(split) == 1


def test_fork_is_not_safe_beside_another_thread() -> None:
    """With a second thread running (a TensorBoard server, say), the load never forks."""
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not _fork.fork_is_safe()
        assert _fork.ForkedCall.start(print, "never") is None
    finally:
        stop.set()
        thread.join()


def test_fork_is_not_safe_in_a_pool_worker_only() -> None:
    """A pool's worker never forks (its siblings use the other cores); a process that never
    imported multiprocessing cannot be one, and is not made to import it to ask."""
    import multiprocessing
    import subprocess

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.apply(_fork.fork_is_safe) is False
    code = (
        "import sys\n"
        "from neuron_profiler import forked\n"
        "assert forked.fork_is_safe() is sys.platform.startswith('linux')\n"
        "assert 'multiprocessing' not in sys.modules\n"
    )
    env = {k: v for k, v in os.environ.items() if k != _fork.FORK_ENV}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_a_forked_call_returns_its_value_or_none() -> None:
    """The fork helper itself, in a process where forking is allowed for the test: arrays come
    back through the shared memory (rebuilt on a mapping of it, writable, not copied), the rest
    through the pipe; without a memfd all of it through the pipe; a call that raises gives
    None."""
    import unittest.mock

    with unittest.mock.patch.object(_fork, "fork_is_safe", lambda: True):
        call = _fork.ForkedCall.start(_arrays_and_text)
        assert call is not None
        arrays, text = call.result()
        assert arrays[0].tolist() == list(range(100_000)) and arrays[1].tolist() == [7] * 3
        assert text == "not an array"
        assert _on_mapping(arrays[0]) and _on_mapping(arrays[1])
        arrays[0][0] = -1  # (writable: copy-on-write, the child's data untouched)
        with unittest.mock.patch.object(_fork, "_memfd", lambda: None):
            piped = _fork.ForkedCall.start(_arrays_and_text)
            assert piped is not None
            (first, _), _ = piped.result()
            assert first.tolist() == list(range(100_000)) and not _on_mapping(first)
        failing = _fork.ForkedCall.start(int, "not a number")
        assert failing is not None and failing.result() is None


def _arrays_and_text() -> tuple[list[np.ndarray], str]:
    return [np.arange(100_000), np.full(3, 7, np.int32)], "not an array"


def _on_mapping(array: np.ndarray) -> bool:
    """Is ``array``'s memory a view of a mapping (not a bytes object the pipe filled)?"""
    base = array
    while getattr(base, "base", None) is not None and not isinstance(base, memoryview):
        base = base.base
    return isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)


def test_args_buffers_pickle_as_arrays_and_come_back_as_bytes() -> None:
    """``RawArgsBuilder`` pickles its buffers out of band (numpy views) and rebuilds bytes."""
    import pickle

    from neuron_profiler.trace._rawargs import RawArgsBuilder

    builder = RawArgsBuilder()
    builder.add(b'{"a":1},{"b":2}', np.array([0, 8]), np.array([7, 7]))
    builder.add(b'{"c":3}', np.array([0]), np.array([7]))
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(builder, protocol=5, buffer_callback=buffers.append)
    assert len(buffers) >= 2  # (the two texts went out of band)
    back = pickle.loads(head, buffers=buffers).build()
    assert list(back) == [b'{"a":1}', b'{"b":2}', b'{"c":3}']
    assert all(type(b) is bytes for b in back._buffers)


def test_the_split_falls_at_the_middle_event_not_the_middle_byte(tmp_path: Path) -> None:
    """Short events first (a trace of many processes opens with its M events), long ones
    after: the estimate lands where half of the events lie before it, far from the middle
    byte."""
    short = [
        {"ph": "M", "name": "process_name", "pid": i, "args": {"name": "q"}} for i in range(20000)
    ]
    long = [
        {"ph": "X", "name": "k" * 500, "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(20000)
    ]
    path = _write(tmp_path / "t.json", short + long)
    text = path.read_bytes()
    start = text.index(b"[", text.index(b'"traceEvents"')) + 1
    truth = text.index(b'"ph": "X"')  # the 20,001st event
    estimate = events_middle(path, start, len(text))
    assert abs(estimate - truth) < 0.05 * (len(text) - start)
    assert abs((start + len(text)) // 2 - truth) > 0.3 * (len(text) - start)  # (not the byte)


def test_the_last_rows_grow_the_columns_in_place() -> None:
    """``append_last`` makes room for exactly the rows it appends, keeping the rows so far
    (resized in place, not copied), and the table reads as both pieces in order."""
    from neuron_profiler.trace._columns import _ColumnTable

    def piece(first: int, n: int) -> dict[str, np.ndarray]:
        return {
            name: np.arange(first, first + n).astype(S.COLUMN_DTYPES.get(name, np.int64))
            for name in S.EVENT_COLUMNS
        }

    table = _ColumnTable()
    table.append(piece(0, 100), lambda rows: rows)  # full: no room to spare
    before = table._arrays[S.TS_NS]
    table.append_last(piece(100, 50))
    filled = table.filled()
    assert len(filled[S.TS_NS]) == 150 and len(table._arrays[S.TS_NS]) == 150
    assert filled[S.TS_NS].tolist() == list(range(150))
    assert filled[S.PH].tolist() == [v % 256 for v in range(150)]  # (uint8 column)
    assert table._arrays[S.TS_NS] is before  # the same array, resized


def _bom(path: Path) -> None:
    events = _events(3000)
    text = json.dumps({"traceEvents": events, "baseTimeNanoseconds": BASE_NS}, indent=1)
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())


def _keys_after(path: Path) -> None:  # the middle byte lies in the keys after the array
    devices = [{"id": i, "name": "x" * 50} for i in range(20000)]
    path.write_text(json.dumps({"traceEvents": _events(50), "deviceProperties": devices}))


def _keys_before(path: Path) -> None:
    devices = [{"id": i} for i in range(20000)]
    path.write_text(json.dumps({"deviceProperties": devices, "traceEvents": _events(3000)}))


def _one_huge_event(path: Path) -> None:  # no gap between events within reach of the middle
    events = _events(200)
    events.insert(
        100, {"ph": "X", "name": "huge", "ts": 1, "dur": 1, "args": {"s": "y" * (6 << 20)}}
    )
    path.write_text(json.dumps({"traceEvents": events}))


def _compact(path: Path) -> None:
    path.write_text(json.dumps({"traceEvents": _events(3000)}, separators=(",", ":")))


def _cut_past_the_middle(path: Path) -> None:
    text = json.dumps({"traceEvents": _events(3000)}, indent=1).encode()
    path.write_bytes(text[: len(text) * 52 // 100])


@pytest.mark.parametrize(
    ("make", "splits"),
    [
        (_bom, True),
        (_keys_after, False),
        (_keys_before, True),
        (_one_huge_event, False),
        (_compact, True),
        (_cut_past_the_middle, True),
    ],
)
def test_odd_layouts_load_as_a_whole_load_does(
    tmp_path: Path, split: list[int], monkeypatch: pytest.MonkeyPatch, make: Any, splits: bool
) -> None:
    """A leading BOM, most bytes in the keys after or before the array, one event far larger
    than the search window, no whitespace, a file cut off past the middle: the same trace as
    a whole load, split where the middle falls between two events of the array."""
    path = tmp_path / "t.json"
    make(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the cut-off file warns, both ways alike)
        halves = _snapshot(load_trace(path))
        _assert_same(halves, _whole(path, monkeypatch))
    assert bool(split) is splits


def test_a_ctrl_c_while_a_child_is_reaped_is_raised_after_it_is_reaped() -> None:
    """Closing a forked call kills the child and waits for it through a Ctrl-C (raised once the
    child is reaped), so no child is left behind, not even as a zombie."""
    import os
    import time
    import unittest.mock

    with unittest.mock.patch.object(_fork, "fork_is_safe", lambda: True):
        call = _fork.ForkedCall.start(time.sleep, 60)
    assert call is not None
    waits: list[int] = []
    waitpid = os.waitpid

    def interrupted_once(pid: int, options: int) -> tuple[int, int]:
        waits.append(pid)
        if len(waits) == 1:
            raise KeyboardInterrupt
        return waitpid(pid, options)

    with unittest.mock.patch.object(os, "waitpid", interrupted_once):
        with pytest.raises(KeyboardInterrupt):
            call.close()
    assert len(waits) == 2 and waits[0] == waits[1]
    with pytest.raises(ChildProcessError):  # reaped: no such child any more
        os.waitpid(waits[0], os.WNOHANG)
    call.close()  # (closing again does nothing)


def test_a_child_ends_with_its_parent(tmp_path: Path) -> None:
    """A parent killed outright (no chance to close its child) takes the child with it: the
    kernel kills it (Linux's parent-death signal), instead of it working on for seconds."""
    import subprocess
    import sys
    import time

    script = (
        "import os, signal, sys, time, unittest.mock\n"
        "from neuron_profiler import forked\n"
        "with unittest.mock.patch.object(forked, 'fork_is_safe', lambda: True):\n"
        "    call = forked.ForkedCall.start(time.sleep, 60)\n"
        "print(call._pid, flush=True)\n"
        "time.sleep(0.2)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    out = tmp_path / "out"  # (a file, not a pipe the child would hold open)
    with open(out, "w") as fh:
        proc = subprocess.run([sys.executable, "-c", script], stdout=fh, stderr=fh, timeout=60)
    assert proc.returncode == -9, out.read_text()
    child = int(out.read_text().split()[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _running(child):
        time.sleep(0.05)
    assert not _running(child)


def _running(pid: int) -> bool:
    """Is ``pid`` alive (not gone, not a zombie waiting to be reaped)?"""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("closed", [True, False])
def test_an_array_file_splits_as_an_object_file_does(
    tmp_path: Path, split: list[int], monkeypatch: pytest.MonkeyPatch, closed: bool
) -> None:
    """A bare JSON array of events (the closing ``]`` optional): the child reads the array's
    end (or the file's) as an array file's, and the halves give the whole load."""
    text = json.dumps(_events(6000), indent=1)
    path = tmp_path / "t.json"
    path.write_text(text if closed else text.rstrip()[:-1])
    whole = _whole(path, monkeypatch)
    halves = _snapshot(load_trace(path))
    assert len(split) == 1
    _assert_same(halves, whole)
    assert not whole["report"][2] and len(whole["columns"][S.TS_NS]) > 6000


@pytest.mark.parametrize("later", ["array", "same key"])
def test_a_key_written_again_after_the_events_gives_the_whole_loads_result(
    tmp_path: Path, split: list[int], monkeypatch: pytest.MonkeyPatch, later: str
) -> None:
    """The child meets a second ``traceEvents`` array, or a key the head wrote already: the
    halves are dropped and the whole load counts the repeat (its report equals the whole's)."""
    text = json.dumps({"deviceProperties": [{"id": 0}], "traceEvents": _events(6000)}, indent=1)
    extra = (
        '"traceEvents": ' + json.dumps(_events(50, first=9000))
        if later == "array"
        else '"deviceProperties": [{"id": 0}]'
    )
    path = tmp_path / "t.json"
    path.write_text(text[:-1] + ", " + extra + "}")
    whole = _whole(path, monkeypatch)
    halves = _snapshot(load_trace(path))
    assert not split  # not appended: loaded whole
    _assert_same(halves, whole)
    key = "traceEvents" if later == "array" else "deviceProperties"
    assert whole["report"][0].repeated_keys == ((key, 2),)
