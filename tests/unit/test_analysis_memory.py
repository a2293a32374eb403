"""The memory analysis (analysis/memory.py) on hand-built traces whose figures are worked out
by hand: the allocator walk and its pairing by (device, Addr), the allocating op through the
host tree, per-step peaks and floors, the two findings (within 10% of capacity; growth step
after step), HBM usage counters by category, and traces without memory events."""

from __future__ import annotations

import json

import jsonschema

from neuron_profiler.analysis import analyze
from neuron_profiler.analysis.context import AnalysisContext
from neuron_profiler.analysis.memory import BEFORE_WINDOW, UNKNOWN_OP, memory_usage
from neuron_profiler.reports.json_report import schema_text, to_document
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import Trace, TraceBuilder

CUDA, PRIVATEUSE1 = 1, 20
US = 1000  # ns


def _steps(b: TraceBuilder, n: int, step_us: int = 50) -> None:
    for k in range(n):
        b.add(
            name=f"ProfilerStep#{k}",
            ts_ns=k * step_us * US,
            dur_ns=step_us * US,
            kind=S.EventKind.USER_ANNOTATION,
            cat="user_annotation",
            pid=1,
            tid=1,
        )


def _op(b: TraceBuilder, name: str, start_us: int, end_us: int) -> None:
    b.add(
        name=name,
        ts_ns=start_us * US,
        dur_ns=(end_us - start_us) * US,
        kind=S.EventKind.CPU_OP,
        cat="cpu_op",
        pid=1,
        tid=1,
    )


def _mem(b: TraceBuilder, t_us: int, addr: int, nbytes: int, total: int | None, **more) -> None:
    args = {"Device Type": CUDA, "Device Id": 0, "Addr": addr, "Bytes": nbytes, **more}
    if total is not None:
        args |= {"Total Allocated": total, "Total Reserved": more.get("reserved", total)}
    args.pop("reserved", None)
    b.add(
        name="[memory]",
        ts_ns=t_us * US,
        ph=S.Phase.INSTANT,
        kind=S.EventKind.CPU_INSTANT,
        cat="cpu_instant_event",
        pid=1,
        tid=1,
        args=args,
    )


def _worked(capacity: int) -> Trace:
    """Three steps of 50 us on one thread. 1000 bytes allocated before the trace, still live.
    Step 0: A (100 B) in aten::empty alone; B (300 B) in aten::empty inside aten::mm (mm
    allocated it); C (50 B) in mm itself: 1450, the peak (reserve 1600); B freed: 1150.
    Step 1: D (300 B) outside any op, freed: 1450 again, then 1150. Step 2: A freed: 1050."""
    b = TraceBuilder()
    b.metadata["deviceProperties"] = [{"id": 0, "name": "GPU", "totalGlobalMem": capacity}]
    _steps(b, 3)
    _op(b, "aten::empty", 0, 10)
    _op(b, "aten::mm", 20, 40)
    _op(b, "aten::empty", 25, 30)
    _mem(b, 5, addr=0xA, nbytes=100, total=1100)
    _mem(b, 27, addr=0xB, nbytes=300, total=1400, reserved=1500)
    _mem(b, 35, addr=0xC, nbytes=50, total=1450, reserved=1600)
    _mem(b, 45, addr=0xB, nbytes=-300, total=1150, reserved=1600)
    _mem(b, 60, addr=0xD, nbytes=300, total=1450, reserved=1600)
    _mem(b, 70, addr=0xD, nbytes=-300, total=1150, reserved=1600)
    _mem(b, 110, addr=0xA, nbytes=-100, total=1050, reserved=1600)
    return b.build()


def test_peak_steps_live_allocations_and_ops_by_hand() -> None:
    mem = memory_usage(AnalysisContext(_worked(capacity=10_000)))
    assert mem is not None
    (d,) = mem.devices
    assert (d.label, d.absolute, d.events) == ("cuda:0", True, 7)
    assert (d.peak_bytes, d.peak_ns, d.peak_reserved_bytes) == (1450, 35 * US, 1600)
    assert d.step_peak_bytes == (1450, 1450, 1150)
    assert d.step_floor_bytes == (1000, 1150, 1050)  # step 0's carried in: before the trace
    assert (d.capacity_bytes, d.headroom_bytes, d.capacity_pct) == (10_000, 8400, 16.0)
    # live at the first peak: A, B (mm's: the aten::empty inside mm is passed over), C
    assert sorted((t.bytes, t.op) for t in d.live_at_peak) == [
        (50, "aten::mm"),
        (100, "aten::empty"),  # an aten::empty nothing encloses is the op
        (300, "aten::mm"),
    ]
    by_op = {
        o.op: (o.live_bytes, o.live_tensors, o.allocated_bytes, o.allocations) for o in d.by_op
    }
    assert by_op == {
        "aten::mm": (350, 2, 350, 2),
        "aten::empty": (100, 1, 100, 1),
        UNKNOWN_OP: (0, 0, 300, 1),
        BEFORE_WINDOW: (1000, 0, 0, 0),
    }
    assert (mem.frees_before_trace, mem.without_address) == (0, 0)
    assert mem.findings == ()


def test_within_ten_percent_of_capacity_is_a_finding() -> None:
    # held at the peak: the reserve, 1600 B; 90% of 1777 is 1599.3: found; of 1778, 1600.2: not
    found = memory_usage(AnalysisContext(_worked(capacity=1777)))
    assert found is not None
    (f,) = found.findings
    assert (f.kind, f.device, f.bytes, f.at_ns) == ("memory_near_capacity", "cuda:0", 1600, 35 * US)
    assert f.docs == "docs/analysis.md#memory_near_capacity"
    assert "177 B of 1,777 B free" in f.suggestion
    clear = memory_usage(AnalysisContext(_worked(capacity=1778)))
    assert clear is not None and clear.findings == ()


def _leaky(per_step: list[int]) -> Trace:
    """A step's temporaries (500 B, made and freed in aten::add) and ``per_step[k]`` bytes
    kept in step k (outside any op)."""
    b = TraceBuilder()
    _steps(b, len(per_step))
    total, addr = 0, 1
    for k, kept in enumerate(per_step):
        t = k * 50
        _op(b, "aten::add", t + 5, t + 15)  # (an op a step: diff's alignment needs one)
        for nbytes in (500, -500):
            total += nbytes
            _mem(b, t + 10 + (nbytes < 0), addr=addr, nbytes=nbytes, total=total)
        addr += 1
        total += kept
        _mem(b, t + 20, addr=addr + 1000, nbytes=kept, total=total)
    return b.build()


def test_memory_growing_in_every_step_is_a_leak_finding() -> None:
    mem = memory_usage(AnalysisContext(_leaky([64, 64, 64, 64])))
    assert mem is not None
    (d,) = mem.devices
    assert d.step_floor_bytes == (0, 64, 128, 192)
    assert d.step_peak_bytes == (500, 564, 628, 692)  # the temporaries come before the kept bytes
    (f,) = mem.findings
    assert (f.kind, f.bytes) == ("memory_leak", 64)
    assert "64 B a step" in f.suggestion


def test_no_leak_when_a_step_does_not_grow_or_too_few_steps() -> None:
    for kept in ([64, 64, 0, 64], [64, 64]):
        mem = memory_usage(AnalysisContext(_leaky(kept)))
        assert mem is not None and mem.findings == (), kept


def test_without_total_allocated_the_level_is_the_running_sum_and_frees_unpaired() -> None:
    """Older traces: no Total Allocated, and a free of a block allocated before the trace."""
    b = TraceBuilder()
    _mem(b, 1, addr=7, nbytes=-40, total=None)  # allocated before the trace
    _mem(b, 2, addr=8, nbytes=100, total=None)
    _mem(b, 3, addr=9, nbytes=10, total=None)
    _mem(b, 4, addr=8, nbytes=-100, total=None)
    mem = memory_usage(AnalysisContext(b.build()))
    assert mem is not None
    (d,) = mem.devices
    assert (d.absolute, d.peak_bytes, d.peak_ns, d.peak_reserved_bytes) == (False, 70, 3 * US, None)
    assert mem.frees_before_trace == 1
    assert {t.bytes for t in d.live_at_peak} == {100, 10}


def _hbm(b: TraceBuilder, pid: int, t_us: int, usage: dict[str, int]) -> None:
    b.add(
        name="HBM 0 in use (bytes)",
        ts_ns=t_us * US,
        ph=S.Phase.COUNTER,
        kind=S.EventKind.OTHER,
        cat=V.CAT_HBM_USAGE,
        pid=pid,
        args=usage,
    )


def test_hbm_usage_counters_by_category_and_process() -> None:
    b = TraceBuilder()
    b.metadata["deviceProperties"] = [{"id": 1, "chip": "trn2", V.PROP_HBM_BYTES: 1000}]
    b.process_names = {500: "NeuronCore 1", 600: "Neuron device 0 HBM"}
    _hbm(b, 500, 0, {"tensors": 100, "model_code": 50})
    _hbm(b, 500, 10, {"tensors": 800, "model_code": 50, "scratchpad": 60})  # 910: 91%
    _hbm(b, 500, 20, {"tensors": 200, "model_code": 50})
    _hbm(b, 600, 5, {"tensors": 7})
    mem = memory_usage(AnalysisContext(b.build()))
    assert mem is not None
    core, chip = mem.devices
    assert (core.label, core.source, core.device_id) == ("NeuronCore 1", "hbm_usage", 1)
    assert (core.peak_bytes, core.peak_ns, core.capacity_bytes) == (910, 10 * US, 1000)
    assert core.timeline.names == ("model_code", "scratchpad", "tensors")
    assert core.timeline.values.tolist() == [[50, 50, 50], [0, 60, 0], [100, 800, 200]]
    assert chip.capacity_bytes == int(96 * 2**30)  # the trn2 chip's HBM (costmodel/chips.py)
    assert [(f.kind, f.device) for f in mem.findings] == [("memory_near_capacity", "NeuronCore 1")]


def _no_memory() -> Trace:
    b = TraceBuilder()
    _steps(b, 2)
    _op(b, "aten::mm", 5, 20)
    return b.build()


def test_a_trace_without_memory_events_has_no_memory_section() -> None:
    plain = analyze(_no_memory())
    assert plain.memory is None
    doc = to_document([plain])
    assert "memory" not in doc["traces"][0]
    with_memory = to_document([analyze(_worked(capacity=1777))])
    jsonschema.validate(with_memory, json.loads(schema_text()))
    section = with_memory["traces"][0]["memory"]
    (device,) = section["devices"]
    assert (device["peak_bytes"], device["capacity_bytes"], device["headroom_bytes"]) == (
        1450,
        1777,
        177,
    )
    assert device["timeline"]["series"]["allocated"][-1] == 1050
    assert [f["kind"] for f in section["findings"]] == ["memory_near_capacity"]


def test_html_report_draws_the_timeline_and_only_with_memory_events() -> None:
    from html_checks import parse

    from neuron_profiler.reports.html_report import render_html

    report = analyze(_worked(capacity=1777))
    page = render_html([report])
    assert "Device memory" in page and "memory_near_capacity" in page
    fig = parse(page).figures()["chart-0-memory"]
    (d,) = report.memory.devices
    assert [t["name"] for t in fig["data"]] == ["cuda:0 allocated", "cuda:0 reserved"]
    assert [round(v * 2**20) for v in fig["data"][0]["y"]] == [
        1100,
        1400,
        1450,
        1150,
        1450,
        1150,
        1050,
    ]
    assert fig["data"][0]["x"] == [report.to_trace_us(t) for t in d.timeline.ts_ns.tolist()]
    assert "Device memory" not in render_html([analyze(_no_memory())])


def test_diff_compares_the_peaks_of_both_runs() -> None:
    from neuron_profiler.analysis.diff import diff
    from neuron_profiler.analysis.memory import PeakDelta
    from neuron_profiler.reports.diff_json import diff_document
    from neuron_profiler.reports.diff_json import schema_text as diff_schema

    d = diff(_worked(capacity=1777), _leaky([64, 64, 64, 64]))
    # A: 1450 at its peak, 1600 reserved; B: 192 kept + 500 of temporaries, its reserve equal
    assert d.memory == (PeakDelta("cuda:0", 1450, 692, 1600, 692),)
    assert d.memory[0].delta_bytes == 692 - 1450
    doc = diff_document([d])
    jsonschema.validate(doc, json.loads(diff_schema()))
    assert doc["memory_peaks"] == [
        {
            "device": "cuda:0",
            "a_bytes": 1450,
            "b_bytes": 692,
            "delta_bytes": -758,
            "a_held_bytes": 1600,
            "b_held_bytes": 692,
        }
    ]
    one_sided = diff(_worked(capacity=1777), _no_memory())
    assert one_sided.memory == (PeakDelta("cuda:0", 1450, None, 1600, None),)
    plain = diff_document([diff(_no_memory(), _no_memory())])
    assert "memory_peaks" not in plain


def test_a_hostile_value_is_counted_not_fatal() -> None:
    """A Bytes that is text and an Addr that is a list: the batch is read the slow way, the
    bad values count as absent (and are counted), the other events keep their figures."""
    b = TraceBuilder()
    _mem(b, 1, addr=1, nbytes=100, total=100)
    b.add(
        name="[memory]",
        ts_ns=2 * US,
        ph=S.Phase.INSTANT,
        kind=S.EventKind.CPU_INSTANT,
        pid=1,
        tid=1,
        args={"Device Type": CUDA, "Device Id": 0, "Addr": [1], "Bytes": "many"},
    )
    _mem(b, 3, addr=1, nbytes=-100, total=0)
    mem = memory_usage(AnalysisContext(b.build()))
    assert mem is not None
    (d,) = mem.devices
    assert (mem.without_bytes, mem.without_address, d.events) == (1, 1, 3)
    assert (d.absolute, d.peak_bytes) == (False, 100)  # one event lacks Total Allocated


def test_an_hbm_value_that_is_no_number_is_counted_and_left_out() -> None:
    b = TraceBuilder()
    _hbm(b, 500, 0, {"tensors": 100, "model_code": 50})
    _hbm(b, 500, 10, {"tensors": 300, "model_code": "fifty"})
    mem = memory_usage(AnalysisContext(b.build()))
    assert mem is not None
    (d,) = mem.devices
    assert (d.peak_bytes, d.peak_ns, mem.without_bytes) == (300, 10 * US, 1)


def test_a_set_up_step_and_a_few_bytes_of_growth_are_no_leak() -> None:
    """Floors 0, 51,600 and 51,648 B (FSDP sets up its buffers in the first step, then its
    bookkeeping grows by 48 B): the first rise is set-up, the next is 0.09% of the peak: no
    finding, growth per step 48 B."""
    mem = memory_usage(AnalysisContext(_leaky([51_600, 48, 48])))
    assert mem is not None
    (d,) = mem.devices
    assert d.step_floor_bytes == (0, 51_600, 51_648)
    assert d.growth_per_step_bytes == 48
    assert mem.findings == ()
