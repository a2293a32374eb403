"""Every real trace in ../shared/traces loads; counts match an independent json.load count."""

from __future__ import annotations

import gzip
import json
import sys
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest
from conftest import SHARED_TRACES, all_shared_trace_files, shared_traces_dir

from neuron_profiler.trace import EventKind, load_trace
from neuron_profiler.trace import schema as S

FILES = all_shared_trace_files(SHARED_TRACES) if SHARED_TRACES.is_dir() else [None]


def _events_by_stdlib(path: Path) -> list[dict]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as fh:
        return json.load(fh)["traceEvents"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name if p else "no-shared")
def test_loads_with_every_event_accounted_for(path: Path | None) -> None:
    shared_traces_dir()
    events = _events_by_stdlib(path)
    trace = load_trace(path)
    non_meta = [e for e in events if e.get("ph") != "M"]
    assert len(trace) + trace.skipped_events == len(non_meta)
    assert trace.skipped_events == 0
    kernels = sum(  # (MTIA's stream waits, event records and DMA requests are no kernels)
        1
        for e in non_meta
        if str(e.get("cat", "")).lower() in ("kernel", "mtia_ccp_events")
        and e.get("name") not in ("event_wait", "event_record", "dma_request")
    )
    assert len(trace.select(kind=EventKind.KERNEL)) == kernels
    ts = trace.col(S.TS_NS)
    assert (ts[1:] >= ts[:-1]).all()
    # "External id", or 2021 Kineto's lowercase "external id" (the loader reads both)
    with_ext = sum(
        1 for e in non_meta if {"External id", "external id"} & (e.get("args") or {}).keys()
    )
    assert int((trace.col(S.EXTERNAL_ID) >= 0).sum()) == with_ext


def _exact_ns(value: object) -> int:
    return int((Decimal(str(value)) * 1000).to_integral_value(rounding=ROUND_HALF_UP))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name if p else "no-shared")
def test_times_names_and_threads_match_exact_decimal_reading(path: Path | None) -> None:
    """Every event's ts/dur in integer ns equals the file's decimal text (read with Decimal, so
    float64 rounding cannot hide an error), placed on baseTimeNanoseconds when present."""
    shared_traces_dir()
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as fh:
        doc = json.load(fh, parse_float=Decimal)
    base = int(doc.get("baseTimeNanoseconds", 0))
    events = [e for e in doc["traceEvents"] if e.get("ph") != "M"]
    assert not any(e.get("ph") in ("B", "E") for e in events)  # pairing is tested on fixtures
    trace = load_trace(path)

    def label(value: object, labels: dict[int, str]) -> str:
        return labels.get(value, str(value)) if isinstance(value, int) else str(value)

    want = sorted(
        (
            _exact_ns(e["ts"]) + base,
            _exact_ns(e.get("dur", 0)),
            e.get("name", ""),
            str(e.get("pid", 0)),
            str(e.get("tid", 0)),
        )
        for e in events
    )
    got = sorted(
        zip(
            trace.col(S.TS_NS).tolist(),
            trace.col(S.DUR_NS).tolist(),
            [trace.name(i) for i in range(len(trace))],
            [label(p, trace.pid_labels) for p in trace.col(S.PID).tolist()],
            [label(t, trace.tid_labels) for t in trace.col(S.TID).tolist()],
            strict=True,
        )
    )
    assert got == want
    names = {
        e["args"]["name"]
        for e in doc["traceEvents"]
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    assert set(trace.process_names.values()) == names


def test_generated_trace_matches_stdlib(tmp_path: Path) -> None:
    """bench/gen_trace.py output (the benchmark's input) loads exactly, flows and ids included."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from gen_trace import generate_file

    path = generate_file(30_000, tmp_path / "gen.json.gz", seed=3)
    with gzip.open(path, "rt") as fh:
        doc = json.load(fh, parse_float=Decimal)
    base = doc["baseTimeNanoseconds"]
    events = [e for e in doc["traceEvents"] if e["ph"] != "M"]
    trace = load_trace(path)
    assert len(trace) == len(events) and trace.skipped_events == 0
    assert trace.col(S.TS_NS).tolist() == sorted(_exact_ns(e["ts"]) + base for e in events)
    ids = lambda key: sorted(e.get("args", {}).get(key, -1) for e in events)  # noqa: E731
    assert sorted(trace.col(S.EXTERNAL_ID).tolist()) == ids("External id")
    assert sorted(trace.col(S.CORRELATION).tolist()) == ids("correlation")
    flows = sorted(e["id"] for e in events if e["ph"] in ("s", "f"))
    assert sorted(trace.col(S.FLOW_ID)[trace.col(S.FLOW_ID) >= 0].tolist()) == flows
    assert len(trace.select(kind=EventKind.FLOW)) == len(flows)
    assert set(trace.thread_names.values()) == {
        e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"
    }
