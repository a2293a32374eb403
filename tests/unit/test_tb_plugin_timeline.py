"""The drawable device timeline behind the plugin's Trace and Idle views
(``analysis/timeline.py``, ``reports/timeline_json.py``, route ``timeline``): the downsampling
bound, busy/idle totals preserved, and the route on a CUDA trace from ../shared/traces checked
against a second computation from the trace's columns and against the report."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.analysis.timeline import downsample

# JSON carries µs floats: a series' total is kept to within float rounding of its µs sum
TOLERANCE_US = 1e-3


def brute_bins(starts: list[int], ends: list[int], edges: list[int]) -> list[int]:
    """ns of the intervals inside each bin, one interval and one bin at a time."""
    return [
        sum(max(0, min(e, hi) - max(s, lo)) for s, e in zip(starts, ends, strict=True))
        for lo, hi in zip(edges[:-1], edges[1:], strict=True)
    ]


@pytest.mark.parametrize(
    ("n", "max_segments"), [(0, 5), (3, 5), (5, 5), (6, 5), (1000, 7), (50_000, 2000), (200_000, 1)]
)
def test_downsample_bound_and_total(n: int, max_segments: int) -> None:
    rng = np.random.default_rng(n)
    start = np.sort(rng.integers(0, 10**9, n))
    iv = I.union(start, start + rng.integers(0, 20_000, n))
    lo, hi = (int(iv.start[0]), int(iv.end[-1])) if len(iv) else (0, 1)
    seg = downsample(iv, lo - 17, hi + 5, max_segments)
    assert len(seg.start_ns) <= max_segments
    assert int(seg.busy_ns.sum()) == iv.total  # exact in ns
    assert (seg.busy_ns <= seg.end_ns - seg.start_ns).all() and (seg.busy_ns > 0).all()
    assert seg.exact == (len(iv) <= max_segments) and seg.intervals == len(iv)
    if seg.exact:
        assert (seg.start_ns == iv.start).all() and (seg.end_ns == iv.end).all()
    else:
        assert (np.diff(seg.start_ns) > 0).all() and (seg.end_ns[:-1] <= seg.start_ns[1:]).all()


def test_downsample_bins_equal_a_brute_force_count() -> None:
    rng = np.random.default_rng(7)
    start = np.sort(rng.integers(0, 100_000, 300))
    iv = I.union(start, start + rng.integers(1, 900, 300))
    seg = downsample(iv, 0, 101_000, 10)
    edges = np.linspace(0, 101_000, 11).round().astype(int).tolist()
    expected = brute_bins(iv.start.tolist(), iv.end.tolist(), edges)
    got = dict(zip(seg.start_ns.tolist(), seg.busy_ns.tolist(), strict=True))
    assert [got.get(lo, 0) for lo in edges[:-1]] == expected


def test_timeline_route_on_a_cuda_trace(tmp_path: Path, shared_traces: Path) -> None:
    pytest.importorskip("tensorboard")
    from tb_plugin_client import ROUTE, ids, make_plugin

    from neuron_profiler.trace import EventKind, load_trace
    from neuron_profiler.trace import schema as S

    src = (
        shared_traces
        / "kineto"
        / "tb_plugin"
        / "samples"
        / "resnet50_num_workers_0"
        / "worker0.1623143089861.pt.trace.json.gz"
    )
    (tmp_path / "cuda").mkdir()
    shutil.copy(src, tmp_path / "cuda")
    _, client = make_plugin(tmp_path)
    q = ids(client, "cuda", "worker0")
    tl = client.get(f"{ROUTE}/timeline", query_string=q).get_json()
    report = client.get(f"{ROUTE}/report", query_string=q).get_json()["traces"][0]

    # second computation: union per (pid, tid) of the device rows, merged in plain Python
    trace = load_trace(src)
    c = trace.columns
    work = np.isin(
        c[S.KIND], [EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET, EventKind.COLLECTIVE]
    ) & (c[S.PH] == S.Phase.COMPLETE)
    expected = {}
    for pid, tid in set(zip(c[S.PID][work].tolist(), c[S.TID][work].tolist(), strict=True)):
        on = work & (c[S.PID] == pid) & (c[S.TID] == tid)
        total, reach = 0, None
        for s, e in sorted(
            zip(c[S.TS_NS][on].tolist(), (c[S.TS_NS][on] + c[S.DUR_NS][on]).tolist(), strict=True)
        ):
            if reach is None or s > reach:
                total, reach = total + (e - s), e
            elif e > reach:
                total, reach = total + (e - reach), e
        expected[(pid, tid)] = total
    assert {(x["device"], x["queue"]): round(x["busy_ms"] * 1e6) for x in tl["queues"]} == expected
    assert tl["queues"][0]["name"] == "stream 7"  # Kineto's string tid

    for series in tl["queues"] + tl["idle"]:
        seg = series["segments"]
        assert len(seg["start_us"]) <= tl["max_segments"]
        total_ms = series["busy_ms"] if "busy_ms" in series else series["idle_ms"]
        assert abs(sum(seg["busy_us"]) - total_ms * 1e3) <= TOLERANCE_US
        assert all(0 < p <= 100 for p in seg["busy_pct"])
    assert tl["downsampled"] and any(not x["exact"] for x in tl["queues"])
    # the gaps drawn per device add up to the report's idle time of that device
    for dev in report["idle"]["devices"]:
        drawn = sum(s["idle_ms"] for s in tl["idle"] if s["device"] == dev["device"])
        assert drawn == pytest.approx(dev["idle_ms"], abs=1e-6)
        by_cause = {s["cause"]: s["idle_ms"] for s in tl["idle"] if s["device"] == dev["device"]}
        for cause, ms in dev["by_cause_ms"].items():
            assert by_cause.get(cause, 0.0) == pytest.approx(ms, abs=1e-6)
    assert tl["start_us"] < tl["end_us"]
    assert min(s["segments"]["start_us"][0] for s in tl["queues"]) >= tl["start_us"]
