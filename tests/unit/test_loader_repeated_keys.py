"""A top-level key written more than once. JSON decoders keep the last value (Python's json,
``JSON.parse``, msgspec), which would drop the others silently. The loader keeps the events of
every ``traceEvents`` array (as Perfetto's JSON reader does) and says so; another key written
twice must hold the same value (kept once, said so), else the file is refused in one line: the
rank, the time base or the devices analyses read would otherwise be a guess. Every path of the
loader (the head before the events, the streamed array, the tail, a second array streamed after
the first, the whole-document decode) behaves alike."""

from __future__ import annotations

import gzip
import json
import warnings
from pathlib import Path

import pytest

from neuron_profiler.cli.main import main
from neuron_profiler.errors import TraceLoadError
from neuron_profiler.trace import load_trace
from neuron_profiler.trace import schema as S
from neuron_profiler.trace.loader import TruncatedTraceWarning


def _event(i: int) -> str:
    return json.dumps(
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 100 + i, "dur": 1}
    )


def _array(first: int, last: int) -> str:
    return "[" + ", ".join(_event(i) for i in range(first, last)) + "]"


def _fill(template: str, *parts: str) -> str:
    """``template`` with each ``%s`` replaced by the next of ``parts`` (JSON has braces)."""
    pieces = template.split("%s")
    assert len(pieces) == len(parts) + 1
    return "".join(p + q for p, q in zip(pieces, (*parts, ""), strict=True))


def _load(tmp_path: Path, text: str, gz: bool = False, name: str = "t.json") -> object:
    path = tmp_path / (name + ".gz" if gz else name)
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    return load_trace(path)


def _names(trace: object) -> list[str]:
    return sorted(trace.strings[i] for i in trace.columns[S.NAME_ID])  # type: ignore[attr-defined]


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize(
    "text, arrays",
    [
        (_fill('{"traceEvents": %s, "traceEvents": %s}', _array(0, 3), _array(3, 5)), 2),
        (
            _fill(
                '{"a": 1, "traceEvents": %s, "b": 2, "traceEvents": %s, "traceEvents": [], "c": 3}',
                _array(0, 3),
                _array(3, 5),
            ),
            3,
        ),
        (_fill('{"traceEvents": %s, "traceEvents": %s}', _array(0, 1), _array(1, 5)), 2),
        # a whole array before the one streamed (its key escaped: not found as text), in the head
        (_fill('{"trace\\u0045vents": %s, "traceEvents": %s}', _array(0, 3), _array(3, 5)), 2),
    ],
    ids=["two", "three-with-keys-between", "short-first", "head-holds-one"],
)
def test_every_events_array_is_kept_and_counted(
    tmp_path: Path, gz: bool, text: str, arrays: int
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace = _load(tmp_path, text, gz)
    assert _names(trace) == [f"op{i}" for i in range(5)]
    assert trace.load_report.repeated_keys == (("traceEvents", arrays),)
    assert trace.load_report.messages() == [
        f"traceEvents written {arrays} times: the events of all {arrays} arrays kept"
    ]
    assert all(k in "abc" for k in trace.metadata)


def test_a_second_array_of_a_large_file_is_streamed(tmp_path: Path) -> None:
    """Megabytes per array: the second is met after the first array's end, read as the first
    was, and a key between them and after them kept."""
    text = _fill(
        '{"traceEvents": %s, "k": 1, "traceEvents": %s, "baseTimeNanoseconds": 1000}',
        _array(0, 30_000),
        _array(30_000, 60_000),
    )
    trace = _load(tmp_path, text)
    assert len(trace) == 60_000 and not trace.truncated
    assert trace.metadata == {"k": 1, "baseTimeNanoseconds": 1000}
    assert trace.columns[S.TS_NS].min() == 100_000 + 1000  # the base applies to both arrays
    assert trace.load_report.repeated_keys == (("traceEvents", 2),)


@pytest.mark.parametrize("gz", [False, True])
def test_a_second_array_cut_off_keeps_its_complete_events(tmp_path: Path, gz: bool) -> None:
    text = _fill('{"traceEvents": %s, "traceEvents": %s', _array(0, 3), _array(3, 6)[:-20])
    with pytest.warns(TruncatedTraceWarning, match="kept 5 complete events"):
        trace = _load(tmp_path, text, gz)
    assert _names(trace) == [f"op{i}" for i in range(5)] and trace.truncated


def test_a_repair_in_the_second_array_is_counted(tmp_path: Path) -> None:
    bad = _event(9).replace('"dur": 1', '"dur": 1, "args": {"v": NaN}')
    trace = _load(tmp_path, _fill('{"traceEvents": %s, "traceEvents": [%s]}', _array(0, 2), bad))
    assert _names(trace) == ["op0", "op1", "op9"]
    assert trace.load_report.replaced_values == 1


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize(
    "text",
    [
        '{"displayTimeUnit": "ns", "displayTimeUnit": "ns", "traceEvents": %s}',  # the head
        '{"displayTimeUnit": "ns", "traceEvents": %s, "displayTimeUnit": "ns"}',  # head and tail
        '{"traceEvents": %s, "displayTimeUnit": "ns", "displayTimeUnit": "ns"}',  # the tail
    ],
    ids=["head", "head-and-tail", "tail"],
)
def test_a_key_repeated_with_the_same_value_is_kept_once(
    tmp_path: Path, gz: bool, text: str
) -> None:
    trace = _load(tmp_path, _fill(text, _array(0, 3)), gz)
    assert len(trace) == 3 and trace.metadata == {"displayTimeUnit": "ns"}
    assert trace.load_report.messages() == [
        'top-level key "displayTimeUnit" written 2 times with the same value: kept once'
    ]


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize(
    "text, key",
    [
        (
            '{"distributedInfo": {"rank": 0}, "distributedInfo": {"rank": 1}, "traceEvents": %s}',
            "distributedInfo",
        ),
        (
            '{"baseTimeNanoseconds": 1, "traceEvents": %s, "baseTimeNanoseconds": 2}',
            "baseTimeNanoseconds",
        ),
        (
            '{"traceEvents": %s, "deviceProperties": [], "deviceProperties": [{"id": 0}]}',
            "deviceProperties",
        ),
        (
            '{"traceEvents": %s, "traceEvents": [], "displayTimeUnit": "ms", "displayTimeUnit": "ns"}',
            "displayTimeUnit",
        ),
    ],
    ids=["head", "head-and-tail", "tail", "with-two-arrays"],
)
def test_a_key_repeated_with_different_values_is_refused(
    tmp_path: Path, gz: bool, text: str, key: str
) -> None:
    with pytest.raises(TraceLoadError) as info:
        _load(tmp_path, _fill(text, _array(0, 3)), gz)
    message = str(info.value)
    assert f'top-level key "{key}" written 2 times with different values' in message
    assert "t.json" in message and "\n" not in message and info.value.exit_code == 2


NOT_ALWAYS_AN_ARRAY = "traceEvents written more than once, not always as an array"


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize(
    "text, kinds",
    [
        ('{"traceEvents": {"x": 1}, "traceEvents": %s}', "an object"),  # the head
        ('{"traceEvents": %s, "traceEvents": {"x": 1}}', "an object"),  # the tail
        ('{"traceEvents": %s, "k": 1, "traceEvents": 5, "j": 2}', "a number"),  # keys around
        ('{"traceEvents": %s, "traceEvents": null, "traceEvents": "x"}', "null and text"),
        ('{"trace\\u0045vents": %s, "trace\\u0045vents": true}', "true"),  # whole document
    ],
    ids=["first", "last", "between-keys", "two-odd", "whole-document"],
)
def test_a_repeated_traceevents_that_is_no_array_is_a_broken_trace(
    tmp_path: Path, gz: bool, text: str, kinds: str
) -> None:
    """The arrays hold events (a trace, not "no trace"), but which events the file holds is
    ambiguous: refused in one line naming the file and what the odd value is."""
    with pytest.raises(TraceLoadError) as info:
        _load(tmp_path, _fill(text, _array(0, 2)), gz)
    message = str(info.value)
    assert message.endswith(
        f"t.json{'.gz' * gz}: {NOT_ALWAYS_AN_ARRAY} ({kinds} too): which events the file "
        "holds is ambiguous (edit the file to keep the arrays)"
    )
    assert "\n" not in message and info.value.exit_code == 2 and not info.value.not_a_trace


def test_a_non_array_after_a_large_streamed_array_is_refused(tmp_path: Path) -> None:
    """Met after megabytes of events streamed (and a plain file split between two processes):
    refused all the same, not a trace of the first array's events alone."""
    text = _fill('{"traceEvents": %s, "traceEvents": {"x": 1}}', _array(0, 200_000))
    assert len(text) > 16 << 20  # (the split load's threshold)
    with pytest.raises(TraceLoadError, match=NOT_ALWAYS_AN_ARRAY):
        _load(tmp_path, text)


def test_one_traceevents_that_is_no_array_is_still_no_trace(tmp_path: Path) -> None:
    with pytest.raises(TraceLoadError, match="traceEvents is not an array") as info:
        _load(tmp_path, '{"traceEvents": {"x": 1}}')
    assert info.value.not_a_trace


def test_the_whole_document_path_keeps_every_array(tmp_path: Path) -> None:
    """A file the streaming reader does not enter (its key spelled with an escape, so no
    ``"traceEvents"`` text is found): the fallback decode of the whole document reads every
    array too; and an escaped second key after a streamed first array is the same key."""
    text = _fill('{"trace\\u0045vents": %s, "trace\\u0045vents": %s}', _array(0, 2), _array(2, 4))
    trace = _load(tmp_path, text)
    assert _names(trace) == ["op0", "op1", "op2", "op3"]
    assert trace.load_report.repeated_keys == (("traceEvents", 2),)
    text = _fill('{"traceEvents": %s, "trace\\u0045vents": %s}', _array(0, 2), _array(2, 4))
    trace = _load(tmp_path, text)
    assert _names(trace) == ["op0", "op1", "op2", "op3"]
    assert trace.load_report.repeated_keys == (("traceEvents", 2),)


def test_the_commands_refuse_or_warn_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("two.json").write_text(
        _fill('{"traceEvents": %s, "traceEvents": %s}', _array(0, 2), _array(2, 4))
    )
    assert main(["export", "two.json", "-o", "o.json"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "neuron-prof: warning: two.json: traceEvents written 2 times: the events of all 2 "
        "arrays kept"
    ]
    assert len(json.loads(Path("o.json").read_text())["traceEvents"]) == 4
    Path("bad.json").write_text(
        _fill(
            '{"distributedInfo": {"rank": 0}, "traceEvents": %s, "distributedInfo": {"rank": 3}}',
            _array(0, 2),
        )
    )
    assert main(["analyze", "bad.json"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        'neuron-prof: error: bad.json: top-level key "distributedInfo" written 2 times with '
        "different values (which one holds is ambiguous: edit the file to keep one)"
    ]


def test_repeated_members_lists_every_member_only_when_one_repeats() -> None:
    import msgspec

    from neuron_profiler.trace.repair import repeated_members

    def members(text: bytes) -> list[tuple[str, bytes]] | None:
        return repeated_members(text, msgspec.json.decode(text, type=dict[str, msgspec.Raw]))

    assert members(b'{"a": 1, "b": "x,}\\"]", "c": {"a": 2}}') is None
    assert members(b' {\n "a" : [1, {"b": 2}] ,\n "b": 3, "a": {"x": "}"}\n} ') == [
        ("a", b'[1, {"b": 2}]'),
        ("b", b"3"),
        ("a", b'{"x": "}"}'),
    ]
    assert members(b'{"k\\u0061": 1, "ka": 1}') == [("ka", b"1"), ("ka", b"1")]


def test_member_array_finds_a_later_array_at_the_top_level_only() -> None:
    from neuron_profiler.trace.repair import member_array

    key = b'"traceEvents"'
    rest = b'], "x": {"traceEvents": [1]}, "y": "traceEvents", "traceEvents" : [ {}]}'
    at, start = member_array(rest, key, 2)
    assert rest[at:].startswith(key) and rest[start:].startswith(b" {}]")
    assert rest[:at].count(key) == 2  # the nested one and the string value were passed over
    assert member_array(b'], "traceEvents": 5}', key, 2) is None
    assert member_array(b'], "a": 1}, "traceEvents": [', key, 2) is None  # after the object


def test_under_a_directory_such_a_file_is_an_error_not_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not named as torch names its traces, but a trace: a broken one is an error there (exit
    2), never skipped as "not a trace" (a lost rank must not pass a ``--fail-on`` gate)."""
    from neuron_profiler.trace.loader import is_trace_file

    run = tmp_path / "run"
    run.mkdir()
    (run / "good.json").write_text(_fill('{"traceEvents": %s}', _array(0, 2)))
    bad = run / "bad.json"
    bad.write_text(
        _fill('{"distributedInfo": {"rank": 0}, "distributedInfo": {"rank": 1}, "traceEvents": %s}',
              _array(0, 2))
    )  # fmt: skip
    assert is_trace_file(bad)
    assert main(["analyze", str(run)]) == 2
    err = capsys.readouterr().err
    assert f'{bad}: top-level key "distributedInfo" written 2 times' in err
    assert "skipped" not in err
    bad.write_text(_fill('{"traceEvents": %s, "traceEvents": {"x": 1}}', _array(0, 2)))
    assert is_trace_file(bad)
    assert main(["analyze", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: traceEvents written more than once, not always as an array" in err
    assert "skipped" not in err
