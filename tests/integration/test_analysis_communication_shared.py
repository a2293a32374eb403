"""Communication on the shared CUDA NCCL trace (A100 rank 0 of 2, DDP: NCCL AllReduce and
Broadcast kernels on their own stream): totals checked against a plain-Python interval walk over
the file's own kernel events, read here with ``json`` (no project code)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from neuron_profiler.analysis.communication import OUTSIDE_UNITS, communication
from neuron_profiler.analysis.context import AnalysisContext
from neuron_profiler.analysis.findings import findings
from neuron_profiler.trace import load_trace

NCCL = "hta/tests/data/nccl_parser_config/nccl_data.json.gz"


def _merge(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _length(spans: list[tuple[float, float]]) -> float:
    return sum(e - s for s, e in spans)


def _minus(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Length of a less b (both merged), walking b's intervals for each of a's."""
    left = 0.0
    for s, e in a:
        covered = sum(max(0.0, min(e, bs_e) - max(s, bs_s)) for bs_s, bs_e in b)
        left += e - s - covered
    return left


@pytest.fixture(scope="module")
def walk(shared_traces: Path) -> dict[str, float]:
    """The file's kernels: NCCL ones (communication) and the rest (compute), in µs."""
    events = json.loads(gzip.open(shared_traces / NCCL).read())["traceEvents"]
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    comm = [
        (e["ts"], e["ts"] + e["dur"], e["name"]) for e in kernels if e["name"].startswith("nccl")
    ]
    compute = _merge(
        [(e["ts"], e["ts"] + e["dur"]) for e in kernels if not e["name"].startswith("nccl")]
    )
    comm_union = _merge([(s, e) for s, e, _ in comm])
    all_reduce = _merge([(s, e) for s, e, n in comm if "AllReduce" in n])
    return {
        "count": len(comm),
        "collective": _length(comm_union),
        "exposed": _minus(comm_union, compute),
        "all_reduce_exposed": _minus(all_reduce, compute),
    }


def test_nccl_totals_match_an_interval_walk(shared_traces: Path, walk: dict[str, float]) -> None:
    ctx = AnalysisContext(load_trace(shared_traces / NCCL))
    comm = ctx.result(communication)
    t = comm.total
    assert t.collectives == walk["count"] == 21
    tol = 0.01 * walk["count"] * 2  # µs: the loader's ns rounding, per collective edge
    assert t.collective_ns / 1e3 == pytest.approx(walk["collective"], abs=tol)
    assert t.exposed_ns / 1e3 == pytest.approx(walk["exposed"], abs=tol)
    assert t.hidden_ns == t.collective_ns - t.exposed_ns
    assert dict(t.exposed_by_kind)["all_reduce"] / 1e3 == pytest.approx(
        walk["all_reduce_exposed"], abs=tol
    )
    # DDP, no FSDP: one row, nothing flagged, the finding advises on all-reduce buckets
    assert [u.name for u in comm.units] == [OUTSIDE_UNITS] and not comm.from_fsdp
    assert comm.flagged == () and t.peer_wait_ns == 0
    (f,) = [f for f in ctx.result(findings).findings if f.kind == "exposed_communication"]
    assert f.recoverable_ns == t.exposed_ns and "bucket" in f.suggestion
    assert sum(s.collectives for s in comm.steps) == t.collectives
