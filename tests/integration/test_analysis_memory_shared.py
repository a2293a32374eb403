"""The memory analysis on the shared resnet50 traces (V100, torch 1.9: ``[memory]`` events with
Bytes but no Addr or Total Allocated), against an independent walk of the raw JSON (gzip and
json, not our loader) and against torch-tb-profiler 0.4.3's own memory statistics."""

from __future__ import annotations

import functools
import gzip
import json
import logging
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import shared_traces_dir

from neuron_profiler.analysis import analyze
from neuron_profiler.analysis.memory import UNKNOWN_OP, MemoryUsage
from neuron_profiler.trace import load_trace

SAMPLES = "kineto/tb_plugin/samples"
RESNET = ("resnet50_num_workers_0", "resnet50_num_workers_4")
LABELS = {(0, -1): "CPU", (1, 0): "cuda:0"}


def _trace(name: str) -> Path:
    (path,) = sorted((shared_traces_dir() / SAMPLES / name).glob("*.pt.trace.json.gz"))
    return path


@functools.cache
def _memory(path: Path) -> MemoryUsage | None:
    """Our memory analysis of a trace, once for both tests (a small result; the trace goes)."""
    return analyze(load_trace(path)).memory


def _raw_walk(path: Path) -> dict[str, tuple[int, int, int]]:
    """Per device: (events, peak of the running sum of Bytes, its time in ns), events in time
    order (file order among equal times)."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    memory = [e for e in events if e.get("name") == "[memory]" and e.get("ph") == "i"]
    per_device: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for e in sorted(memory, key=lambda e: e["ts"]):
        key = (e["args"]["Device Type"], e["args"]["Device Id"])
        per_device[LABELS[key]].append((e["ts"], e["args"]["Bytes"]))
    out = {}
    for device, rows in per_device.items():
        level, peak, at = 0, 0, 0
        for ts, nbytes in rows:
            level += nbytes
            if level > peak:
                peak, at = level, ts
        out[device] = (len(rows), peak, int(at * 1000))
    return out


@pytest.mark.parametrize("name", RESNET)
def test_peaks_match_an_independent_walk_of_the_raw_json(name: str) -> None:
    path = _trace(name)
    mem = _memory(path)
    assert mem is not None
    ours = {d.label: (d.events, d.peak_bytes, d.peak_ns) for d in mem.devices}
    assert ours == _raw_walk(path)
    assert mem.without_address == sum(d.events for d in mem.devices)  # 2021: no Addr
    gpu = next(d for d in mem.devices if d.label == "cuda:0")
    assert not gpu.absolute and gpu.capacity_bytes == 34084028416  # totalGlobalMem of GPU 0
    assert gpu.headroom_bytes == gpu.capacity_bytes - gpu.peak_bytes
    assert gpu.live_at_peak == ()  # no Addr: nothing is known live
    assert mem.findings == ()  # 8% of the GPU; nothing held grows from step to step


@pytest.mark.parametrize("name", RESNET)
def test_allocations_by_op_total_what_tb_profiler_attributes(name: str, tmp_path: Path) -> None:
    """0.4.3's memory statistics (its Memory view's operator table): the allocations it
    attributes to an op on the GPU, summed over its ops (its per-op split names the
    ``aten::empty`` inside an op, ours the op around it), equal ours attributed to an op."""
    pytest.importorskip("torch_tb_profiler")
    logging.getLogger("torch_tb_profiler").setLevel(logging.ERROR)
    from torch_tb_profiler.profiler.data import RunProfileData

    path = _trace(name)
    data = RunProfileData.parse("worker0", "1", str(path), str(tmp_path))
    data.process()
    table = data.memory_snapshot.get_memory_statistics(data.tid2tree)["GPU0"]
    self_size, self_count = 1, 2  # torch_tb_profiler.profiler.memory_parser.MemoryMetrics
    theirs = (sum(v[self_size] for v in table.values()), sum(v[self_count] for v in table.values()))
    mem = _memory(path)
    assert mem is not None
    gpu = next(d for d in mem.devices if d.label == "cuda:0")
    by_op = [o for o in gpu.by_op if o.op != UNKNOWN_OP]
    assert (sum(o.allocated_bytes for o in by_op), sum(o.allocations for o in by_op)) == theirs
    assert data.memory_snapshot.get_peak_memory() == {}  # 0.4.3 plots no curve without Addr
