"""The id columns (External id, correlation, stream) of rows whose args the loader does not
decode: python_function rows (a ``with_stack`` trace's commonest) are kept apart, and their args
are decoded only where the text could spell an id key. Every row's ids and args must read as a
plain JSON reading of the file gives them, whichever way they were found."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from neuron_profiler.trace import _columns, load_trace
from neuron_profiler.trace import schema as S

ROWS = 3000  # python_function rows: several pieces, each with hundreds of them


def _deep(path: Path, odd: dict[int, object]) -> list[dict]:
    """cpu_op rows (External id) between python_function rows (Python ids only), each row's
    ts unique; ``odd``: python rows (by index) given these args instead."""
    events = []
    for i in range(ROWS):
        args = odd.get(i, {"Python parent id": i, "Python id": i + 1, "Python thread": 0})
        if i % 5 == 0:
            args = {**args, "Python module id": i} if isinstance(args, dict) else args
        events.append(
            {
                "ph": "X",
                "cat": "python_function",
                "name": f"<built-in method f{i % 7}>",
                "pid": 1,
                "tid": 1,
                "ts": 10.0 * i,
                "dur": 1.0,
                "args": args,
            }
        )
        if i % 4 == 0:
            events.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": "aten::mm",
                    "pid": 1,
                    "tid": 1,
                    "ts": 10.0 * i + 1,
                    "dur": 1.0,
                    "args": {"External id": 5000 + i, "Ev Idx": i},
                }
            )
    path.write_text(json.dumps({"traceEvents": events}))
    return events


def _expected(events: list[dict]) -> dict[float, tuple]:
    """ts -> (External id, correlation, stream, args) as a plain reading gives them."""
    out = {}
    for e in events:
        a = e["args"]
        if not isinstance(a, dict):
            continue
        out[e["ts"]] = (
            a.get("External id", -1),
            a.get("correlation", -1),
            a.get("stream", -1),
            a,
        )
    return out


def _read(trace) -> dict[float, tuple]:  # noqa: ANN001
    cols = trace.columns
    out = {}
    for row in range(len(trace)):
        args_row = int(cols[S.ARGS_ROW][row])
        args = msgspec.json.decode(trace.raw_args[args_row]) if args_row >= 0 else {}
        out[int(cols[S.TS_NS][row]) / 1000] = (
            int(cols[S.EXTERNAL_ID][row]),
            int(cols[S.CORRELATION][row]),
            int(cols[S.STREAM][row]),
            args,
        )
    return out


def test_python_rows_without_ids_are_not_decoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _deep(tmp_path / "t.json", {})
    decoded = {"objects": 0}
    real = _columns._decode_int_arg_ids

    def counted(buffer: bytes) -> list:
        out = real(buffer)
        decoded["objects"] += len(out)
        return out

    monkeypatch.setattr(_columns, "_decode_int_arg_ids", counted)
    trace = load_trace(tmp_path / "t.json")
    cpu_ops = sum(e["cat"] == "cpu_op" for e in events)
    assert decoded["objects"] == cpu_ops  # the python rows' args were never decoded
    assert _read(trace) == _expected(events)


@pytest.mark.parametrize(
    ("odd", "spelled"),
    [
        ({100: {"Python id": 1, "External id": 77}}, None),
        ({1500: {"Python id": 1, "correlation": 88}}, None),
        ({1800: {"stream": 9, "Python id": 2}}, None),
        ({2500: {"Python id": 4, "external id": 55}}, None),  # 2021 Kineto's spelling
        # keys whose one telling letter is escaped: only the backslash gives them away
        (
            {2200: {"Python id": 3, "External id": 987654}},
            ('"External id": 987654', '"E\\u0078ternal id": 987654'),
        ),
        (
            {2300: {"Python id": 3, "stream": 987653}},
            ('"stream": 987653', '"\\u0073tream": 987653'),
        ),
    ],
    ids=["external-id", "correlation", "stream", "2021-spelling", "escaped-x", "escaped-s"],
)
def test_python_rows_that_spell_an_id_keep_it(
    tmp_path: Path, odd: dict, spelled: tuple[str, str] | None
) -> None:
    events = _deep(tmp_path / "t.json", odd)
    if spelled is not None:  # the file spells the key with an escape
        plain_text, escaped = spelled
        text = (tmp_path / "t.json").read_text()
        assert text.count(plain_text) == 1
        (tmp_path / "t.json").write_text(text.replace(plain_text, escaped))
    trace = load_trace(tmp_path / "t.json")
    want = _expected(events)
    for i, args in odd.items():  # 2021's "external id" is read where "External id" is not
        if "external id" in args:
            ts = 10.0 * i
            want[ts] = (args["external id"], *want[ts][1:])
    assert _read(trace) == want


def test_python_rows_with_args_that_are_not_objects_are_skipped_as_before(
    tmp_path: Path,
) -> None:
    events = _deep(tmp_path / "t.json", {700: "text", 2000: [1, 2, 3]})  # (pieces apart)
    trace = load_trace(tmp_path / "t.json")
    assert trace.skipped_events == 2
    assert _read(trace) == _expected(events)
