"""The loader's slow path (``trace/repair.py``): repaired text means what the input meant, read
by Python's own ``json`` (which accepts NaN and lone surrogates) as the reference."""

from __future__ import annotations

import json
import re

import msgspec
import pytest

from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.repair import (
    DAMAGE,
    ELEMENT,
    END,
    INCOMPLETE,
    Repair,
    close_of,
    repair_value,
    split_elements,
)


def _reference(text: bytes) -> object:
    """What Python's json reads, with NaN/Infinity as their words and surrogates as U+FFFD."""

    def fix(value: object) -> object:
        if isinstance(value, float) and (value != value or abs(value) == float("inf")):
            return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
        if isinstance(value, str):
            return re.sub("[\ud800-\udfff]", "\ufffd", value)
        if isinstance(value, list):
            return [fix(v) for v in value]
        if isinstance(value, dict):
            return {fix(k): fix(v) for k, v in value.items()}
        return value

    return fix(json.loads(text))


@pytest.mark.parametrize(
    "text, how",
    [
        (b'{"v": NaN, "w": Infinity, "x": -Infinity, "y": 1}', Repair.VALUES),
        (
            b'{"a": "\\ud800", "b": "x\\udc00", "c": "\\ud83d\\ude00", "d": "\\ud800\\ud800\\udc00"}',
            Repair.TEXT,
        ),
        (b'{"a": "\\ud83d"}', Repair.TEXT),
        (b'[1, "two", {"three": [3.5, null, true]}]', Repair.NONE),
    ],
)
def test_repaired_text_means_what_python_reads(text: bytes, how: Repair) -> None:
    fixed, got = repair_value(text, 50)
    assert got == how
    assert msgspec.json.decode(fixed) == _reference(text)


def test_numbers_beyond_float_and_bad_bytes() -> None:
    fixed, how = repair_value(b'{"n": 1e400, "m": -2E+999, "k": 12, "s": "caf\xe9"}', 50)
    assert how == Repair.VALUES | Repair.TEXT
    assert msgspec.json.decode(fixed) == {"n": "1e400", "m": "-2E+999", "k": 12, "s": "caf\ufffd"}


def test_a_member_nested_too_deeply_becomes_the_marker() -> None:
    deep = b"[" * 30 + b"]" * 30
    fixed, how = repair_value(b'{"name": "x", "args": {"d": ' + deep + b'}, "ts": 1}', 10)
    assert how == Repair.NESTING
    assert msgspec.json.decode(fixed) == {
        "name": "x",
        "ts": 1,
        "args": {V.ARG_REPLACED: "nested deeper than 10 levels"},
    }


def test_split_elements_agrees_with_json() -> None:
    items = [{"a": '],}{["', "b": [1, {"c": "}"}]}, [1, [2]], 3, "x,y", {"e": {}}]
    body = json.dumps(items).encode()[1:] + b', "k": 1}'
    spans = list(split_elements(body))
    assert [k for k, _, _ in spans] == [ELEMENT] * len(items) + [END]
    assert [json.loads(body[s:e]) for k, s, e in spans if k == ELEMENT] == items
    end = spans[-1][1]
    assert body[end : end + 1] == b"]" and close_of(body[end:], 2) == len(body) - end
    assert [k for k, _, _ in split_elements(b'{"a": 1}, {"b": "un')][-1] == INCOMPLETE
    assert list(split_elements(b'{"a": 1}}'))[-1] == (DAMAGE, 8, 8)


def _spaced(text: bytes) -> bytes:
    """Every bracket its own token (no brackets in strings here)."""
    return re.sub(rb"([\[\]{}])", rb"\1 ", text)


@pytest.mark.parametrize(
    "body",
    [
        b'{"a": [[{"b": ' + b"[" * 3000 + b"]" * 3000 + b"}]]}, [[[]]], 3]}], " + b'"k": 1}',
        b"[[1]], {}]",  # the closing bracket of the array in a run
        b"[1]}]",  # a brace at depth 0 inside a run: damage there
        b'{"a": [[[[[1]]]]], "b": [[2]]}, [[[3',  # cut inside a run's value
    ],
)
def test_brackets_in_runs_read_as_one_at_a_time(body: bytes) -> None:
    """A run of brackets (``[[[``, ``]}]``) is one match: splitting, closing and the repair of
    a member nested too deeply read it as the same brackets one per token."""
    spaced = _spaced(body)
    runs, one_by_one = list(split_elements(body)), list(split_elements(spaced))
    assert [k for k, _, _ in runs] == [k for k, _, _ in one_by_one]
    for (kind, s, e), (_, s1, e1) in zip(runs, one_by_one, strict=True):
        if kind == ELEMENT:
            fixed, how = repair_value(body[s:e], 4)
            fixed_spaced, how_spaced = repair_value(spaced[s1:e1], 4)
            assert how == how_spaced
            assert msgspec.json.decode(fixed) == msgspec.json.decode(fixed_spaced)
        elif kind in (END, DAMAGE):
            assert body[s : s + 1] == spaced[s1 : s1 + 1] in (b"]", b"}")
            assert body.count(b"[", 0, s) == spaced.count(b"[", 0, s1)
    ends = [close_of(body, 2), close_of(spaced, 2)]
    assert (ends[0] is None) == (ends[1] is None)
    if ends[0] is not None:
        assert body[: ends[0]].count(b"]") == spaced[: ends[1]].count(b"]")
