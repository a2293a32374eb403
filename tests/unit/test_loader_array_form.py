"""The Trace Event Format's "JSON Array Format": a file that is a bare array of events, whose
closing ``]`` may be missing (writers stream events and stop). It loads as a ``traceEvents``
array does; a cut inside an event is a cut (complete events kept, warned), as in object files."""

from __future__ import annotations

import gzip
import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from neuron_profiler.errors import TraceLoadError
from neuron_profiler.trace import load_trace
from neuron_profiler.trace import schema as S
from neuron_profiler.trace.loader import TruncatedTraceWarning, is_trace_file

# hand-written: three events, the second with args, a metadata event naming the process
ARRAY = (
    b'[{"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "worker"}},\n'
    b' {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 1, "ts": 10, "dur": 4,'
    b' "args": {"External id": 3}},\n'
    b' {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 12.5, "dur": 2}\n'
)


def _write(path: Path, text: bytes, gz: bool) -> Path:
    path.write_bytes(gzip.compress(text) if gz else text)
    return path


def _names(trace: Any) -> list[str]:
    return [trace.strings[i] for i in trace.columns[S.NAME_ID]]


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize(
    "ending", [b"]", b"]\n", b"", b"\n", b",", b",\n  "], ids=["]", "]nl", "none", "nl", ",", ",ws"]
)
def test_array_form_loads_with_or_without_its_closing_bracket(
    tmp_path: Path, gz: bool, ending: bytes
) -> None:
    path = _write(tmp_path / ("a.json.gz" if gz else "a.json"), ARRAY + ending, gz)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a missing ] is allowed by the format: no warning
        trace = load_trace(path)
    assert _names(trace) == ["aten::mm", "gemm"]
    assert trace.columns[S.TS_NS].tolist() == [10_000, 12_500]  # absolute µs, no base time
    assert trace.columns[S.DUR_NS].tolist() == [4_000, 2_000]
    assert trace.columns[S.EXTERNAL_ID].tolist() == [3, -1]
    assert trace.process_names == {7: "worker"}
    assert not trace.truncated and trace.metadata == {}
    assert trace.load_report.messages() == []
    assert is_trace_file(path)


@pytest.mark.parametrize("gz", [False, True])
def test_a_cut_inside_an_event_is_a_cut(tmp_path: Path, gz: bool) -> None:
    text = ARRAY + b',{"ph": "X", "name": "cut here", "pid": 1, "tid": 1, "ts'
    path = _write(tmp_path / "cut.json", text, gz)
    with pytest.warns(TruncatedTraceWarning, match="kept 2 complete events"):
        trace = load_trace(path)
    assert trace.truncated and _names(trace) == ["aten::mm", "gemm"]


def test_nothing_complete_is_the_usual_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "cut.json", b'[{"ph": "X", "na', False)
    with pytest.raises(TraceLoadError, match="truncated, no complete event") as info:
        load_trace(path)
    assert info.value.exit_code == 2 and str(path) in str(info.value)


@pytest.mark.parametrize(
    "text",
    [
        b"[1, 2, 3]",
        b'["a", {"ph": "X"}]',
        b"[[]]",
        # an object that is no event first: loading and the directory scan say the same
        b'[{"name": "x"}, {"ph": "X", "name": "op", "pid": 1, "tid": 1, "ts": 10, "dur": 5}]',
    ],
)
def test_an_array_of_non_events_is_no_trace(tmp_path: Path, text: bytes) -> None:
    path = _write(tmp_path / "list.json", text, False)
    with pytest.raises(TraceLoadError, match="not a torch.profiler trace") as info:
        load_trace(path)
    assert info.value.not_a_trace and "\n" not in str(info.value)
    assert not is_trace_file(path)


def test_an_array_file_is_a_trace_file_whatever_its_first_events_key_order(tmp_path: Path) -> None:
    first = b'[{"name": "a", "args": {"x": {"y": 1}}, "pid": 1, "tid": 1, "ts": 1, "ph": "X"}'
    assert is_trace_file(_write(tmp_path / "late_ph.json", first + b"]", False))
    assert is_trace_file(_write(tmp_path / "open.json", first, False))  # (one element, no ])
    assert not is_trace_file(_write(tmp_path / "cfg.json", b'[{"name": "a"}, {"ph": 1}]', False))


def test_an_empty_array_is_no_trace_loaded_or_scanned(tmp_path: Path) -> None:
    """A config's [] beside traces: not a trace when loaded (so a directory scan skips it, as
    is_trace_file judges it) rather than an empty trace the commands then fail on."""
    for text in (b"[]", b"[", b" [ \n"):
        path = _write(tmp_path / "empty.json", text, False)
        with pytest.raises(TraceLoadError, match="an empty JSON array") as info:
            load_trace(path)
        assert info.value.not_a_trace
        assert not is_trace_file(path)


def test_repairs_and_trailing_bytes_are_counted_as_in_object_files(tmp_path: Path) -> None:
    bad = b',{"ph": "X", "name": "nan", "pid": 1, "tid": 1, "ts": 20, "dur": 1, "args": {"v": NaN}}'
    path = _write(tmp_path / "a.json", ARRAY + bad, False)  # repaired, and no ]
    trace = load_trace(path)
    assert _names(trace) == ["aten::mm", "gemm", "nan"] and not trace.truncated
    assert trace.load_report.replaced_values == 1
    path = _write(tmp_path / "b.json", ARRAY + b"]\n{}", False)
    trace = load_trace(path)
    assert len(trace) == 2 and trace.load_report.trailing_bytes == 2


def test_array_form_of_a_real_trace_holds_the_same_events(
    shared_traces: Path, tmp_path: Path
) -> None:
    """The events of a real Kineto trace written as a bare array (closed, unclosed, gzipped):
    the same rows as the object file gives (no baseTimeNanoseconds in this one: same times)."""
    source = shared_traces / "kineto/tb_plugin/test/gpu_metrics_input.json"
    doc = json.loads(source.read_bytes())
    assert "baseTimeNanoseconds" not in doc
    events = json.dumps(doc["traceEvents"]).encode()
    expected = load_trace(source)
    for name, text, gz in (
        ("closed.json", events, False),
        ("open.json", events[:-1], False),
        ("open.json.gz", events[:-1] + b",\n", True),
    ):
        trace = load_trace(_write(tmp_path / name, text, gz))
        assert not trace.truncated
        for column in (S.TS_NS, S.DUR_NS, S.PH, S.PID, S.TID, S.EXTERNAL_ID, S.CORRELATION):
            assert trace.columns[column].tolist() == expected.columns[column].tolist(), column
        assert _names(trace) == _names(expected)
    non_meta = [e for e in doc["traceEvents"] if e.get("ph") != "M"]
    assert len(expected) == len(non_meta)
