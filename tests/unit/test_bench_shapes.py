"""bench/gen_shapes.py's shapes (the analysis bench's inputs) load with the structure each was
generated with: processes, python_function depth and parent links, flows, 2021 categories and
absolute times, ranks and their collectives. Expectations come from the generator's parameters
and counts, or from the file read with the standard library, never from our analysis."""

from __future__ import annotations

import gzip
import json
import sys
from collections import Counter
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from neuron_profiler.trace import EventKind, load_trace
from neuron_profiler.trace import schema as S

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from gen_shapes import (  # noqa: E402
    HOST_PID,
    MAIN_TID,
    NCCL_STREAM,
    OLD_START_US,
    STREAM,
    generate,
)


def _events(path: Path) -> list[dict]:
    """The file's events by the standard library (times exact, as Decimal)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as fh:
        return json.load(fh, parse_float=Decimal)["traceEvents"]


def _rows(trace, kind: EventKind) -> np.ndarray:  # noqa: ANN001
    return trace.select(kind=kind)


def test_meta_shape_has_a_process_per_queue(tmp_path: Path) -> None:
    processes, kernels = 150, 2
    case = generate("meta", tmp_path / "meta", processes, seed=1, kernels=kernels)
    trace = load_trace(case.target)
    assert trace.skipped_events == 0 and not trace.load_warnings()
    assert set(trace.process_names) == {HOST_PID, *range(processes)}
    assert set(trace.process_sort_index) == set(trace.process_names)
    assert {(p, STREAM) for p in range(processes)} <= set(trace.thread_names)
    assert {(p, STREAM) for p in range(processes)} <= set(trace.thread_sort_index)
    labels = [m for m in trace.meta_events if m.name == "process_labels"]
    assert len(labels) == processes + 1
    assert len(trace.meta_events) == 5 * processes + 5  # 5 per queue, host: 3 + 2 (one thread)
    k = _rows(trace, EventKind.KERNEL)
    assert np.bincount(trace.col(S.PID)[k]).tolist() == [kernels] * processes
    launches = _rows(trace, EventKind.RUNTIME)
    corr = trace.col(S.CORRELATION)
    assert sorted(corr[k]) == sorted(corr[launches])  # every kernel has its launch
    flows = _rows(trace, EventKind.FLOW)
    assert sorted(trace.col(S.FLOW_ID)[flows]) == sorted(np.repeat(corr[k], 2))
    steps = [trace.name(r) for r in _rows(trace, EventKind.USER_ANNOTATION)]
    assert steps == [f"ProfilerStep#{n}" for n in range(case.manifest["steps"])]


def _python_depths(trace, rows: np.ndarray) -> tuple[list[int], dict[int, int]]:  # noqa: ANN001
    """Each python row's nesting depth among python rows (by time containment) and the
    ``Python id`` of the row enclosing it (0 at the top)."""
    ts, dur = trace.col(S.TS_NS)[rows], trace.col(S.DUR_NS)[rows]
    order = np.lexsort((-dur, ts))
    stack: list[tuple[int, int]] = []  # (end, python id)
    depths, parent_of = [], {}
    for i in order:
        start, end = int(ts[i]), int(ts[i] + dur[i])
        while stack and stack[-1][0] <= start:
            stack.pop()
        pid = trace.args(int(rows[i]))["Python id"]
        parent_of[pid] = stack[-1][1] if stack else 0
        stack.append((end, pid))
        depths.append(len(stack))
    return depths, parent_of


def test_deep_shape_nests_python_functions(tmp_path: Path) -> None:
    low, high = 20, 40
    case = generate("deep", tmp_path / "deep", 1_500, seed=2, depth=(low, high))
    trace = load_trace(case.target)
    assert trace.skipped_events == 0 and not trace.load_warnings()
    rows = _rows(trace, EventKind.PYTHON)
    counts = case.manifest["files"]["deep.pt.trace.json"]
    assert len(rows) == counts["python_function"]
    assert set(trace.col(S.TID)[rows]) == {MAIN_TID}
    depths, parent_of = _python_depths(trace, rows)
    assert max(depths) == case.manifest["python_max_depth"]
    assert low <= case.manifest["python_min_leaf_depth"] and max(depths) <= high
    # the file's parent links agree with the nesting the loader's times give
    links = {
        trace.args(int(r))["Python id"]: trace.args(int(r))["Python parent id"] or 0 for r in rows
    }
    assert links == parent_of
    # every op and launch sits under a python leaf at least ``low`` deep
    ops = _rows(trace, EventKind.CPU_OP)
    assert len(ops) == counts["cpu_op"] == 2 * case.manifest["python_ops"]
    py_ts, py_end = trace.col(S.TS_NS)[rows], trace.col(S.TS_NS)[rows] + trace.col(S.DUR_NS)[rows]
    for r in ops[::7]:
        t = trace.col(S.TS_NS)[r]
        assert np.count_nonzero((py_ts <= t) & (py_end >= t)) >= low


def test_flows_shape_links_every_op(tmp_path: Path) -> None:
    case = generate("flows", tmp_path / "flows", 1_500, seed=3, first_seq=19_900)
    assert case.manifest["shared_flow_ids"] > 50  # fwdbwd and ac2g flows with the same id
    trace = load_trace(case.target)
    assert trace.skipped_events == 0 and not trace.load_warnings()
    events = _events(case.files[0])
    want = Counter((e["cat"], e["ph"], e["id"]) for e in events if e["ph"] in "sf")
    flows = _rows(trace, EventKind.FLOW)
    got = Counter(
        (trace.category(r), "s" if trace.col(S.PH)[r] == S.Phase.FLOW_START else "f",
         int(trace.col(S.FLOW_ID)[r]))
        for r in flows
    )  # fmt: skip
    assert got == want
    pairs, lone = case.manifest["flow_pairs"], case.manifest["lone_flow_ends"]
    assert len(flows) == 2 * (pairs["ac2g"] + pairs["fwdbwd"]) + lone
    assert pairs["fwdbwd"] == sum(1 for e in events if e.get("name", "").startswith("autograd"))
    kernels = _rows(trace, EventKind.KERNEL)
    assert pairs["ac2g"] == len(kernels)  # one pair per launch


def test_old_shape_keeps_2021_categories_and_absolute_times(tmp_path: Path) -> None:
    case = generate("old", tmp_path / "old", 1_500, seed=4)
    trace = load_trace(case.target)
    assert trace.skipped_events == 0 and not trace.load_warnings()
    assert "baseTimeNanoseconds" not in trace.metadata
    counts = case.manifest["files"][case.files[0].name]
    cats = Counter(trace.category(r) for r in range(len(trace)))
    for cat in ("Operator", "Runtime", "Kernel", "Memcpy", "Memset"):
        assert cats[cat] == counts[cat], cat
    assert cats["async"] == counts["async s"] + counts["async f"]
    kinds = {
        EventKind.CPU_OP: counts["Operator"],
        EventKind.RUNTIME: counts["Runtime"],
        EventKind.KERNEL: counts["Kernel"],
        EventKind.MEMCPY: counts["Memcpy"],
        EventKind.MEMSET: counts["Memset"],
    }
    for kind, n in kinds.items():
        assert len(_rows(trace, kind)) == n, kind
    assert int(trace.col(S.TS_NS).min()) == OLD_START_US * 1000  # absolute µs, no base
    device = trace.mask(kind=[EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET])
    assert (trace.col(S.EXTERNAL_ID)[device] > 0).all()  # lower-case "external id"
    assert set(trace.thread_names.values()) == {"thread 25738 (python)"}


def test_ranks_shape_is_one_file_per_rank(tmp_path: Path) -> None:
    ranks = 3
    case = generate("ranks", tmp_path / "ranks", 1_200, seed=5, ranks=ranks)
    assert case.target == case.folder and len(case.files) == ranks
    for rank, path in enumerate(case.files):
        trace = load_trace(path)
        assert trace.skipped_events == 0 and not trace.load_warnings()
        info = trace.metadata["distributedInfo"]
        assert (info["rank"], info["world_size"]) == (rank, ranks)
        kernels = _rows(trace, EventKind.KERNEL)
        assert set(trace.col(S.PID)[kernels]) == {rank}  # rank r drives GPU r
        nccl = [r for r in kernels if trace.name(r).startswith("ncclKernel_AllReduce")]
        assert len(nccl) == case.manifest["collectives_per_rank"] > 0
        assert set(trace.col(S.STREAM)[nccl]) == {NCCL_STREAM}
        for r in nccl:
            args = trace.args(r)
            assert args["Collective name"] == "allreduce" and args["Group size"] == ranks
    ends = [
        sorted(
            e["ts"] + e["dur"]
            for e in _events(p)
            if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel")
        )
        for p in case.files
    ]
    assert all(e == ends[0] for e in ends)  # each collective ends on every rank together


@pytest.mark.parametrize("name", ["meta", "deep", "flows", "old", "ranks"])
def test_shapes_are_deterministic(tmp_path: Path, name: str) -> None:
    size = 40 if name == "meta" else 1_000
    a = generate(name, tmp_path / "a", size, seed=7)
    b = generate(name, tmp_path / "b", size, seed=7)
    for fa, fb in zip(a.files, b.files, strict=True):
        assert _events(fa) == _events(fb)
    assert a.manifest == b.manifest and a.events >= size
