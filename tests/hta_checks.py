"""Runs HTA 0.5.0 on traces of ours and checks its answers against our own reading of them.

HTA's conventions (docs/breakdown-definitions.md): device work is every event with a
``stream`` arg; unless ``HTA_DISABLE_NS_ROUNDING=1``, each event is rounded inward to whole µs
(start up, end down). The expectations here apply the same convention to the device rows read
with our loader, so a disagreement means HTA did not see our rows as device work.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

import numpy as np

from neuron_profiler.trace import load_trace
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import Trace


def device_intervals_us(trace: Trace, *, rounded: bool) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(start, end, name) of every device-work row (a ``stream`` arg), in µs as HTA reads them."""
    c = trace.columns
    with_args = [
        i for i in np.flatnonzero(c[S.ARGS_ROW] >= 0).tolist() if c[S.PH][i] == S.Phase.COMPLETE
    ]
    rows = [i for i in with_args if V.ARG_STREAM in trace.args(i)]
    steps = {
        trace.name(i): int(c[S.TS_NS][i])
        for i in range(len(trace))
        if "ProfilerStep" in trace.name(i)
    }
    if len(steps) >= 2:  # HTA's last-step cut: work launched before the last step began
        last = max(steps.values())
        launched = {
            trace.args(i)[V.ARG_CORRELATION]
            for i in with_args
            if c[S.TS_NS][i] < last
            and V.ARG_STREAM not in trace.args(i)
            and V.ARG_CORRELATION in trace.args(i)
        }
        rows = [i for i in rows if trace.args(i).get(V.ARG_CORRELATION) in launched]
    first = int(c[S.TS_NS].min()) if len(trace) else 0
    start_ns = c[S.TS_NS][rows] - first  # small numbers: exact as floats
    end_ns = start_ns + c[S.DUR_NS][rows]
    if rounded:  # inward to whole µs, in integers (the trace's ts are µs from a whole-µs base)
        origin = first % 1000
        start_us = -((-(start_ns + origin)) // 1000)
        end_us = (end_ns + origin) // 1000
        return start_us.astype(float), end_us.astype(float), [trace.name(i) for i in rows]
    return start_ns / 1e3, end_ns / 1e3, [trace.name(i) for i in rows]


def union_us(start: np.ndarray, end: np.ndarray) -> float:
    """Total length of the union of [start, end) intervals (empty or negative ones add 0)."""
    total, cur_start, cur_end = 0.0, 0.0, None
    for s, e in sorted(zip(start.tolist(), end.tolist(), strict=True)):
        if e <= s:
            continue
        if cur_end is None or s > cur_end:
            total += 0.0 if cur_end is None else cur_end - cur_start
            cur_start, cur_end = s, e
        else:
            cur_end = max(cur_end, e)
    return total + (0.0 if cur_end is None else cur_end - cur_start)


def hta_kernel_type(name: str) -> str:
    from hta.utils.utils import get_kernel_type

    return get_kernel_type(name)


def check_with_hta(trace_dir: Path, *, rounded: bool = True) -> dict:
    """HTA's temporal, idle-time and kernel breakdowns on every trace in ``trace_dir`` (one per
    rank), checked against our rows; returns what HTA said for the documentation checks."""
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "0" if rounded else "1"
    logging.getLogger("hta").setLevel(logging.ERROR)
    from hta.trace_analysis import TraceAnalysis

    ta = TraceAnalysis(trace_dir=str(trace_dir))
    ours = {_rank_of(p): load_trace(p) for p in sorted(trace_dir.iterdir())}
    assert sorted(ta.t.traces) == sorted(ours)
    temporal = ta.get_temporal_breakdown(visualize=False)
    assert len(temporal) == len(ours)
    for _, row in temporal.iterrows():
        start, end, _ = device_intervals_us(ours[int(row["rank"])], rounded=rounded)
        busy = row["compute_time(us)"] + row["non_compute_time(us)"]
        assert math.isclose(busy, union_us(start, end), rel_tol=1e-3), (busy, union_us(start, end))
    idle = ta.get_idle_time_breakdown(visualize=False)[0]
    assert len(idle) > 0 and (idle["idle_time"] >= 0).all()
    types, kernels = ta.get_gpu_kernel_breakdown(
        visualize=False, duration_ratio=1.0, num_kernels=10**6, image_renderer=""
    )
    assert len(types) > 0 and len(kernels) > 0
    for rank, trace in ours.items():
        start, end, names = device_intervals_us(trace, rounded=rounded)
        expected: dict[str, float] = {}
        for s, e, n in zip(start.tolist(), end.tolist(), names, strict=True):
            kind = hta_kernel_type(n)
            expected[kind] = expected.get(kind, 0.0) + (e - s)
        got = kernels[kernels["rank"] == rank].groupby("kernel_type")["sum (us)"].sum()
        for kind, total in expected.items():
            assert math.isclose(got.get(kind, 0.0), total, rel_tol=1e-3, abs_tol=1.0), (
                kind,
                got.get(kind),
                total,
            )
    return {
        "queue": ta.get_queue_length_summary(ranks=sorted(ours)),
        "overlap": ta.get_comm_comp_overlap(visualize=False),
    }


def _rank_of(path: Path) -> int:
    info = load_trace(path).metadata.get("distributedInfo") or {}
    return int(info.get("rank", 0))
