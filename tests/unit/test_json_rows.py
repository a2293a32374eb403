"""Rows held as columns (``json_rows.Rows``) are written as the dicts they stand for: the same
keys in the same order, the same values, byte for byte, through the report's encoder and
through the standard library's."""

from __future__ import annotations

import json
import math

import msgspec
import numpy as np
import pytest

from neuron_profiler.reports import json_report as J
from neuron_profiler.reports import json_rows
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


def test_few_rows_take_the_struct_path(monkeypatch: pytest.MonkeyPatch) -> None:
    rows, want = _array_rows()
    monkeypatch.setattr(json_rows, "MIN_COLUMN_ROWS", 8)
    assert isinstance(rows.encodable(), list)
    assert J._encode(rows) == msgspec.json.encode(want)


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


@pytest.fixture(autouse=True)
def _columns_for_few_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """The column path for these few rows too (a report takes it from MIN_COLUMN_ROWS rows)."""
    monkeypatch.setattr(json_rows, "MIN_COLUMN_ROWS", 1)


def _array_rows() -> tuple[Rows, list[dict]]:
    """numpy columns (a value or a list per row) and lists of strings, as a report holds
    them: constant columns, few distinct values, one per row, -0.0, NaN, infinities."""
    n = 7
    rng = np.random.default_rng(3)
    labels = [f"device {k}" for k in range(n)]
    odd = ["a, b", 'quote " ,', "µs 😀", "a, b", "", "\\", "x"]  # commas: no split at them
    window = rng.integers(0, 10**12, n) / 1e6
    pct = np.array([0.0, -0.0, 50.0, 0.0, math.nan, math.inf, -math.inf])
    steps = np.array([[0.0, 1.5], [0.0, 1.5], [2.0, 0.0], [0.0, 0.0]] + [[1e-06, 8e-06]] * 3)
    rows = Rows(
        n,
        {
            "device": np.arange(n, dtype=np.int64) * 1000,
            "label": labels,
            "odd": odd,
            "window ms": window,
            "pct": pct,
            "small": np.arange(n, dtype=np.float32) / 4,
            "big": np.full(n, 2**64 - 1, np.uint64),
            "by_cause_ms": {"same": np.zeros(n), "µ": np.full(n, 3, np.int32)},
            "per_step_ms": {"host": steps, "none": np.zeros((n, 0)), "empty": {}},
        },
    )
    want = [
        {
            "device": 1000 * k,
            "label": labels[k],
            "odd": odd[k],
            "window ms": window.tolist()[k],
            "pct": pct.tolist()[k],
            "small": k / 4,
            "big": 2**64 - 1,
            "by_cause_ms": {"same": 0.0, "µ": 3},
            "per_step_ms": {"host": steps.tolist()[k], "none": [], "empty": {}},
        }
        for k in range(n)
    ]
    return rows, want


def test_array_columns_are_written_as_their_dicts() -> None:
    rows, want = _array_rows()
    assert isinstance(rows.encodable(), msgspec.Raw)  # written from the columns at once
    assert J._encode({"d": rows}) == msgspec.json.encode({"d": want})
    assert J.document_text({"d": rows}) == J.document_text({"d": want})  # indented, escaped
    assert json.dumps(rows.dicts()) == json.dumps(want)
    one = Rows(1, {k: v[:1] for k, v in rows.columns.items() if not isinstance(v, dict)})
    assert J._encode(one) == msgspec.json.encode(
        [{k: v for k, v in want[0].items() if k in one.columns}]
    )


def test_array_columns_of_another_length_are_refused() -> None:
    with pytest.raises(ValueError):
        J._encode(Rows(3, {"a": np.arange(3), "b": {"c": np.zeros((2, 2))}}))


def test_rows_laid_out_a_chunk_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 3 rows over 7 (the last one short): the same bytes as the dicts'."""
    rows, want = _array_rows()
    monkeypatch.setattr(json_rows, "CHUNK_ROWS", 3)
    assert J._encode(rows) == msgspec.json.encode(want)


@pytest.mark.parametrize("chunk_rows", [2048, 3])
def test_rows_put_in_indented_at_their_depth(
    chunk_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI's document formats all but the rows, which are written already indented where
    their placeholders stand: the text msgspec's formatter gives the whole document."""
    monkeypatch.setattr(json_rows, "CHUNK_ROWS", chunk_rows)  # 3: pieces of 3 rows over 7
    rows, want = _array_rows()
    other, other_want = _rows()  # takes the Struct path
    tag = "\x00rows test "

    def doc(a: object, b: object) -> dict:
        return {"x": {"y": a, "n": 1}, "z": [b], "w": a}

    formatted = msgspec.json.format(
        msgspec.json.encode(doc(tag + "0", tag + "1") | {"w": tag + "2"}), indent=1
    )
    got = b"".join(J._spliced(formatted, msgspec.json.encode(tag)[1:-1], [rows, other, rows]))
    assert got == msgspec.json.format(msgspec.json.encode(doc(want, other_want)), indent=1)


@pytest.mark.parametrize("threads", [False, True])
def test_rows_held_a_chunk_at_a_time_while_written(
    threads: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that writes each piece before asking for the next holds a few chunks of rows
    at a time, not the whole array's text (60,000 devices' rows: ~50 MB each array); laid out
    by two threads, two columns' texts are made at once (their scratch arrays, a few MB here,
    on top) and up to ``AHEAD`` chunks wait."""
    import tracemalloc

    n = 40 * json_rows.CHUNK_ROWS
    monkeypatch.setattr(json_rows, "PARALLEL_ROWS", 1 if threads else n + 1)
    monkeypatch.setattr(json_rows, "usable_cores", lambda: 2)
    rng = np.random.default_rng(5)
    rows = Rows(
        n,
        {
            "device": np.arange(n, dtype=np.int64),
            "label": [f"device {k}" for k in range(n)],
            "per_step_ms": {"host": rng.integers(0, 10**9, (n, 4)) / 1e3},
            # the same in every row (a report's window, its cause names): text between values
            **{f"constant value {k}": np.full(n, 1.25) for k in range(8)},
        },
    )
    tag = "\x00rows test "
    formatted = msgspec.json.format(msgspec.json.encode({"d": tag + "0"}), indent=1)
    marker = msgspec.json.encode(tag)[1:-1]
    size = len(b"".join(J._spliced(formatted, marker, [rows])))
    tracemalloc.start()
    try:
        written = 0
        for piece in J._spliced(formatted, marker, [rows]):
            written += len(piece)
            del piece
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert written == size
    # the varying columns' texts (under half of the text here) and one chunk (0.47 in turn,
    # 0.64-0.77 with the threads); held whole, the text (1.0) comes on top of them
    assert peak < (0.9 if threads else 0.75) * size, (peak, size)


@pytest.mark.parametrize(
    "values",
    [
        [7],
        [1.5, -0.0, 8e-06, 1e20, 123456789.125, 0.1],
        list(range(-5, 300, 7)),
        ["device 0", "", "µs 😀", 'quote "', "x" * 40],
    ],
)
def test_texts_split_at_the_commas_of_the_list(values: list) -> None:
    """Each value's text as msgspec writes it in the list, NUL-padded: what
    ``body.split(b",")`` gives (no value here holds a comma)."""
    body = msgspec.json.encode(values)[1:-1]
    texts = json_rows._split_texts(body, len(values))
    assert texts.tolist() == body.split(b",")
    assert texts.tolist() == [msgspec.json.encode(v) for v in values]


@pytest.mark.parametrize("chunk_rows", [2048, 3, 1])
def test_rows_laid_out_by_two_threads_as_by_one(
    chunk_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From PARALLEL_ROWS rows, the columns' texts and the chunks are made by two threads: the
    same bytes, in order; the threads end with the text, or when a writer stops early (a
    process with threads left running would fork no child)."""
    import threading

    monkeypatch.setattr(json_rows, "CHUNK_ROWS", chunk_rows)
    rows, want = _array_rows()
    serial = b"".join(rows.text(2))
    before = threading.active_count()
    monkeypatch.setattr(json_rows, "PARALLEL_ROWS", 1)
    monkeypatch.setattr(json_rows, "usable_cores", lambda: 2)
    pieces = rows.text(2)
    assert next(pieces) == serial[: len(b"[\n   ")]
    assert threading.active_count() > before  # (the worker threads run)
    assert b"".join([serial[: len(b"[\n   ")], *pieces]) == serial
    assert threading.active_count() == before
    assert J._encode(rows) == msgspec.json.encode(want)  # (compact: the same path)
    stopped = rows.text(2)
    next(stopped), next(stopped)
    stopped.close()
    assert threading.active_count() == before


def test_equal_columns_share_their_texts_only_when_written_alike() -> None:
    """Columns equal bit for bit are written once and their texts shared; columns equal as
    numbers but written differently (0.0 and -0.0, 3 and 3.0) keep their own texts."""
    n = 5
    zeros = np.array([0.0, 1.5, math.nan, 0.0, 2.0])
    rows = Rows(
        n,
        {
            "a": zeros,
            "b": zeros.copy(),  # the same bits: shared
            "c": np.array([-0.0, 1.5, math.nan, 0.0, 2.0]),  # == a, another text
            "d": np.array([3, 1, 2, 0, 2], np.int64),
            "e": np.array([3.0, 1.0, 2.0, 0.0, 2.0]),  # == d, another text
            "f": {"g": np.array([3, 1, 2, 0, 2], np.int64)},  # the same as d: shared
        },
    )
    columns = [column for _, column in json_rows._slots(rows.columns)[0]]
    assert json_rows._first_equal(columns) == [0, 0, 2, 3, 4, 3]
    want = [
        {
            k: (v.tolist()[i] if k != "f" else {"g": v["g"].tolist()[i]})
            for k, v in rows.columns.items()
        }
        for i in range(n)
    ]
    assert J._encode(rows) == msgspec.json.encode(want)
