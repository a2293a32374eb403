"""Containment linking: checked against a brute-force reading of the documented rule."""

from __future__ import annotations

import numpy as np

from neuron_profiler.runtime_trace.activities import ActivityKind, DeviceActivities, Queue
from neuron_profiler.runtime_trace.linking import link_by_containment, match_runtime_calls

_QUEUE = {
    ActivityKind.KERNEL: Queue.COMPUTE,
    ActivityKind.DMA: Queue.DMA,
    ActivityKind.COLLECTIVE: Queue.COLLECTIVE,
    ActivityKind.RUNTIME_CALL: Queue.HOST,
    ActivityKind.HOST_SYNC: Queue.HOST,
    ActivityKind.FALLBACK: Queue.HOST,
    ActivityKind.GENERIC: Queue.OTHER,
}


def make_acts(rows: list[dict]) -> DeviceActivities:
    """rows: dicts with kind, start, end and optional tid, core, corr, exec, seq."""

    def col(key: str, default: int) -> np.ndarray:
        return np.array([r.get(key, default) for r in rows], dtype=np.int64)

    kinds = [r["kind"] for r in rows]
    return DeviceActivities(
        start_ns=col("start", 0),
        end_ns=col("end", 0),
        kind=np.array(kinds, dtype=np.uint8),
        queue=np.array([_QUEUE[k] for k in kinds], dtype=np.uint8),
        core=col("core", 0),
        thread_id=col("tid", 1),
        correlation_id=col("corr", 0),
        exec_id=col("exec", -1),
        seq_id=col("seq", -1),
        name_id=np.zeros(len(rows), dtype=np.int32),
        modelled=np.zeros(len(rows), dtype=bool),
        names=["x"],
        data=[b"{}"] * len(rows),
    )


def brute_innermost(tids, starts, ends, tid: int, t: int) -> int:
    """Latest-starting op on the thread containing t; ties: shorter, then later in the input."""
    best = -1
    for i in range(len(starts)):
        if tids[i] != tid or not (starts[i] <= t <= ends[i]):
            continue
        if best < 0 or (starts[i], -ends[i], i) > (starts[best], -ends[best], best):
            best = i
    return best


def _nested_ops(rng: np.random.Generator, tid: int, lo: int, hi: int, depth: int) -> list:
    """A random forest of properly nested intervals inside [lo, hi] on one thread."""
    ops: list = []
    t = lo
    while depth > 0 and t < hi - 10:
        start = int(rng.integers(t, hi - 5))
        end = int(rng.integers(start, min(hi, start + (hi - lo) // 2 + 2)))
        ops.append((tid, start, end))
        ops += _nested_ops(rng, tid, start, end, depth - 1)
        t = end + 1
    return ops


def test_runtime_calls_get_innermost_containing_op() -> None:
    rng = np.random.default_rng(7)
    ops = _nested_ops(rng, 11, 0, 100_000, 5) + _nested_ops(rng, 22, 0, 100_000, 4)
    # also overlapping, not nested, ops and exact duplicates of starts
    ops += [(11, s, s + int(rng.integers(0, 3000))) for s in rng.integers(0, 100_000, 40)]
    tids, starts, ends = (np.array(c, dtype=np.int64) for c in zip(*ops, strict=True))
    corr = np.arange(len(ops), dtype=np.int64) + 1000
    queries = [
        (int(rng.choice([11, 22, 33])), int(rng.integers(-10, 100_010))) for _ in range(2000)
    ]
    queries += [(int(tids[i]), int(starts[i])) for i in range(0, len(ops), 3)]  # on boundaries
    queries += [(int(tids[i]), int(ends[i])) for i in range(1, len(ops), 3)]
    acts = make_acts(
        [
            {"kind": ActivityKind.RUNTIME_CALL, "tid": q, "start": t, "end": t + 1}
            for q, t in queries
        ]
    )
    linked = link_by_containment(acts, tids, starts, ends, corr)
    expected = []
    for q, t in queries:
        i = brute_innermost(tids, starts, ends, q, t)
        expected.append(0 if i < 0 else int(corr[i]))
    assert linked.correlation_id.tolist() == expected
    assert 0 < sum(e == 0 for e in expected) < len(expected)  # both outcomes exercised
    assert acts.correlation_id.tolist() == [0] * len(queries)  # input left untouched


def test_device_work_inherits_through_exec_and_seq_ids() -> None:
    ops_tid, ops_start, ops_end = np.array([5, 5]), np.array([100, 1000]), np.array([200, 1100])
    ops_corr = np.array([71, 72])
    R, K, D = ActivityKind.RUNTIME_CALL, ActivityKind.KERNEL, ActivityKind.DMA
    rows = [
        {"kind": R, "tid": 5, "start": 110, "end": 150, "exec": 3, "core": 0},  # in op 71
        {"kind": K, "start": 300, "end": 400, "exec": 3, "core": 0},  # 2nd on its queue -> call 2
        {"kind": K, "start": 300, "end": 400, "exec": 3, "core": 1},  # other core: no call
        {"kind": R, "tid": 5, "start": 1010, "end": 1020, "exec": 3, "core": 0},  # exec reused
        {"kind": D, "start": 1200, "end": 1300, "exec": 3, "core": 0},  # 1st on DMA -> call 1
        {"kind": K, "start": 50, "end": 60, "exec": 3, "core": 0},  # 1st on compute -> call 1
        {"kind": R, "tid": 5, "start": 120, "end": 130, "exec": 9, "seq": 44},  # in op 71
        {"kind": K, "start": 500, "end": 600, "exec": 3, "seq": 44},  # seq wins over exec
        {"kind": K, "start": 700, "end": 800, "exec": 3, "corr": 99},  # 3rd: no call; id kept
        {"kind": R, "tid": 6, "start": 150, "end": 160, "exec": 8},  # thread without ops
        {"kind": K, "start": 170, "end": 180, "exec": 8},  # its call unlinked -> stays 0
        {"kind": ActivityKind.FALLBACK, "tid": 5, "start": 1050, "end": 1060},  # host side
    ]
    acts = make_acts(rows)
    callers = match_runtime_calls(acts)
    assert callers.tolist() == [-1, 3, -1, -1, 0, 0, -1, 6, -1, -1, 9, -1]
    linked = link_by_containment(acts, ops_tid, ops_start, ops_end, ops_corr)
    assert linked.correlation_id.tolist() == [71, 72, 0, 72, 71, 71, 71, 71, 99, 0, 0, 72]


def test_repeated_exec_id_pairs_first_in_first_out() -> None:
    """Two calls share an exec_id and each launches one kernel; the queue is backed up, so the
    first kernel starts after the second call: each kernel still belongs to its own call."""
    R, K = ActivityKind.RUNTIME_CALL, ActivityKind.KERNEL
    acts = make_acts(
        [
            {"kind": R, "tid": 5, "start": 100, "end": 110, "exec": 7},
            {"kind": R, "tid": 5, "start": 200, "end": 210, "exec": 7},
            {"kind": K, "start": 400, "end": 500, "exec": 7},
            {"kind": K, "start": 500, "end": 600, "exec": 7},
            {"kind": K, "start": 700, "end": 800, "exec": 7},
        ]
    )  # a third: no call
    assert match_runtime_calls(acts).tolist() == [-1, -1, 0, 1, -1]
    seq = make_acts(
        [
            {"kind": R, "tid": 5, "start": 100, "end": 110, "exec": 7, "seq": 2},
            {"kind": R, "tid": 5, "start": 200, "end": 210, "exec": 7, "seq": 1},
            {"kind": K, "start": 400, "end": 500, "exec": 7, "seq": 1},
            {"kind": K, "start": 500, "end": 600, "exec": 7, "seq": 2},
        ]
    )
    assert match_runtime_calls(seq).tolist() == [-1, -1, 1, 0]  # nrta_seq_id decides


def test_no_ops_or_no_calls_leaves_everything_unlinked() -> None:
    acts = make_acts(
        [
            {"kind": ActivityKind.KERNEL, "start": 1, "end": 2, "exec": 1},
            {"kind": ActivityKind.RUNTIME_CALL, "start": 0, "end": 1, "exec": 1},
        ]
    )
    empty = np.zeros(0, dtype=np.int64)
    assert link_by_containment(acts, empty, empty, empty, empty).correlation_id.tolist() == [0, 0]
    only_work = make_acts([{"kind": ActivityKind.KERNEL, "start": 1, "end": 2, "exec": 1}])
    assert match_runtime_calls(only_work).tolist() == [-1]
