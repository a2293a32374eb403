"""The analyses' batch args readers against decoding each row's args on its own."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from neuron_profiler.analysis._args import arg_values, args_spelling, as_float
from neuron_profiler.trace import _stream, load_trace
from neuron_profiler.trace.model import Trace


@pytest.fixture
def many_buffers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Trace:
    """A trace loaded in many pieces (so its raw args span many buffers), with the key spelled
    at top level, nested, inside strings, escaped, as the start of another key, and not at
    all."""
    monkeypatch.setattr(_stream, "BLOCK_BYTES", 900)
    rng = random.Random(5)
    events = []
    for i in range(700):
        args: dict = {"External id": i}
        pick = i % 7
        if pick == 0:
            args["flops"] = rng.choice([10, 2.5, None, "x", True, 10**20])
        elif pick == 1:
            args["nested"] = {"flops": 3}
        elif pick == 2:
            args["note"] = 'say "flops": 4'
        elif pick == 3:
            args["flops\\"] = 1
        elif pick == 4:
            args = {}
        elif pick == 5:  # the key's text without its closing quote, last in the args too
            args = {"flopsy": 1, "External id": i, "x": "flops"} if i % 2 else {"flops_": 2}
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": f"k{i}",
                "pid": 0,
                "tid": 7,
                "ts": i,
                "dur": 1,
                **({"args": args} if args else {}),
            }
        )
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = load_trace(path)
    assert len(trace.raw_args._buffers) > 10  # type: ignore[attr-defined]
    return trace


def test_arg_values_equal_per_row_decoding(many_buffers: Trace) -> None:
    trace = many_buffers
    rows = np.arange(len(trace))[::-1][::2]  # out of order and a subset
    got = arg_values(trace, rows, ("flops", "External id", "absent"))
    for j, row in enumerate(rows.tolist()):
        args = trace.args(row)
        assert got["flops"][j] == args.get("flops")
        assert got["External id"][j] == args.get("External id")
        assert got["absent"][j] is None


def test_spelling_is_a_superset_of_the_key_and_exact_on_the_text(many_buffers: Trace) -> None:
    """args_spelling is the cheap filter before decoding: it must flag every row that has the
    key, and it flags exactly the rows whose args text holds the quoted key."""
    trace = many_buffers
    have = np.flatnonzero(trace.col("args_row") >= 0)
    index = trace.col("args_row")[have]
    hits = args_spelling(trace.raw_args, index, "flops")
    texts = [trace.raw_args[i] for i in index.tolist()]
    assert hits.tolist() == [b'"flops"' in t for t in texts]
    with_key = np.array(["flops" in trace.args(int(r)) for r in have], dtype=bool)
    assert with_key.any() and (hits[with_key]).all()
    either = args_spelling(trace.raw_args, index, "flops", "External id")
    assert either.tolist() == [b'"flops"' in t or b'"External id"' in t for t in texts]
    assert hits.sum() < either.sum() < len(texts)  # (the check sees both keys, not every row)


@pytest.mark.parametrize(
    "buffer",
    [
        b'"flops"',
        b'{"flops": 1, "bytes": 2}"flops"',
        b'"flop", "flopss", "bytes" "flops',  # a needle cut off by the buffer's end
        b'x"bytes"""flops""bytes"',
        b'"fl\\u006fps" "FLOPS" flops',
        b"",
        b'"',
    ],
)
def test_positions_are_every_start_of_a_needle(buffer: bytes) -> None:
    """The numpy search finds every place a needle starts, as a scan with ``find`` does."""
    from neuron_profiler.analysis._args import _positions

    needles = [b'"flops"', b'"bytes"']
    want = sorted(
        k for needle in needles for k in range(len(buffer)) if buffer.startswith(needle, k)
    )
    assert sorted(_positions(buffer, needles).tolist()) == want


def test_as_float() -> None:
    values = np.empty(7, dtype=object)
    values[:] = [1, 2.5, None, True, "3", 2**70, -4]
    out = as_float(values)
    assert out[:2].tolist() == [1.0, 2.5] and np.isnan(out[2:5]).all()
    assert out[5] == float(2**70) and out[6] == -4.0
    plain = np.empty(3, dtype=object)
    plain[:] = [None, 7, 0.5]
    assert np.isnan(as_float(plain)[0]) and as_float(plain)[1:].tolist() == [7.0, 0.5]


@pytest.fixture
def sparse_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Trace:
    """A trace where few rows hold the key (so only those are decoded): plainly, nested,
    quoted inside a string, and spelled with a JSON escape (``"fl\\u006fps"`` is ``flops``)."""
    monkeypatch.setattr(_stream, "BLOCK_BYTES", 900)
    lines = []
    for i in range(600):
        args = {0: f'"flops": {i}', 1: '"nested": {"flops": 3}', 2: '"note": "say \\"flops\\""'}
        text = args.get(i % 50, f'"other": {i}')
        if i % 50 == 3:
            text = f'"fl\\u006fps": {i}'
        event = f'"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": {i}, "dur": 1'
        lines.append(f'{{{event}, "args": {{"External id": {i}, {text}}}}}')
    path = tmp_path / "sparse.json"
    path.write_text('{"traceEvents": [\n' + ",\n".join(lines) + "\n]}")
    trace = load_trace(path)
    assert len(trace.raw_args._buffers) > 10  # type: ignore[attr-defined]
    return trace


def test_arg_values_of_a_sparse_key_equal_per_row_decoding(sparse_key: Trace) -> None:
    trace = sparse_key
    rows = np.arange(len(trace))[::-1]
    got = arg_values(trace, rows, ("flops", "absent"))
    expected = [trace.args(r).get("flops") for r in rows.tolist()]
    assert got["flops"].tolist() == expected
    assert sum(v is not None for v in expected) == 24  # plain and escaped, 12 of each
    assert (got["absent"] == None).all()  # noqa: E711 - elementwise
    assert arg_values(trace, rows[:0], ("flops",))["flops"].tolist() == []


def test_distinct_is_numpy_unique_of_integers() -> None:
    """``_intervals.distinct`` (np.unique without its numpy.ma import) against np.unique."""
    from neuron_profiler.analysis._intervals import distinct

    rng = np.random.default_rng(7)
    for values in (
        rng.integers(-5, 5, 1000),
        np.zeros(0, np.int64),
        np.array([3]),
        rng.integers(0, 2**40, 50),
    ):
        assert np.array_equal(distinct(values), np.unique(values))
