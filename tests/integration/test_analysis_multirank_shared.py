"""Two ranks of one real NCCL job (the shared ``trace_filter/sampled_rank-{0,1}.json.gz``): the
cross-rank analysis matches their NCCL kernels by order on each stream, aligns the clocks on
kernel ends and derives arrival skew; every figure is recomputed here from the raw JSON. Then
the same files through a process pool and through a Dask ``LocalCluster`` give equal JSON."""

from __future__ import annotations

import gzip
import json
import os
import unittest.mock
from decimal import Decimal
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from neuron_profiler.cli.main import main
from neuron_profiler.reports.json_report import schema_text

FILES = ("sampled_rank-0.json.gz", "sampled_rank-1.json.gz")


@pytest.fixture(scope="module")
def pair(shared_traces: Path) -> list[Path]:
    return [shared_traces / "hta" / "tests" / "data" / "trace_filter" / f for f in FILES]


def raw_facts(path: Path) -> dict:
    """Per stream, the NCCL kernels' (start, end) in ns, in time order; the step count."""
    doc = json.loads(gzip.open(path).read(), parse_float=Decimal)  # µs at 1e15: exact ns
    streams: dict[int, list[tuple[int, int]]] = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "kernel" and e["name"].startswith("nccl"):
            start = int(e["ts"] * 1000)
            streams.setdefault(e["args"]["stream"], []).append(
                (start, start + int(e["dur"] * 1000))
            )
    steps = sum(
        e.get("ph") == "X" and e["name"].startswith("ProfilerStep#") for e in doc["traceEvents"]
    )
    return {
        "rank": doc["distributedInfo"]["rank"],
        "steps": steps,
        "streams": {s: sorted(v) for s, v in streams.items()},
    }


def analyze_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    assert main(["analyze", "--json", *args]) == 0
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, json.loads(schema_text()))
    return doc


def test_sampled_pair_matches_collectives_by_order(
    pair: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    facts = [raw_facts(p) for p in pair]
    assert [f["rank"] for f in facts] == [0, 1]
    doc = analyze_json([str(p) for p in pair], capsys)
    d = doc["distributed"]
    assert d["available"] and len(d["spans"]) == 1
    span = d["spans"][0]
    assert span["ranks"] == [0, 1] and span["world_size"] == 128
    rows = {r["rank"]: r for r in span["ranks_summary"]}
    assert [rows[r]["steps"] for r in (0, 1)] == [f["steps"] for f in facts]
    # clocks: rank 1's offset is the median over every matched pair of (its end - rank 0's)
    streams = sorted(set(facts[0]["streams"]) & set(facts[1]["streams"]))
    pairs = {
        s: list(zip(facts[0]["streams"][s], facts[1]["streams"][s], strict=False)) for s in streams
    }  # by order; the longer list's tail is unmatched
    ends = [b[1] - a[1] for s in streams for a, b in pairs[s]]
    offset = int(np.median(ends))
    assert rows[1]["clock_offset_us"] == pytest.approx(offset / 1e3, abs=1e-3)
    assert rows[0]["clock_offset_us"] == 0
    by_group = {c["group"]: c for c in span["collectives"]}
    assert sorted(by_group) == sorted(f"stream {s}" for s in streams)
    late_total = {0: 0, 1: 0}
    for s in streams:
        c = by_group[f"stream {s}"]
        n = min(len(facts[0]["streams"][s]), len(facts[1]["streams"][s]))
        assert c["calls"] == n
        arrivals = np.array([[a[0] for a, _ in pairs[s]], [b[0] - offset for _, b in pairs[s]]])
        skew = arrivals.max(axis=0) - arrivals.min(axis=0)
        assert c["mean_skew_ms"] == pytest.approx(skew.mean() / 1e6, abs=1e-6)
        assert c["max_skew_ms"] == pytest.approx(skew.max() / 1e6, abs=1e-6)
        # the later rank is late; an exact tie names no rank
        late = np.where(arrivals[0] == arrivals[1], -1, np.argmax(arrivals, axis=0))
        per_rank = {p["rank"]: p for p in c["per_rank"]}
        for r in (0, 1):
            assert per_rank[r]["late"] == int((late == r).sum())
            late_total[r] += int((late == r).sum())
            wait = (arrivals.max(axis=0) - arrivals[r]).sum()
            assert per_rank[r]["wait_skew_ms"] == pytest.approx(wait / 1e6, abs=1e-6)
            assert per_rank[r]["wait_recorded_ms"] is None  # NCCL records no wait slices
    assert {r: rows[r]["late_arrivals"] for r in (0, 1)} == late_total
    unmatched = sum(abs(len(facts[0]["streams"][s]) - len(facts[1]["streams"][s])) for s in streams)
    assert sum(u["calls"] for u in span["unmatched"]) == unmatched
    assert len(doc["traces"]) == 2 and doc["errors"] == []


@pytest.mark.slow
def test_process_pool_and_dask_give_equal_json(
    pair: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    distributed = pytest.importorskip("distributed")
    files = [str(p) for p in pair]
    serial = analyze_json(["--jobs", "1", *files], capsys)
    pooled = analyze_json(["--jobs", "2", *files], capsys)
    # (Dask's Nanny sets its workers' environment in this process, MALLOC_TRIM_THRESHOLD_ and
    # OMP_NUM_THREADS among it: restored after, so later tests' children do not inherit it)
    with (
        unittest.mock.patch.dict(os.environ),
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
    ):
        dask = analyze_json(["--scheduler", cluster.scheduler_address, *files], capsys)
    assert pooled == serial
    assert dask == serial
    assert serial["distributed"]["available"]


def test_unreachable_scheduler_is_one_error_line(
    pair: list[Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("distributed")
    from ranks import free_port

    from neuron_profiler.cli import workers

    monkeypatch.setattr(workers, "CONNECT_TIMEOUT_S", 2)
    code = main(
        ["analyze", "--json", "--scheduler", f"tcp://127.0.0.1:{free_port()}", *map(str, pair)]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("neuron-prof: error:") == 1 and "cannot connect" in err


def test_malformed_scheduler_address_is_one_error_line(
    pair: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """dask raises ValueError (not OSError) for an address without a port: it was a traceback."""
    pytest.importorskip("distributed")
    code = main(["analyze", "--json", "--scheduler", "garbage", *map(str, pair)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("neuron-prof: error:") == 1 and "--scheduler garbage" in err
    assert "Traceback" not in err
