"""A compiled graph's execution carries its ops' shares: placement nests them in it, filling it
exactly, as gpu_user_annotation rows without a stream (not device work of their own) and without
the execution's External id (torch would give the launching op their time a second time)."""

from __future__ import annotations

import json

from neuron_profiler.runtime_trace.activities import ActivityKind
from neuron_profiler.runtime_trace.parser import parse_system_trace
from neuron_profiler.runtime_trace.placement import CATEGORIES, HostOps, place
from neuron_profiler.trace import vocabulary as V

T0 = 1_700_000_000_000_000_000


def _payload(shares: list[int], duration: int, correlation: int = 0) -> bytes:
    ops, offset = [], 0
    for k, share in enumerate(shares):
        ops.append(
            {
                "op": f"aten::op{k}",
                "offset_ns": offset,
                "duration_ns": share,
                "engine": "VectorE",
                "flops": 10,
                "bytes": 100,
            }
        )
        offset += share
    ext = {
        "op": "neuron_graph_3 (forward)",
        "engine": "NEFF",
        "graph_id": 3,
        "graph_ops": ops,
        "modelled": True,
        "correlation_id": correlation,
    }
    base = {"event_type": "nc_exec_running", "tracking_id": 1, "nc_idx": 0, "thread_id": 5}
    return json.dumps(
        {
            "events": [
                {
                    **base,
                    "phase": "start",
                    "timestamp_ns": T0,
                    "data": {"exec_id": 1, "neuron_profiler": ext},
                },
                {**base, "phase": "stop", "timestamp_ns": T0 + duration, "data": {}},
            ]
        }
    ).encode()


def test_ops_fill_their_execution_exactly_on_its_stream() -> None:
    placed = place(
        parse_system_trace(_payload([400, 250, 349], 1000)), host_ops=HostOps.empty(), host_pid=1
    )
    graph = [i for i in range(len(placed)) if placed.kind[i] == ActivityKind.KERNEL]
    ops = [i for i in range(len(placed)) if placed.kind[i] == ActivityKind.GRAPH_OP]
    assert len(graph) == 1 and len(ops) == 3
    g = graph[0]
    assert sum(int(placed.end_ns[i] - placed.start_ns[i]) for i in ops) == 1000  # 999 + 1
    assert [int(placed.start_ns[i] - T0) for i in ops] == [0, 400, 650]
    for i in ops:
        assert CATEGORIES[placed.category[i]] == V.CAT_GRAPH_OP
        assert (placed.pid[i], placed.tid[i]) == (placed.pid[g], placed.tid[g])
        assert placed.stream[i] == -1 and placed.correlation[i] == -1
        args = dict(placed.args[placed.args_id[i]])
        assert args[V.ARG_GRAPH_ID] == 3 and args[V.ARG_ENGINE] == "VectorE"
    assert [placed.names[placed.name_id[i]] for i in ops] == [
        "VectorE: op0",
        "VectorE: op1",
        "VectorE: op2",
    ]


def test_only_the_execution_is_linked_to_the_launching_op() -> None:
    placed = place(
        parse_system_trace(_payload([600, 400], 1000, correlation=77)),
        host_ops=HostOps.empty(),
        host_pid=1,
    )
    kind = placed.kind.tolist()
    (g,) = [i for i, k in enumerate(kind) if k == ActivityKind.KERNEL]
    ops = [i for i, k in enumerate(kind) if k == ActivityKind.GRAPH_OP]
    assert int(placed.external_id[g]) == 77
    assert len(ops) == 2 and [int(placed.external_id[i]) for i in ops] == [0, 0]
