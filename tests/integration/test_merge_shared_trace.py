"""Merge real-runtime-style device events onto real host traces from ../shared/traces.

The device events are synthesized *inside* the traces' own cpu_op intervals (no correlation ids,
as the real runtime writes them), with device stamps on a drifting NeuronCore clock; the expected
host time of every stamp and the expected containing op are known independently of the code.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from neuron_profiler.runtime_trace import format as F
from neuron_profiler.trace import load_trace
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as L

HOST_FILES = [
    "hta/_history/tests/data/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "hta/tests/data/rank_non_gpu/rank_non_gpu.json.gz",
]
UNKNOWN_TID = 999_999_999  # a launching thread the host trace never saw
CLOCK_OFFSETS = (5_000, -7_200_000_000_000)  # per core: nc = host - offset, hours apart ...
CLOCK_DRIFT = (50e-6, -30e-6)  # ... and drifting (per ns of host time)


def _expected_op(tids, starts, ends, ext, tid: int, t: int) -> int:
    """Brute force: among ops on the thread containing t, the latest start, then the shortest,
    then the later one in the file; its External id (0: none)."""
    cand = np.flatnonzero((tids == tid) & (starts <= t) & (t <= ends))
    if len(cand) == 0:
        return 0
    best = max(cand.tolist(), key=lambda i: (starts[i], -ends[i], i))
    return int(ext[best])


def _device_events(host, rng: np.random.Generator) -> tuple[list[dict], dict[int, dict]]:
    c = host.columns
    ops = np.flatnonzero(
        host.mask(kind=S.EventKind.CPU_OP, ph=S.Phase.COMPLETE) & (c[S.EXTERNAL_ID] >= 0)
    )
    tids, starts = c[S.TID][ops], c[S.TS_NS][ops]
    ends, ext = starts + c[S.DUR_NS][ops], c[S.EXTERNAL_ID][ops]
    t_first, t_last = int(starts.min()), int(ends.max())
    drift_at = (t_first + t_last) // 2  # each core re-syncs here

    def nc(core: int, host_ns: int) -> int:
        return host_ns - CLOCK_OFFSETS[core] + round((host_ns - t_first) * CLOCK_DRIFT[core])

    events = []
    for core in (0, 1):
        for at in (t_first - 1_000, drift_at):
            events.append(
                {
                    "event_type": F.TIMESTAMP_SYNC_POINT,
                    "phase": F.INSTANT,
                    "tracking_id": 0,
                    "nc_idx": core,
                    "thread_id": 0,
                    "timestamp_ns": nc(core, at),  # device stamps: the device clock
                    "data": {"exec_id": 0, "nc_timestamp_ns": nc(core, at), "cpu_timestamp_ns": at},
                }
            )
    expect: dict[int, dict] = {}
    picks = rng.choice(len(ops), size=min(300, len(ops)), replace=False)
    for k, i in enumerate(picks.tolist()):
        core, exec_id = k % 2, 1000 + k
        tid = int(tids[i]) if k % 10 else UNKNOWN_TID
        t = int(starts[i] + rng.integers(0, max(int(ends[i] - starts[i]), 1)))
        call_end = t + int(rng.integers(0, 500))
        d0 = call_end + int(rng.integers(100, 5_000))
        d1 = d0 + 1_000 + k
        base = {"nc_idx": core, "thread_id": tid}
        events += [
            {
                **base,
                "event_type": F.NRT_EXECUTE,
                "phase": F.START,
                "tracking_id": 2 * k,
                "timestamp_ns": t,
                "data": {"exec_id": exec_id, "model_id": 3},
            },
            {
                **base,
                "event_type": F.NRT_EXECUTE,
                "phase": F.STOP,
                "tracking_id": 2 * k,
                "timestamp_ns": call_end,
                "data": {"exec_id": exec_id},
            },
        ]
        for stamp, phase in ((d0, F.START), (d1, F.STOP)):
            events.append(
                {
                    **base,
                    "event_type": F.NC_EXEC_RUNNING,
                    "phase": phase,
                    "tracking_id": 2 * k + 1,
                    "timestamp_ns": nc(core, stamp),
                    "data": {
                        "device_core_idx": core,
                        "exec_id": exec_id,
                        "model_id": 3,
                        "nc_timestamp_ns": nc(core, stamp),
                    },
                }
            )
        linked = _expected_op(tids, starts, ends, ext, tid, t) if tid != UNKNOWN_TID else 0
        expect[exec_id] = {
            "core": core,
            "tid": tid,
            "call": (t, call_end),
            "work": (d0, d1),
            "op": linked,
        }
    return events, expect


def _write_fetches(events: list[dict], tmp: Path, rng: np.random.Generator) -> list[Path]:
    """Two fetch files, events shuffled, so many start/stop pairs straddle the two."""
    order = rng.permutation(len(events)).tolist()
    half = len(order) // 2
    paths = []
    for n, part in enumerate((order[:half], order[half:])):
        path = tmp / f"fetch{n}.json"
        path.write_text(json.dumps({"events": [events[i] for i in part], "data_version": 2}))
        paths.append(path)
    return paths


@pytest.mark.parametrize("rel", HOST_FILES)
def test_merge_links_by_containment_on_real_host_traces(
    shared_traces: Path, tmp_path: Path, rel: str
) -> None:
    host_path = shared_traces / rel
    host = load_trace(host_path)
    rng = np.random.default_rng(11)
    events, expect = _device_events(host, rng)
    out = tmp_path / "merged.json.gz"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "neuron_profiler.cli.main",
            "merge",
            str(host_path),
            *map(str, _write_fetches(events, tmp_path, rng)),
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    merged = load_trace(out)
    c = merged.columns
    kernels = [i for i in range(len(merged)) if merged.category(i) == L.CAT_KERNEL]
    calls = [i for i in range(len(merged)) if merged.category(i) == L.CAT_RUNTIME]
    assert len(kernels) == len(calls) == len(expect)  # every activity once
    for i in kernels:
        e = expect[merged.args(i)["exec_id"]]
        core_pid = {n: p for p, n in merged.process_names.items()}[L.core_process_name(e["core"])]
        assert (c[S.PID][i], c[S.TID][i]) == (core_pid, L.queue_stream(e["core"], 0))
        start, end = int(c[S.TS_NS][i]), int(c[S.TS_NS][i] + c[S.DUR_NS][i])
        assert abs(start - e["work"][0]) <= 2 and abs(end - e["work"][1]) <= 2  # whole-ns stamps
        assert c[S.EXTERNAL_ID][i] == (e["op"] or -1)
    host_pid = int(np.unique(host.col(S.PID)[host.mask(kind=S.EventKind.CPU_OP)])[0])
    for i in calls:
        e = expect[merged.args(i)["exec_id"]]
        assert (c[S.PID][i], c[S.TID][i]) == (host_pid, e["tid"])
        assert (c[S.TS_NS][i], c[S.TS_NS][i] + c[S.DUR_NS][i]) == e["call"]
        assert c[S.EXTERNAL_ID][i] == (e["op"] or -1)
    linked = sum(1 for e in expect.values() if e["op"])
    assert 0 < linked < len(expect)  # unknown threads stay unlinked
    assert f"linked to host ops: {2 * linked}," in res.stdout

    def ac2g_starts(t) -> int:
        return int(
            (
                (t.col(S.PH) == S.Phase.FLOW_START) & (t.col(S.CAT_ID) == t.string_id(L.CAT_FLOW))
            ).sum()
        )

    assert ac2g_starts(merged) - ac2g_starts(host) == len(expect)  # one arrow per call
    # the host trace itself is untouched: same cpu ops at the same times
    before = np.sort(host.col(S.TS_NS)[host.mask(kind=S.EventKind.CPU_OP)])
    after = np.sort(c[S.TS_NS][merged.mask(kind=S.EventKind.CPU_OP)])
    assert (before == after).all()
    props = {p["name"]: p for p in merged.metadata["deviceProperties"]}
    assert props["NeuronCore 0"]["emulated"] is False and "NeuronCore 1" in props
    assert merged.process_names[1] == "NeuronCore 1"
    assert merged.metadata["neuron_unpaired_events"] == 0
