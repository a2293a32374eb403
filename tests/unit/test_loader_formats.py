"""Timestamp formats the shared traces lack (tests/fixtures): string ts, ns resolution, absolute
µs without baseTimeNanoseconds, B/E pairs. Expectations come from the fixture text read with
``decimal.Decimal`` (exact), not from the loader."""

from __future__ import annotations

import json
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import numpy as np
import pytest

from neuron_profiler.trace import Phase, load_trace
from neuron_profiler.trace import schema as S

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _ns(value: object) -> int:
    us = Decimal(str(value)) if not isinstance(value, Decimal) else value
    return int((us * 1000).to_integral_value(rounding=ROUND_HALF_UP))


def _expected(name: str) -> tuple[list[tuple[int, int, str]], dict]:
    doc = json.loads((FIXTURES / name).read_text(), parse_float=Decimal)
    base = int(doc.get("baseTimeNanoseconds", 0))
    rows = [
        (_ns(e["ts"]) + base, _ns(e.get("dur", 0)), e.get("name", ""))
        for e in doc["traceEvents"]
        if e["ph"] != "M"
    ]
    return sorted(rows), doc


def _rows(trace) -> list[tuple[int, int, str]]:
    return sorted(
        zip(
            trace.col(S.TS_NS).tolist(),
            trace.col(S.DUR_NS).tolist(),
            [trace.name(i) for i in range(len(trace))],
            strict=True,
        )
    )


@pytest.mark.parametrize(
    "name", ["string_timestamps.json", "ns_resolution.json", "absolute_us.json"]
)
def test_timestamps_are_exact_ns(name: str) -> None:
    expected, _ = _expected(name)
    trace = load_trace(FIXTURES / name)
    assert trace.skipped_events == 0
    assert _rows(trace) == expected


def test_ns_resolution_keeps_digits_float64_would_lose() -> None:
    """Above 2**43 µs a float64 cannot hold the ns digit; the loader reads the digits."""
    trace = load_trace(FIXTURES / "ns_resolution.json")
    base = 1711964646000000000
    ts = set(trace.col(S.TS_NS).tolist())
    assert base + 9007199254740993 in ts  # 9007199254740.993 µs
    assert round(9007199254740.993 * 1000) != 9007199254740993  # what float64 would give
    assert base + 4458676522690655 in ts and base + 4458676522690656 in ts  # 1 ns apart


def test_absolute_us_without_base_time() -> None:
    trace = load_trace(FIXTURES / "absolute_us.json")
    assert "baseTimeNanoseconds" not in trace.metadata
    assert trace.col(S.TS_NS).min() == 1623142623460111 * 1000  # epoch µs taken as is
    labels = {trace.tid_labels[t] for t in trace.col(S.TID).tolist() if t < 0}
    assert labels == {"stream 7", ""}  # string tids interned, digit strings become ints
    assert 25738 in trace.col(S.TID).tolist()


def test_string_ids_and_args_are_converted() -> None:
    trace = load_trace(FIXTURES / "string_timestamps.json")
    ext = trace.col(S.EXTERNAL_ID)
    mm = next(i for i in range(len(trace)) if trace.name(i) == "aten::mm")
    assert ext[mm] == 17  # "External id": "17"
    assert trace.args(mm) == {"External id": "17"}  # args stay as written


def test_begin_end_pairs_nest_per_thread() -> None:
    trace = load_trace(FIXTURES / "begin_end.json")
    base = 10**18
    by_name = {trace.name(i): i for i in range(len(trace))}
    complete = {
        (trace.name(i), int(trace.col(S.TS_NS)[i]) - base, int(trace.col(S.DUR_NS)[i]))
        for i in range(len(trace))
        if trace.col(S.PH)[i] == Phase.COMPLETE
    }
    assert complete == {
        ("outer", 10_000, 20_000),
        ("inner", 12_000, 3_000),
        ("other thread", 11_000, 9_500),
        ("aten::mm", 13_000, 1_000),
    }
    assert trace.col(S.EXTERNAL_ID)[by_name["inner"]] == 5  # B's own args
    assert trace.col(S.EXTERNAL_ID)[by_name["other thread"]] == 6  # E's args when B has none
    assert trace.col(S.PH)[by_name["never closed"]] == Phase.BEGIN  # unmatched B kept
    ends = np.flatnonzero(trace.col(S.PH) == Phase.END)
    assert len(ends) == 1 and trace.col(S.TS_NS)[ends[0]] == base + 31_000  # unmatched E kept
    # 9 events in: 3 pairs merged into their B rows, every other event kept
    assert len(trace) + 3 == 9 and trace.skipped_events == 0


@pytest.mark.parametrize("meta_first", [False, True])
def test_text_ids_numbered_in_order_of_appearance(tmp_path: Path, meta_first: bool) -> None:
    """Text pids/tids ("Spans", "Traces") get label ids in the order the file first names
    them, whatever the interpreter's string hashing: exports then lay out tracks the same way
    in every run (a set's order made Perfetto files differ between runs)."""
    names = [f"queue {chr(ord('a') + i)}{i * 7919 % 23}" for i in range(24)]
    meta = [{"ph": "M", "name": "process_name", "pid": n, "args": {"name": n}} for n in names]
    spans = [
        {"ph": "X", "name": "op", "pid": n, "tid": f"t-{n}", "ts": i, "dur": 1}
        for i, n in enumerate(names)
    ]
    events = meta + spans if meta_first else spans + meta
    path = tmp_path / "labels.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = load_trace(path)
    pid_ids = sorted(i for i, text in trace.pid_labels.items() if text in names)
    assert [trace.pid_labels[i] for i in pid_ids] == names
    tid_texts = [
        trace.tid_labels[i] for i in sorted(trace.tid_labels) if trace.tid_labels[i][:2] == "t-"
    ]
    assert tid_texts == [f"t-{n}" for n in names]
