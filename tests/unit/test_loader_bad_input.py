"""Bad input: one-line errors with exit code 2; cut-off files keep complete events."""

from __future__ import annotations

import gzip
import json
import warnings
from pathlib import Path

import pytest

from neuron_profiler.errors import TraceLoadError
from neuron_profiler.trace import load_trace
from neuron_profiler.trace import schema as S
from neuron_profiler.trace.loader import TruncatedTraceWarning


def _trace_text(n: int) -> str:
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"op{i}",
            "pid": 1,
            "tid": 1,
            "ts": 1000 + i,
            "dur": 1,
            "args": {"External id": i},
        }
        for i in range(n)
    ]
    return json.dumps({"baseTimeNanoseconds": 10**18, "traceEvents": events})


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"{not json", "invalid JSON"),
        (b"[1, 2, 3]", "not a torch.profiler trace"),
        (b'{"traceEvents": 5}', "not a torch.profiler trace"),
        (b'{"traceEvents": [{"ph": "X", "na', "truncated, no complete event"),
        (b"", "empty file"),
    ],
)
def test_unusable_files_raise_one_line_error(tmp_path: Path, content: bytes, problem: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(TraceLoadError) as info:
        load_trace(path)
    assert info.value.exit_code == 2
    message = str(info.value)
    assert str(path) in message and problem in message and "\n" not in message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceLoadError, match="no such file"):
        load_trace(tmp_path / "absent.json")


@pytest.mark.parametrize("gz", [False, True])
def test_cut_off_file_keeps_complete_events(tmp_path: Path, gz: bool) -> None:
    text = _trace_text(50)
    cut = text[: text.find('"name": "op30"') - 10]  # inside event 30
    path = tmp_path / ("cut.json.gz" if gz else "cut.json")
    if gz:
        whole = gzip.compress(text.encode())
        path.write_bytes(whole[: len(whole) // 2])  # gzip stream cut mid-write
    else:
        path.write_text(cut)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = load_trace(path)
    assert trace.truncated
    assert any(issubclass(w.category, TruncatedTraceWarning) for w in caught)
    names = [trace.name(i) for i in range(len(trace))]
    assert names == [f"op{i}" for i in range(len(names))]
    if not gz:
        assert len(names) == 30
    assert trace.col(S.TS_NS)[0] == 10**18 + 1000 * 1000


def test_mistyped_event_is_skipped_and_counted(tmp_path: Path) -> None:
    doc = json.loads(_trace_text(3))
    doc["traceEvents"][1]["ts"] = {"oops": 1}
    doc["traceEvents"][2]["pid"] = [1]
    path = tmp_path / "typed.json"
    path.write_text(json.dumps(doc))
    trace = load_trace(path)
    assert len(trace) == 1 and trace.skipped_events == 2


def test_string_timestamps_and_absolute_us(tmp_path: Path) -> None:
    events = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": 0,
            "tid": "stream 7",
            "ts": "1700000000000000.5",
            "dur": "2.25",
        }
    ]
    path = tmp_path / "strings.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = load_trace(path)
    assert trace.col(S.TS_NS)[0] == 1700000000000000500
    assert trace.col(S.DUR_NS)[0] == 2250
    assert trace.tid_labels[int(trace.col(S.TID)[0])] == "stream 7"


def test_integral_float_pids_and_tids_are_the_integers(tmp_path: Path) -> None:
    """pandas / numpy round trips write ``100.0``: the event is kept with pid/tid 100 (it was
    skipped as mistyped, and the host side of the trace with it), its thread the int one's,
    and a thread name given with a float tid names it."""
    events = [
        {"ph": "M", "name": "thread_name", "pid": 100.0, "tid": 7.0, "args": {"name": "main"}},
        {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 100.0, "tid": 7.0, "ts": 1, "dur": 2},
        {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 100, "tid": 7, "ts": 5, "dur": 2},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0.0, "tid": -1.0, "ts": 9, "dur": 1},
    ]
    path = tmp_path / "floats.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = load_trace(path)
    assert trace.skipped_events == 0 and len(trace) == 3
    assert trace.col(S.PID).tolist() == [100, 100, 0]
    assert trace.col(S.TID).tolist() == [7, 7, -1]
    assert trace.thread_names == {(100, 7): "main"}
    assert not trace.pid_labels and not trace.tid_labels
    assert not (trace.col(S.FORM) & (S.Form.PID_TEXT | S.Form.TID_TEXT)).any()  # written as ints


def test_other_float_pids_are_labels_like_their_text(tmp_path: Path) -> None:
    """A float that is no int64 (``100.5``, ``1e+20``) is labelled by its text, as the string
    ``"100.5"`` is (one label for both), and a float beyond int64 is counted as relabelled."""
    events = [
        {"ph": "X", "name": "a", "pid": 100.5, "tid": 1, "ts": 1, "dur": 1},
        {"ph": "X", "name": "b", "pid": "100.5", "tid": 1, "ts": 2, "dur": 1},
        {"ph": "X", "name": "c", "pid": 1e20, "tid": 1, "ts": 3, "dur": 1},
    ]
    path = tmp_path / "odd_floats.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = load_trace(path)
    assert trace.skipped_events == 0 and len(trace) == 3
    pid = trace.col(S.PID).tolist()
    assert pid[0] == pid[1] != pid[2]
    assert [trace.pid_labels[p] for p in pid] == ["100.5", "100.5", "1e+20"]
    assert trace.load_report.relabelled_ids == 1
