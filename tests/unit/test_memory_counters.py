"""Device memory counters without torch: the runtime's nrt_dma_mem_* results read into per-core
samples (hand-worked totals), counter rows on the cores' processes, the modelled figures per
chip, and the loader reading Kineto's counter events as ``neuron_hbm_usage``."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import numpy as np
import pytest

from neuron_profiler.costmodel.chips import chip
from neuron_profiler.costmodel.device_memory import runtime_memory
from neuron_profiler.exporters.writers import write_trace
from neuron_profiler.runtime_trace.memory_counters import (
    DROPPED_NO_PROCESS,
    DROPPED_TOTAL_BELOW_PARTS,
    DROPPED_UNUSABLE,
    UNATTRIBUTED,
    MemorySamples,
    counter_records,
)
from neuron_profiler.runtime_trace.merge import merge_device_events
from neuron_profiler.runtime_trace.parser import memory_events
from neuron_profiler.runtime_trace.records import KINETO_COUNTER
from neuron_profiler.trace import load_trace
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import TraceBuilder

MIB = 1 << 20


def _event(etype: str, phase: str, tracking: int, nc: int, ts: int, data: dict) -> dict:
    return {
        "event_type": etype,
        "phase": phase,
        "tracking_id": tracking,
        "nc_idx": nc,
        "thread_id": 1,
        "timestamp_ns": ts,
        "data": data,
    }


def _alloc(tracking: int, nc: int, ts: int, usage: str, size: int, usage_total: int, total: int):
    """An allocation as the runtime reports it: intent (start), then result (stop)."""
    return [
        _event("nrt_dma_mem_alloc", "start", tracking, nc, ts, {"hbm_idx": 0, "usage_type": usage}),
        _event(
            "nrt_dma_mem_alloc",
            "stop",
            tracking,
            nc,
            ts + 10,
            {"allocated_bytes": size, "total_bytes": total, "usage_type_total_bytes": usage_total},
        ),
    ]


def _payload(events: list[dict]) -> bytes:
    return json.dumps({"events": events, "data_version": 2}).encode()


def test_runtime_results_become_per_core_samples_that_add_up_to_the_runtime_total() -> None:
    # Core 0 held 1000 bytes (usage unknown to the capture) before it started; then tensors
    # +300, scratchpad +200, tensors +100 (400 in all); core 1: tensors +50 from nothing.
    events = [
        *_alloc(1, 0, 1_000, "tensors", 300, 300, 1300),
        *_alloc(2, 1, 1_500, "tensors", 50, 50, 50),
        *_alloc(3, 0, 2_000, "scratchpad", 200, 200, 1500),
        *_alloc(4, 0, 3_000, "tensors", 100, 400, 1600),
        _event("nc_exec_running", "start", 9, 0, 3_500, {"exec_id": 1}),  # not memory
    ]
    found, unusable = memory_events(_payload(events))
    assert unusable == 0
    assert [(e.ts_ns, e.core, e.usage_type) for e in found] == [
        (1_010, 0, "tensors"),
        (1_510, 1, "tensors"),
        (2_010, 0, "scratchpad"),
        (3_010, 0, "tensors"),
    ]
    samples = MemorySamples.from_runtime(found)
    assert samples.categories == ("scratchpad", "tensors", UNATTRIBUTED)
    assert samples.values.tolist() == [
        [0, 300, 1000],
        [0, 50, 0],
        [200, 300, 1000],
        [200, 400, 1000],
    ]
    assert samples.totals().tolist() == [1300, 50, 1500, 1600]  # the runtime's total_bytes
    assert set(samples.sources.values()) == {V.HBM_FROM_RUNTIME}


def test_unusable_memory_events_and_inconsistent_totals_are_counted_not_silent() -> None:
    events = [
        # a result whose intent was never captured and which does not name its usage type
        _event("nrt_dma_mem_alloc", "stop", 7, 0, 100, {"total_bytes": 10}),
        # a mistyped result
        _event("nrt_dma_mem_dealloc", "stop", 8, 0, 200, {"total_bytes": "many"}),
        *_alloc(1, 0, 300, "tensors", 64, 64, 64),
        # the runtime's total below what its categories already hold: left out, counted
        *_alloc(2, 0, 400, "tensors", 64, 128, 100),
    ]
    found, unusable = memory_events(_payload(events))
    assert unusable == 2
    samples = MemorySamples.from_runtime(found, unusable)
    assert samples.values.tolist() == [[64, 0]]
    assert samples.dropped == {DROPPED_TOTAL_BELOW_PARTS: 1, DROPPED_UNUSABLE: 2}


def test_counter_rows_go_on_their_core_process_and_samples_without_one_are_counted() -> None:
    samples = MemorySamples(
        ts_ns=np.array([10, 20, 30], dtype=np.int64),
        core=np.array([0, 3, 0], dtype=np.int64),
        values=np.array([[1, 2], [3, 4], [5, 6]], dtype=np.int64),
        categories=("tensors", "model_code"),
        sources={"tensors": V.HBM_FROM_ALLOCATOR, "model_code": V.HBM_FROM_MODEL},
    )
    rows, names, args, dropped = counter_records(samples, {0: 4242, 1: 4243})
    assert rows["pid"].tolist() == [4242, 4242]
    assert rows["start_ns"].tolist() == rows["end_ns"].tolist() == [10, 30]
    assert set(rows["kineto_type"].tolist()) == {KINETO_COUNTER}
    assert [names[i] for i in rows["name_id"]] == [V.core_hbm_counter_name(0)] * 2
    assert [dict(args[i]) for i in rows["args_id"]] == [
        {"tensors": "1", "model_code": "2", V.ARG_HIDDEN: "1"},
        {"tensors": "5", "model_code": "6", V.ARG_HIDDEN: "1"},
    ]
    assert dropped == {DROPPED_NO_PROCESS: 1}


@pytest.mark.parametrize(
    ("name", "model_code_mib"),
    [("trn1", 96), ("trn2", 192), ("trn3", 96)],  # 96 MiB per physical core in a logical one
)
def test_modelled_runtime_memory_per_core_and_its_share_of_the_chip(
    name: str, model_code_mib: int
) -> None:
    spec = chip(name)
    per_core = runtime_memory(spec)
    # hand-worked: model code + 256 scratchpad + 64 DMA rings + 128 collectives + 64 profiler
    assert per_core[V.HBM_MODEL_CODE] == model_code_mib * MIB
    assert sum(per_core.values()) == (model_code_mib + 256 + 64 + 128 + 64) * MIB
    assert per_core[V.HBM_WEIGHTS] == 0
    # the model leaves most of the chip to tensors (under 10 % reserved)
    assert sum(per_core.values()) * spec.logical_cores < 0.1 * spec.hbm_gib * (1 << 30)


def test_kineto_counter_events_named_for_a_core_load_as_hbm_usage(tmp_path: Path) -> None:
    """The collector's counters come out of Kineto with its counter category; the model reads
    them (and only them) as neuron_hbm_usage, and a Chrome round trip keeps them so."""
    ours = {"tensors": 4096, "model_code": 100}
    doc = {
        "baseTimeNanoseconds": 1_000_000_000,
        "traceEvents": [
            {
                "ph": "C",
                "cat": V.CAT_KINETO_COUNTERS,
                "name": V.core_hbm_counter_name(0),
                "pid": 7,
                "tid": 1,
                "ts": 5.0,
                "args": ours,
            },
            {
                "ph": "C",
                "cat": V.CAT_KINETO_COUNTERS,
                "name": "MTIA HBM bandwidth",  # another producer's counter: left as it is
                "pid": 8,
                "tid": 0,
                "ts": 6.0,
                "args": {"value": 3},
            },
        ],
    }
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    trace = load_trace(path)
    cats = [trace.strings[c] for c in trace.col(S.CAT_ID)]
    assert cats == [V.CAT_HBM_USAGE, V.CAT_KINETO_COUNTERS]
    assert trace.args(0) == ours
    out = tmp_path / "round.json"
    write_trace(trace, out)
    again = msgspec.json.decode(out.read_bytes())
    counters = [e for e in again["traceEvents"] if e.get("ph") == "C"]
    assert [(e["cat"], e["name"], e["args"]) for e in counters] == [
        (V.CAT_HBM_USAGE, V.core_hbm_counter_name(0), ours),
        (V.CAT_KINETO_COUNTERS, "MTIA HBM bandwidth", {"value": 3}),
    ]


def test_offline_merge_writes_the_runtime_memory_as_the_live_collector_does(
    tmp_path: Path,
) -> None:
    """A libnrt capture merged onto a host trace: the same counters, in the model's category,
    on the core's process (core 0 moves off the host's pid 0), surviving a Chrome round trip."""
    host = TraceBuilder("host.json")
    host.add(name="op", ts_ns=500, dur_ns=10_000, kind=S.EventKind.CPU_OP, cat="cpu_op", pid=0)
    events = [
        *_alloc(1, 0, 1_000, "tensors", 300, 300, 1300),
        *_alloc(2, 0, 2_000, "scratchpad", 200, 200, 1500),
    ]
    result = merge_device_events(host.build(), [_payload(events[:2]), _payload(events[2:])])
    trace = result.trace
    rows = np.flatnonzero(trace.col(S.CAT_ID) == trace.string_id(V.CAT_HBM_USAGE))
    assert trace.col(S.PH)[rows].tolist() == [S.Phase.COUNTER] * 2
    assert trace.col(S.TS_NS)[rows].tolist() == [1_010, 2_010]
    assert [trace.args(int(r)) for r in rows] == [
        {"scratchpad": 0, "tensors": 300, UNATTRIBUTED: 1000},
        {"scratchpad": 200, "tensors": 300, UNATTRIBUTED: 1000},
    ]
    pid = int(trace.col(S.PID)[rows][0])
    assert pid == result.relocated_cores[0] and trace.process_names[pid] == "NeuronCore 0"
    assert trace.name(int(rows[0])) == V.core_hbm_counter_name(0)
    assert trace.metadata[V.META_HBM_SOURCES] == dict.fromkeys(
        ["scratchpad", "tensors", UNATTRIBUTED], V.HBM_FROM_RUNTIME
    )
    out = tmp_path / "merged.json"
    write_trace(trace, out)
    again = load_trace(out)
    rows2 = np.flatnonzero(again.col(S.CAT_ID) == again.string_id(V.CAT_HBM_USAGE))
    assert [again.args(int(r)) for r in rows2] == [trace.args(int(r)) for r in rows]
