"""Rows held as columns (``json_rows.Rows``) are written as the dicts they stand for: the same
keys in the same order, the same values, byte for byte, through the report's encoder and
through the standard library's."""

from __future__ import annotations

import json
import math

import msgspec
import pytest

from neuron_profiler.reports import json_report as J
from neuron_profiler.reports.json_rows import Rows


def _rows() -> tuple[Rows, list[dict]]:
    """Columns of every kind a report writes, and the dicts written out by hand."""
    labels = ["device 0", "a, b", 'quote " ,', "µs 😀"]
    rows = Rows(
        4,
        {
            "device": [0, 1, 2, 70000],
            "label": labels,
            "window ms": [1.5, 0.0, 8e-06, 1e20],  # a key that is no identifier
            "gaps": [3, 0, None, -1],
            "by_cause_ms": {"other": [0.25, 1.0, 2.0, 3.0], "µ": [True, False, True, False]},
            "per_step_ms": {
                "host": [[0.0, 1.5], [], [2.0], [math.nan, 1.0]],
                "empty": {},
            },
        },
    )
    want = [
        {
            "device": d,
            "label": label,
            "window ms": w,
            "gaps": g,
            "by_cause_ms": {"other": o, "µ": m},
            "per_step_ms": {"host": h, "empty": {}},
        }
        for d, label, w, g, o, m, h in zip(
            [0, 1, 2, 70000],
            labels,
            [1.5, 0.0, 8e-06, 1e20],
            [3, 0, None, -1],
            [0.25, 1.0, 2.0, 3.0],
            [True, False, True, False],
            [[0.0, 1.5], [], [2.0], [math.nan, 1.0]],
            strict=True,
        )
    ]
    return rows, want


def test_rows_are_written_as_their_dicts() -> None:
    rows, want = _rows()
    got = rows.dicts()
    assert json.dumps(got) == json.dumps(want)  # (NaN: equal text, not equal values)
    assert [list(d) for d in got] == [list(d) for d in want]  # key order
    doc = {"before": 1, "devices": rows, "after": [rows]}
    plain = {"before": 1, "devices": want, "after": [want]}
    assert J._encode(doc) == msgspec.json.encode(plain)
    assert J.document_text({"d": rows}) == J.document_text({"d": want})  # indented, escaped


def test_no_rows_and_rows_without_columns() -> None:
    assert J._encode(Rows(0, {"a": [], "b": {"c": []}})) == b"[]"
    assert Rows(0, {"a": []}).dicts() == []
    assert J._encode(Rows(2, {})) == b"[{},{}]"
    assert Rows(2, {}).dicts() == [{}, {}]


def test_columns_of_another_length_are_refused() -> None:
    with pytest.raises(ValueError):
        J._encode(Rows(3, {"a": [1, 2, 3], "b": [1, 2]}))
    with pytest.raises(ValueError):
        Rows(3, {"a": [1, 2, 3], "b": {"c": [1]}}).dicts()


def test_plain_section_holds_dicts() -> None:
    rows, want = _rows()
    section = J._plain({"devices": rows, "steps": ["1"]})
    assert json.dumps(section) == json.dumps({"devices": want, "steps": ["1"]})
