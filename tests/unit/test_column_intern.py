"""String ids the loader gives names and categories: one table, ids in first-seen order over
the whole file (pieces decoded one after another), a string new in a later piece among known
ones getting the next id; events without a "cat" read as ""."""

from __future__ import annotations

import msgspec

from neuron_profiler.trace import schema as S
from neuron_profiler.trace._columns import ColumnSink


def _piece(*events: dict) -> bytes:
    return msgspec.json.encode(list(events))


def _event(name: str, cat: str | None, ts: int) -> dict:
    event = {"ph": "X", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 1}
    if cat is not None:
        event["cat"] = cat
    return event


def test_ids_in_first_seen_order_across_pieces() -> None:
    sink = ColumnSink()
    sink.add_piece(_piece(_event("a", "cpu_op", 0), _event("b", "cpu_op", 1)))
    sink.add_piece(  # known, new, known, new again, new twice, no cat
        _piece(
            _event("a", "cpu_op", 2),
            _event("ProfilerStep#1", "user_annotation", 3),
            _event("b", "kernel", 4),
            _event("ProfilerStep#1", "cpu_op", 5),
            _event("c", None, 6),
            _event("c", "kernel", 7),
        )
    )
    strings = list(sink.strings)
    # hand-worked: each piece's names, then its categories, in the order first met
    assert strings == ["a", "b", "cpu_op", "ProfilerStep#1", "c", "user_annotation", "kernel", ""]
    cols = sink.columns()
    names = [strings[i] for i in cols[S.NAME_ID].tolist()]
    cats = [strings[i] for i in cols[S.CAT_ID].tolist()]
    assert names == ["a", "b", "a", "ProfilerStep#1", "b", "ProfilerStep#1", "c", "c"]
    assert cats == [
        "cpu_op",
        "cpu_op",
        "cpu_op",
        "user_annotation",
        "kernel",
        "cpu_op",
        "",
        "kernel",
    ]
    no_cat = (cols[S.FORM] & S.Form.NO_CAT) != 0
    assert no_cat.tolist() == [False] * 6 + [True, False]


def test_a_name_spelled_like_the_no_cat_marker_is_a_name() -> None:
    from neuron_profiler.trace._columns import _NO_CAT

    sink = ColumnSink()
    sink.add_piece(_piece(_event(_NO_CAT, None, 0), _event("x", None, 1)))
    strings = list(sink.strings)
    assert strings == [_NO_CAT, "x", ""]  # the name kept; the missing cats read as ""
    cols = sink.columns()
    assert [strings[i] for i in cols[S.NAME_ID].tolist()] == [_NO_CAT, "x"]
    assert [strings[i] for i in cols[S.CAT_ID].tolist()] == ["", ""]
