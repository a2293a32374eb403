"""Projections of synthetic traces worked out by hand (times in µs)."""

from __future__ import annotations

import json
import math

import jsonschema
import pytest

from neuron_profiler.analysis.projection import project
from neuron_profiler.costmodel.chips import CHIPS
from neuron_profiler.reports.projection_json import projection_document, schema_text
from neuron_profiler.trace import EventKind
from tests.trace_factory import MM_ARGS, Build, mm_then_sync

_mm_then_sync = mm_then_sync


def test_same_chip_replays_the_recorded_step() -> None:
    p = project(_mm_then_sync().b.build(), "same", source="v100")
    assert p.source.step_ms == pytest.approx(1.0)
    assert p.replay_ms == pytest.approx(1.0)
    assert p.target.step_ms == pytest.approx(1.0)
    assert (p.target.low_ms, p.target.high_ms) == pytest.approx((1.0, 1.0))


def test_compute_bound_matmul_scales_by_fp32_peak() -> None:
    # 1024^3 fp32 mm: 2.15 GFLOP, 12.6 MB: compute-bound on V100 (136.8 µs vs 14 µs) and A100;
    # 500 µs x 15.7/19.5 = 402.564 µs; launch latency 10 µs (the trace's) -> A100's 5 µs: the
    # kernel runs 15..417.564; the sync returns 5 µs later (422.564 instead of 525), and the
    # host's remaining 475 µs end the step at 897.564 µs.
    p = project(_mm_then_sync().b.build(), "a100", source="v100")
    kernel = 500 * 15.7 / 19.5
    assert p.target.step_ms == pytest.approx((15 + kernel + 5 + 475) / 1e3, abs=2e-6)
    compute = {c.cls: c for c in p.classes}["compute"]
    assert (compute.source_ms, compute.target_ms) == pytest.approx((0.5, kernel / 1e3), abs=1e-6)
    assert p.ops[0].name == "aten::mm" and p.ops[0].cls == "compute"
    assert p.target.low_ms < p.target.step_ms < p.target.high_ms


def test_device_bound_step_grows_on_a_slower_chip() -> None:
    # onto trn2: fp32 matrix per logical core 41.69 TFLOPS: 500 x 15.7/41.6875 = 188.31 µs
    p = project(_mm_then_sync().b.build(), "trn2", source="v100")
    kernel = 500 * 15.7e12 / CHIPS["trn2"].matrix_flops_per_s("float32")
    start = 10 + 15  # trn2's launch latency, 15 µs
    assert p.target.step_ms == pytest.approx((start + kernel + 5 + 475) / 1e3, abs=2e-6)


def test_fallback_op_leaves_the_device_and_costs_the_host() -> None:
    # aten::nonzero on 1M float32 elements (4 MB in, 4 MB out priced): on trn2 its 100 µs kernel
    # leaves the device; the host waits for the device (idle: nothing before it), copies 8 MB
    # over the host link (16 GB/s per logical core: 500 µs, + 2 x 2 µs fixed) and runs it on
    # the host profile: 8 MB at 50 GB/s = 160 µs / 0.5 efficiency = 320 µs: 824 µs after the
    # op's end at 50; the rest of the step (50 -> 1000) follows.
    b = Build().step(1, 0, 1000)
    b.host("aten::nonzero", 0, 50, args={"Input Dims": [[1 << 20]], "Input type": ["float"]})
    b.kernel(20, 120, launch_us=10, name="nonzero_kernel")
    p = project(b.b.build(), "trn2", source="v100")
    assert p.fallbacks and p.fallbacks[0].name == "aten::nonzero"
    assert p.fallbacks[0].target_ms == 0.0
    nbytes = 2 * (1 << 20) * 4
    extra = nbytes / 16e9 * 1e6 + 4 + nbytes / 50e9 / 0.5 * 1e6
    assert p.target.step_ms == pytest.approx((1000 + extra) / 1e3, abs=2e-6)
    assert {c.cls: c.target_ms for c in p.classes}["host"] == pytest.approx(extra / 1e3, abs=2e-6)


def test_json_document_follows_its_schema() -> None:
    doc = projection_document(project(_mm_then_sync().b.build(), "h100", source="v100"))
    jsonschema.validate(doc, json.loads(schema_text()))
    assert doc["source"] == {"chip": "v100", "step_ms": 1.0}
    assert {"chip", "step_ms", "low_ms", "high_ms"} <= set(doc["target"])
    assert [c["class"] for c in doc["classes"]] == [
        "compute",
        "memory_bound",
        "copies",
        "collectives",
        "host",
        "idle",
    ]


def test_cpu_only_trace_moves_its_ops_onto_the_device() -> None:
    """A CPU-only step (0-1000): aten::t 20-23 (a view: the framework's dispatch, 3 µs),
    aten::addmm 100-600 (its bias copy inside it goes with it), aten::relu 600-700, aten::item
    700-710. Onto trn2 at the cost model's kernel time (the roofline bound + 1 µs fixed, the
    emulator's): addmm 64x1024 @ 1024x256 fp32 is memory-bound (1,377,280 bytes at 725 GB/s =
    1.8997 µs, flops 0.805 µs): 2.900 µs; relu (64x256 in and out) 1.181 µs. Each op's host
    time becomes 3 µs of dispatch per aten op in it plus 10 µs (host_launch_ns) per kernel:
    addmm (itself and copy_, one kernel: copy_) 16 µs, relu 13 µs (-484 at 600, -87 at 700).
    addmm runs 115-117.9 (launch + 15 µs), relu is launched at 600-484 = 116 and runs
    131-132.181; item waits for it: the host is at 129 when it syncs, the step ends 3.181 µs
    later than 1000-571."""
    dims = {"Input Dims": [[256], [64, 1024], [1024, 256], [], []], "Input type": ["float"] * 5}
    b = Build().step(1, 0, 1000)
    b.host("aten::t", 20, 23)
    b.host("aten::addmm", 100, 600, args=dims)
    b.host(
        "aten::copy_",
        110,
        150,
        args={"Input Dims": [[64, 256], [256]], "Input type": ["float"] * 2},
    )
    b.host("aten::relu", 600, 700, args={"Input Dims": [[64, 256]], "Input type": ["float"]})
    b.host("aten::item", 700, 710, args={"Input Dims": [[]], "Input type": ["float"]})
    p = project(b.b.build(), "trn2")
    trn2 = CHIPS["trn2"]
    hbm = trn2.hbm_bytes_per_s()
    addmm = math.ceil((1_377_280 / hbm + 1e-6) * 1e9) / 1e3
    relu = math.ceil((2 * 64 * 256 * 4 / hbm + 1e-6) * 1e9) / 1e3
    assert addmm == pytest.approx(2.900, abs=1e-3) and relu == pytest.approx(1.181, abs=1e-3)
    relu_end = (600 - 484) + 15 + relu
    assert p.target.step_ms == pytest.approx((1000 - 571 + (relu_end - 129)) / 1e3, abs=2e-6)
    assert p.source.step_ms == pytest.approx(1.0)
    assert sorted(o.name for o in p.ops) == ["aten::addmm", "aten::relu"]
    host = {c.cls: c for c in p.classes}["host"]
    assert (host.source_ms, host.target_ms) == pytest.approx((0.6, 0.029))


def test_cpu_only_op_priced_as_the_emulator_prices_it() -> None:
    """One kernel time for both: a moved op's device time is the emulated device's
    (``RooflineModel.kernel_ns``) for the same op on trn2."""
    from neuron_profiler.costmodel.chips import chip
    from neuron_profiler.emulator.timing import RooflineModel

    b = Build().step(1, 0, 1000)
    b.host("aten::mm", 100, 600, args=MM_ARGS)
    b.host("aten::item", 700, 710)
    p = project(b.b.build(), "trn2")
    emulated = RooflineModel(chip("trn2")).kernel_ns(
        flops=2 * 1024**3, bytes_moved=3 * 1024 * 1024 * 4, dtype="float32", matrix=True
    )
    assert {c.cls: c for c in p.classes}["compute"].target_ms == pytest.approx(emulated / 1e6)


def test_what_if_edits_replay_on_the_same_graph() -> None:
    # batch x2 onto A100: the kernel 2 x 402.564 µs, so the sync returns at 15 + 805.128 + 5
    # and the step ends 475 µs later: +402.564 µs
    p = project(_mm_then_sync().b.build(), "a100", source="v100", what_if=("batch x2",))
    kernel = 500 * 15.7 / 19.5
    (row,) = p.what_if
    assert row.step_ms == pytest.approx((15 + 2 * kernel + 5 + 475) / 1e3, abs=2e-6)
    assert row.delta_ms == pytest.approx(kernel / 1e3, abs=2e-6)


def test_what_if_no_fallback_keeps_the_op_on_the_device() -> None:
    # the fallback test's nonzero, run natively on trn2: no host delay, the host-bound step
    # stays at its recorded 1000 µs
    b = Build().step(1, 0, 1000)
    b.host("aten::nonzero", 0, 50, args={"Input Dims": [[1 << 20]], "Input type": ["float"]})
    b.kernel(20, 120, launch_us=10, name="nonzero_kernel")
    p = project(b.b.build(), "trn2", source="v100", what_if=("no-fallback:nonzero",))
    (row,) = p.what_if
    assert row.step_ms == pytest.approx(1.0, abs=1e-6)
    assert row.delta_ms == pytest.approx(1.0 - p.target.step_ms, abs=1e-6)


@pytest.mark.parametrize(
    "op", ["nonzero", "nonzero.default", "aten::nonzero.default", " aten::nonzero "]
)
def test_what_if_no_fallback_names_the_op_any_way(op: str) -> None:
    """Every spelling of the op (namespace or none, overload or none) is the same edit: the
    step stays at its recorded 1000 µs (an overload used to match nothing: no change)."""
    b = Build().step(1, 0, 1000)
    b.host("aten::nonzero", 0, 50, args={"Input Dims": [[1 << 20]], "Input type": ["float"]})
    b.kernel(20, 120, launch_us=10, name="nonzero_kernel")
    p = project(b.b.build(), "trn2", source="v100", what_if=(f"no-fallback:{op}",))
    (row,) = p.what_if
    assert row.step_ms == pytest.approx(1.0, abs=1e-6)
    assert not any("no change" in a for a in p.assumptions)


def test_fallback_table_reads_every_overload_and_the_in_place_variant() -> None:
    """One op-name rule (``costmodel.fallbacks.normalise_op``): overloads, a missing
    namespace and the in-place variant (one ``_``) all name the table's op; a dunder op is
    its own."""
    from neuron_profiler.costmodel.fallbacks import falls_back, normalise_op, out_of_place

    for name in ("aten::nonzero.default", "nonzero", "aten::nonzero.out", "aten::histc_"):
        assert falls_back(name, "float32"), name
    assert not falls_back("aten::add.Tensor", "float32")
    assert normalise_op("aten::add_.Tensor") == "aten::add_"
    assert out_of_place("aten::add_") == "aten::add"
    assert out_of_place("aten::__and__") == "aten::__and__"


def test_what_if_no_data_stall_removes_the_loader_wait() -> None:
    b = _mm_then_sync()
    b.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 600, 700)
    p = project(b.b.build(), "same", source="v100", what_if=("no-data-stall",))
    (row,) = p.what_if
    assert (row.step_ms, row.delta_ms) == pytest.approx((0.9, -0.1), abs=1e-6)


def test_unknown_what_if_is_refused() -> None:
    from neuron_profiler.errors import NeuronProfilerError

    for bad in ("compile", "overlap", "batch x0", "faster"):
        with pytest.raises(NeuronProfilerError) as e:
            project(_mm_then_sync().b.build(), "same", source="v100", what_if=(bad,))
        assert e.value.exit_code == 2


def test_target_queue_depth_blocks_the_host() -> None:
    """70 kernels launched at 10..79 µs, recorded back to back (100 µs each from 20); the host
    then works until 8080 and syncs (the device was done at 7020). Onto trn2 (no shapes: HBM
    ratio 900/725, 124.138 µs a kernel; launch latency 10 -> 15 µs) the device runs 25..8714.655.
    Unbounded, the sync would wait until then (step 20000 + 634.655 µs); with trn2's 63 launches
    in flight, launch 69 waits for kernel 6 (ends 893.966) and delays the host by 814.966 µs, so
    the sync finds the device done: the step is 20000 + 814.966 µs."""
    b = Build().step(1, 0, 20000)
    for i in range(70):
        b.kernel(20 + 100 * i, 120 + 100 * i, launch_us=10 + i, name="elementwise_kernel")
    b.host("python work", 80, 8080)
    b.host("cudaDeviceSynchronize", 8080, 8081, kind=EventKind.RUNTIME, cat="cuda_runtime")
    p = project(b.b.build(), "trn2", source="v100")
    kernel = 100 * 900 / 725
    assert p.target.step_ms == pytest.approx((20000 + 10 + 15 + 7 * kernel - 79) / 1e3, abs=2e-6)
    assert any("7 launches a step blocked" in a for a in p.assumptions)


def test_cpu_only_nonzero_runs_on_a_gpu_and_the_host_waits_for_it() -> None:
    """aten::nonzero (100-600 µs, 2**20 floats) may sync (``vocabulary.SYNC_OP_NAMES``: its
    output size is the data's): moved onto an A100 (which has no fallback table) it is a kernel
    of 8 MiB, launched at 100; its host time shrinks to one launch, and the host then waits for
    its result before the step's 400 µs after it."""
    b = Build().step(1, 0, 1000)
    b.host("aten::nonzero", 100, 600, args={"Input Dims": [[1 << 20]], "Input type": ["float"]})
    p = project(b.b.build(), "a100")
    assert [o.name for o in p.ops] == ["aten::nonzero"] and p.fallbacks == ()
    assert p.target.step_ms < 1.0 - 0.4  # the host's 500 µs of compute are gone


def test_cpu_only_fallback_stays_on_the_host_with_its_copies() -> None:
    """Onto trn2, which runs aten::nonzero on the host (costmodel.fallbacks), the op stays on
    the host with its recorded 500 µs, and its 8 MiB (input read, output written) cross the
    host link: the step grows by that copy time (plus a DMA's fixed time each way); it is
    listed among the fallbacks the target adds, and an aten::relu beside it is still moved."""
    b = Build().step(1, 0, 1000)
    b.host("aten::nonzero", 100, 600, args={"Input Dims": [[1 << 20]], "Input type": ["float"]})
    b.host("aten::relu", 700, 750, args={"Input Dims": [[64]], "Input type": ["float"]})
    p = project(b.b.build(), "trn2")
    trn2 = CHIPS["trn2"]
    copy_us = (8 * (1 << 20) / trn2.host_link_bytes_per_s() + 2 * trn2.dma_fixed_ns * 1e-9) * 1e6
    (fb,) = p.fallbacks
    assert (fb.name, fb.count, fb.cls) == ("aten::nonzero", 1, "host")
    assert fb.source_ms == pytest.approx(0.5) and fb.target_ms == pytest.approx(
        0.5 + copy_us / 1e3, abs=1e-6
    )
    assert [o.name for o in p.ops] == ["aten::relu"]
    # the step: everything before the relu as recorded, plus the copies
    assert p.target.step_ms > (1000 + copy_us - 50) / 1e3  # (the relu's 50 µs at most gone)
    assert p.target.step_ms <= (1000 + copy_us) / 1e3 + 1e-6


def test_cpu_only_fallback_recorded_inside_another_op_keeps_that_op_on_the_host() -> None:
    """aten::linalg_inv decomposes into the linalg_inv_ex that trn2 runs on the host: the op the
    script called (the outermost one) stays on the host, listed as a fallback. It was moved
    as a few-µs kernel (a linear-algebra trace projected 30x too fast)."""
    b = Build().step(1, 0, 1000)
    b.host("aten::linalg_inv", 100, 600, args={"Input Dims": [[256, 256]], "Input type": ["float"]})
    b.host(
        "aten::linalg_inv_ex", 110, 590, args={"Input Dims": [[256, 256]], "Input type": ["float"]}
    )
    p = project(b.b.build(), "trn2")
    assert [o.name for o in p.fallbacks] == ["aten::linalg_inv"] and p.ops == ()
    assert p.target.step_ms >= 1.0  # nothing got faster


def test_cpu_only_python_scalar_is_no_float64_input() -> None:
    """``y.add_(1.0)`` records the scalar as a 0-dim double: the op is float32 work, moved (it
    was listed as a float64 fallback: every optimizer and loss-scaling op)."""
    b = Build().step(1, 0, 1000)
    args = {"Input Dims": [[1 << 16], [], []], "Input type": ["float", "double", "Scalar"]}
    b.host("aten::add_", 100, 600, args=args)
    p = project(b.b.build(), "trn2")
    assert [o.name for o in p.ops] == ["aten::add_"] and p.fallbacks == ()


def test_cpu_only_no_fallback_what_if_moves_the_op() -> None:
    """--what-if no-fallback:nonzero on a CPU-only trace onto trn2 moves the op as onto a GPU:
    the step loses its 500 µs of host compute and its copies (it was 0, with a note saying
    the target runs no op on the host)."""
    b = Build().step(1, 0, 1000)
    b.host("aten::nonzero", 100, 600, args={"Input Dims": [[1 << 20]], "Input type": ["float"]})
    p = project(b.b.build(), "trn2", what_if=("no-fallback:nonzero",))
    (row,) = p.what_if
    assert row.delta_ms < -0.5
    assert not any(a.startswith("--what-if no-fallback") for a in p.assumptions)


def test_cpu_only_data_loading_annotation_stays_on_the_host() -> None:
    """Current torch writes the DataLoader's span as a user annotation: the ops inside it (the
    collate's nonzero, its gt) are data loading and stay on the host, neither moved nor
    fallbacks (only op rows were read as DataLoader spans)."""
    b = Build().step(1, 0, 1000)
    b.host(
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
        50,
        700,
        kind=EventKind.USER_ANNOTATION,
        cat="user_annotation",
    )
    b.host(
        "aten::gt",
        100,
        200,
        args={"Input Dims": [[1 << 16], []], "Input type": ["float", "Scalar"]},
    )
    b.host("aten::nonzero", 300, 600, args={"Input Dims": [[1 << 16]], "Input type": ["bool"]})
    b.host("aten::relu", 800, 900, args={"Input Dims": [[1 << 16]], "Input type": ["float"]})
    p = project(b.b.build(), "trn2")
    assert [o.name for o in p.ops] == ["aten::relu"] and p.fallbacks == ()


def test_cpu_only_fallbacks_in_json_validate() -> None:
    b = Build().step(1, 0, 1000)
    b.host("aten::nonzero", 100, 600, args={"Input Dims": [[1 << 20]], "Input type": ["float"]})
    doc = projection_document(project(b.b.build(), "trn2"))
    jsonschema.validate(doc, json.loads(schema_text()))
    assert [f["class"] for f in doc["fallbacks"]] == ["host"]


def test_batch_scales_a_fallbacks_copies() -> None:
    """batch x2 doubles the data a fallback copies across the host link: the step grows by one
    more copy time (the recorded host time stays). The copies did not scale."""
    b = Build().step(1, 0, 1000)
    b.host("aten::nonzero", 100, 600, args={"Input Dims": [[1 << 20]], "Input type": ["float"]})
    p = project(b.b.build(), "trn2", what_if=("batch x2",))
    (fb,) = p.fallbacks
    copy_ms = fb.target_ms - fb.source_ms
    (row,) = p.what_if
    assert copy_ms > 0.1 and row.delta_ms == pytest.approx(copy_ms, abs=2e-6)


def test_a_fallback_without_shapes_is_counted_in_the_assumptions() -> None:
    """A fallback with no recorded shapes has only the fixed DMA times for its copies: said,
    with the count (it was silent)."""
    b = Build().step(1, 0, 1000)
    b.host("aten::nonzero", 100, 600)
    b.host("aten::nonzero", 700, 800, args={"Input Dims": [[1 << 10]], "Input type": ["float"]})
    p = project(b.b.build(), "trn2")
    assert [(o.name, o.count) for o in p.fallbacks] == [("aten::nonzero", 2)]
    (said,) = [a for a in p.assumptions if "recorded no shapes to size their copies" in a]
    assert said.startswith("1 of the 2 op runs")


def test_cpu_only_float64_op_stays_on_the_host() -> None:
    """float64 inputs fall back whatever the op (NeuronCores have no FP64 datapath)."""
    b = Build().step(1, 0, 1000)
    b.host(
        "aten::mul",
        100,
        600,
        args={"Input Dims": [[1 << 20], [1 << 20]], "Input type": ["double", "double"]},
    )
    p = project(b.b.build(), "trn2")
    assert [o.name for o in p.fallbacks] == ["aten::mul"] and p.ops == ()


@pytest.mark.parametrize("read", ["aten::item", "aten::_local_scalar_dense", "aten::is_nonzero"])
def test_cpu_only_value_read_stays_on_the_host_whatever_its_input(read: str) -> None:
    """A value read (``vocabulary.VALUE_READ_OPS``) has no device work: it stays on the host
    and waits for the work launched before it. Given a recorded 1-element input the cost model
    prices at 8 bytes, it was moved as a kernel of its own (host time shrunk to a launch)."""

    def projected(dims: list) -> object:
        b = Build().step(1, 0, 1000)
        b.host("aten::relu", 100, 600, args={"Input Dims": [[1 << 20]], "Input type": ["float"]})
        b.host(read, 700, 800, args={"Input Dims": dims, "Input type": ["float"]})
        return project(b.b.build(), "trn2")

    scalar, one_element = projected([[]]), projected([[1]])
    assert [o.name for o in one_element.ops] == ["aten::relu"]
    assert one_element.target.step_ms == pytest.approx(scalar.target.step_ms, abs=1e-9)
    assert one_element.items == scalar.items == 1


def test_cpu_only_allocation_stays_on_the_host() -> None:
    """aten::new_empty allocates (``vocabulary.NO_KERNEL_OPS``, the emulator's rule too): no
    device work, its host time as recorded; the aten::relu beside it is moved."""
    b = Build().step(1, 0, 1000)
    b.host(
        "aten::new_empty",
        100,
        200,
        args={"Input Dims": [[1 << 20], []], "Input type": ["float", ""]},
    )
    b.host("aten::relu", 600, 700, args={"Input Dims": [[64, 256]], "Input type": ["float"]})
    p = project(b.b.build(), "trn2")
    assert [o.name for o in p.ops] == ["aten::relu"]


def test_cpu_only_wrapper_ops_are_not_moved_twice() -> None:
    """aten::linear holds aten::t (a view) and aten::addmm: the op the script called, linear, is
    moved with what is inside it, its host time counted once (0.6 ms, not 0.6 + 0.5)."""
    dims = {"Input Dims": [[256], [64, 1024], [1024, 256], [], []], "Input type": ["float"] * 5}
    b = Build().step(1, 0, 1000)
    b.host("aten::linear", 50, 650, args={"Input Dims": [[64, 1024], [256, 1024], [256]]})
    b.host("aten::t", 60, 70)
    b.host("aten::addmm", 100, 600, args=dims)
    p = project(b.b.build(), "trn2")
    assert [o.name for o in p.ops] == ["aten::linear"]
    compute = {c.cls: c for c in p.classes}["compute"]
    assert compute.source_ms == pytest.approx(0.6)


def _eager_loop(
    b: Build, first_us: int, count: int, period_us: int, op_us: int, into_us: int = 10
) -> None:
    """``count`` small ops (``op_us`` of host time each, ``period_us`` apart) each launching a
    5 µs kernel ``into_us`` into the op, which starts 10 µs after its launch."""
    for i in range(count):
        t = first_us + i * period_us
        b.host("aten::add", t, t + op_us, args={"Input Dims": [[8], [8]]})
        b.kernel(
            t + into_us + 10, t + into_us + 15, launch_us=t + into_us, name="elementwise_kernel"
        )


@pytest.mark.parametrize("into_us", [10, 49])
def test_what_if_compiled_saves_the_launches_of_a_host_bound_eager_loop(into_us: int) -> None:
    """Five 50 µs ops (100-550) launch one tiny kernel each; a cudaDeviceSynchronize at 900
    (a graph break), then two 40 µs ops (910-990); the host-bound step is 1000 µs. Compiled,
    each side of the break is one graph: the first op of each launches it, the others' host
    time goes: (5 - 1) x 50 + (2 - 1) x 40 = 240 µs saved. (into_us 49: the 2 µs launch calls
    end after their op: a call belongs to the op it starts in.)"""
    b = Build().step(1, 0, 1000)
    _eager_loop(b, 100, 5, 100, 50, into_us)
    b.host("cudaDeviceSynchronize", 900, 905, kind=EventKind.RUNTIME, cat="cuda_runtime")
    _eager_loop(b, 910, 2, 40, 40)
    p = project(b.b.build(), "same", source="v100", what_if=("compiled",))
    assert p.target.step_ms == pytest.approx(1.0, abs=1e-6)
    (row,) = p.what_if
    assert row.delta_ms == pytest.approx(-0.240, abs=1e-6)
    assert row.step_ms == pytest.approx(0.760, abs=1e-6)
    assert any("5 launches a step saved in 2 graphs" in a for a in p.assumptions)


def test_what_if_compiled_on_a_cpu_only_trace_saves_dispatch_per_launch() -> None:
    """A CPU-only step of 4 relu ops (100 µs each) moved onto trn2: each keeps 10 µs of host
    dispatch; compiled, one graph launch: 3 x 10 µs fewer."""
    b = Build().step(1, 0, 1000)
    for i in range(4):
        t = 100 + 150 * i
        b.host("aten::relu", t, t + 100, args={"Input Dims": [[64, 256]], "Input type": ["float"]})
    p = project(b.b.build(), "trn2", what_if=("compiled",))
    (row,) = p.what_if
    assert row.delta_ms == pytest.approx(-0.030, abs=1e-6)


def test_compiled_region_is_one_graph_launch_on_trn2() -> None:
    """A torch.compile region (100-200) whose generated code launches 4 kernels (launch calls
    of 2 µs at 110, 130, 150, 170): on an A100 each stays a launch; on trn2 the region is one
    graph execution, launched once: 3 launch calls' host time (6 µs) leave the host-bound
    1000 µs step."""
    b = Build().step(1, 0, 1000)
    b.host("Torch-Compiled Region: 0/0", 100, 200)
    for i in range(4):
        t = 110 + 20 * i
        b.kernel(t + 10, t + 15, launch_us=t, name="triton_poi_fused_add_0")
    trace = b.b.build()
    assert project(trace, "a100", source="v100").target.step_ms == pytest.approx(1.0, abs=1e-6)
    p = project(trace, "trn2", source="v100", what_if=("compiled",))
    assert p.target.step_ms == pytest.approx(0.994, abs=1e-6)
    assert any("3 launches a step saved" in a for a in p.assumptions)
    assert p.what_if[0].delta_ms == pytest.approx(0.0, abs=1e-6)  # already compiled


def _serialised_collective(comm_us: int) -> Build:
    """A 1000 µs compute kernel (launched at 10, runs 20-1020) and an all-reduce launched at 30
    that ran only when the kernel ended (1020 + comm), the host waiting in
    cudaDeviceSynchronize from 100 until 5 µs after the all-reduce, then working 475 µs."""
    end = 1020 + comm_us
    b = Build().step(1, 0, end + 5 + 475)
    b.kernel(20, 1020, launch_us=10, name="volta_sgemm_128x64_nn")
    b.kernel(1020, end, launch_us=30, name="ncclDevKernel_AllReduce_Sum_f32_RING_LL", stream=2)
    b.host("cudaDeviceSynchronize", 100, end + 5, kind=EventKind.RUNTIME, cat="cuda_runtime")
    b.host("aten::sum", end + 5, end + 480)
    return b


@pytest.mark.parametrize(("comm_us", "hidden_us"), [(500, 500), (2000, 980)])
def test_what_if_overlap_comm_hides_the_collective_behind_compute(
    comm_us: int, hidden_us: int
) -> None:
    """Recorded, the all-reduce waited for the kernel (the replay reproduces the step only with
    that dependency). Overlapped, it starts at its launch + 10 µs (40) beside the kernel, which
    runs until 1020: min(comm, 980 µs of compute left) is hidden."""
    p = project(
        _serialised_collective(comm_us).b.build(), "same", source="a100", what_if=("overlap-comm",)
    )
    step = (1020 + comm_us + 480) / 1e3
    assert p.source.step_ms == pytest.approx(step, abs=1e-6)
    assert p.replay_ms == pytest.approx(step, abs=1e-6)
    (row,) = p.what_if
    assert row.delta_ms == pytest.approx(-hidden_us / 1e3, abs=1e-6)


def test_emulator_overhead_is_no_host_time_of_the_target() -> None:
    """mm_then_sync with 300 µs of the emulator's own dispatch (600-900) after the sync: the
    replay check keeps it (the recorded step, 1000 µs), the projection leaves it out (700 µs),
    on the trace's own chip and on another."""
    b = _mm_then_sync()
    b.host("emulator overhead: dispatch", 600, 900, kind=EventKind.OTHER, cat="overhead")
    trace = b.b.build()
    p = project(trace, "same", source="v100")
    assert p.replay_ms == pytest.approx(1.0, abs=1e-6)
    assert p.target.step_ms == pytest.approx(0.7, abs=1e-6)
    kernel = 500 * 15.7 / 19.5
    onto = project(trace, "a100", source="v100")
    assert onto.target.step_ms == pytest.approx((15 + kernel + 5 + 475 - 300) / 1e3, abs=2e-6)
    assert any("emulator's own host work" in a for a in p.assumptions)


def test_no_fallback_edit_keeps_the_emulator_overhead_out() -> None:
    """The no-fallback what-if rebuilt the costs without the projection's own adjustments: the
    emulator's overhead came back as host time, so an edit that moves nothing changed the step
    (+300 µs here) and removing a real fallback could read as a slowdown."""
    b = _mm_then_sync()
    b.host("emulator overhead: dispatch", 600, 900, kind=EventKind.OTHER, cat="overhead")
    p = project(b.b.build(), "a100", source="v100", what_if=("no-fallback:zzz_no_such_op",))
    (row,) = p.what_if
    assert row.delta_ms == pytest.approx(0.0, abs=1e-9)
    assert row.step_ms == pytest.approx(p.target.step_ms, abs=1e-9)


def test_a_compiled_graph_execution_is_not_merged_with_eager_ops() -> None:
    """The eager loop of the compiled test (five 50 µs ops, 100-550) with the third op's kernel
    an execution of a compiled graph (the emulator's 'graph id' arg): --what-if compiled keeps it
    a graph of its own, which breaks the eager graphs around it: ops 1-2 and 4-5 are two graphs,
    each keeping its first op's host time: 2 x 50 µs saved (4 x 50 without the break)."""
    b = Build().step(1, 0, 1000)
    for i in range(5):
        t = 100 + i * 100
        b.host("aten::add", t, t + 50, args={"Input Dims": [[8], [8]]})
        graph = i == 2  # named as the emulator names a graph's executions
        b.kernel(
            t + 20,
            t + 25,
            launch_us=t + 10,
            name="NEFF: graph_7 (forward)" if graph else "elementwise_kernel",
            args={"graph id": 7} if graph else None,
        )
    p = project(b.b.build(), "same", source="v100", what_if=("compiled",))
    (row,) = p.what_if
    assert row.delta_ms == pytest.approx(-0.100, abs=1e-6)


def test_source_classes_describe_the_recording_not_its_replay() -> None:
    """Launch latencies of 5, 50 and 5 µs (the replay uses their median, 5 µs, so it shortens
    the second step's wait): the source column is the trace's own. Steps of 1000 µs, each with
    one 200 µs kernel: source idle is 1000 - 200 = 800 µs a step, whatever the replay gives,
    and the source rows add up to the recorded step."""
    b = Build()
    for k, latency in enumerate((5, 50, 5)):
        t0 = 1000 * k
        b.step(k + 1, t0, t0 + 1000)
        b.host("aten::relu", t0, t0 + 20)
        b.kernel(t0 + 10 + latency, t0 + 210 + latency, launch_us=t0 + 10)
        b.host("cudaDeviceSynchronize", t0 + 30, t0 + 230 + latency, kind=EventKind.RUNTIME)
    p = project(b.b.build(), "same", source="v100")
    assert p.source.step_ms == pytest.approx(1.0)
    rows = {c.cls: c.source_ms for c in p.classes}
    assert rows["idle"] == pytest.approx(0.8)
    assert rows["compute"] + rows["copies"] + rows["collectives"] + rows["idle"] == pytest.approx(
        p.source.step_ms
    )


def test_ops_are_named_by_the_aten_op_not_a_dispatch_frame() -> None:
    """On the emulated device the launch sits inside a ``PythonSubclass`` frame (its tensor
    subclass's dispatch) inside the aten op: the row is the aten op's."""
    b = Build().step(1, 0, 1000)
    b.host("aten::mm", 0, 50, args=MM_ARGS)
    b.host("PythonSubclass", 5, 45)
    b.kernel(20, 520, launch_us=10)
    p = project(b.b.build(), "a100", source="v100")
    assert [o.name for o in p.ops] == ["aten::mm"]


def _neuron_mm(*, shapes: bool, engine: str = "TensorE", name: str = "TensorE: mm") -> Build:
    """mm_then_sync as this project's collector writes it: the kernel carries its own cost
    (1024^3 fp32 mm: 2 x 1024^3 flops, 3 x 4 MB), the op its shapes only under record_shapes."""
    b = Build().step(1, 0, 1000)
    b.host("aten::mm", 0, 100, args=MM_ARGS if shapes else None)
    own = {"flops": 2 * 1024**3, "bytes": 3 * 4 * 1024**2, "engine": engine, "dtype": "float32"}
    b.kernel(20, 520, launch_us=10, name=name, args=own)
    b.host("cudaDeviceSynchronize", 200, 525, kind=EventKind.RUNTIME, cat="cuda_runtime")
    b.host("aten::sum", 525, 1000)
    return b


def test_kernel_carrying_its_own_cost_is_priced_without_recorded_shapes() -> None:
    # TensorE kernel, no shapes: compute-bound matrix work (2.15 GFLOP vs 12.6 MB), scaled by
    # the fp32 matrix peaks (v100 15.7 TFLOPS -> a100 19.5) exactly as with the op's shapes;
    # not by the HBM ratio (900 -> 1555 GB/s) as an unrecognised kernel is
    with_shapes = project(_neuron_mm(shapes=True).b.build(), "a100", source="v100")
    from_kernel = project(_neuron_mm(shapes=False).b.build(), "a100", source="v100")
    kernel = 500 * 15.7 / 19.5
    for p in (with_shapes, from_kernel):
        compute = {c.cls: c for c in p.classes}["compute"]
        assert compute.target_ms == pytest.approx(kernel / 1e3, abs=1e-6)
        assert p.ops[0].name == "aten::mm" and p.ops[0].cls == "compute"
    assert from_kernel.target.step_ms == pytest.approx(with_shapes.target.step_ms, abs=1e-9)
    # the same figures on a vector engine: vector peak (v100 15.7 -> a100 19.5 TFLOPS too, so
    # take trn2, whose vector rate differs from its matrix peak) against the matrix engine's
    vector = project(
        _neuron_mm(shapes=False, engine="VectorE", name="VectorE: mm").b.build(),
        "trn2",
        source="v100",
    )
    matrix = project(_neuron_mm(shapes=False).b.build(), "trn2", source="v100")
    trn2 = CHIPS["trn2"]
    assert {c.cls: c for c in matrix.classes}["compute"].target_ms == pytest.approx(
        0.5 * 15.7e12 / trn2.matrix_flops_per_s("float32"), abs=1e-6
    )
    v100 = CHIPS["v100"]
    src = max(2 * 1024**3 / v100.vector_flops_per_s(), 12 * 1024**2 / v100.hbm_bytes_per_s())
    tgt = max(2 * 1024**3 / trn2.vector_flops_per_s(), 12 * 1024**2 / trn2.hbm_bytes_per_s())
    assert {c.cls: c for c in vector.classes}["compute"].target_ms == pytest.approx(
        0.5 * tgt / src, abs=1e-6
    )


def test_a_source_chip_overriding_the_traces_own_is_stated() -> None:
    """The trace names a V100; --source-chip a100 overrides it (the user's choice), and the
    assumptions say so; naming the trace's own chip, or a chip for a trace naming none, adds
    nothing."""

    def v100():  # noqa: ANN202
        b = _mm_then_sync()
        b.b.metadata["deviceProperties"] = [{"id": 0, "name": "Tesla V100-SXM2-32GB"}]
        return b.b.build()

    chosen = project(v100(), "trn2", source="a100")
    assert chosen.source.chip == "a100"
    said = [a for a in chosen.assumptions if "as chosen" in a]
    assert said == ["source chip a100 as chosen, though the trace's deviceProperties name v100"]
    for p in (
        project(v100(), "trn2", source="v100"),
        project(_mm_then_sync().b.build(), "trn2", source="a100"),
    ):
        assert not [a for a in p.assumptions if "as chosen" in a]
