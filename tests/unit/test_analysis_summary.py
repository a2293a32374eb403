"""Operator and kernel summary on a small nested trace, against sums worked out by hand from
the trace as built: host self and total, device self and total through External ids,
achieved TFLOPS and % of peak."""

from __future__ import annotations

import pytest
from trace_factory import US, Build

from neuron_profiler.trace import EventKind
from neuron_profiler.trace import vocabulary as V


def test_ops_and_kernels() -> None:
    b = Build().step(1, 0, 1000)
    b.b.metadata["deviceProperties"] = [{V.PROP_PEAK_BF16_TFLOPS: 100.0, V.PROP_HBM_GBPS: 1000.0}]
    # aten::linear (0-300) > aten::addmm (50-250) > launches; aten::relu (400-450)
    b.host("aten::linear", 0, 300, args={V.ARG_EXTERNAL_ID: 1})
    b.host("aten::addmm", 50, 250, args={V.ARG_EXTERNAL_ID: 2})
    b.host("aten::relu", 400, 450, args={V.ARG_EXTERNAL_ID: 3})
    b.host("aten::addmm", 500, 520, args={V.ARG_EXTERNAL_ID: 4})
    b.kernel(300, 400, launch_us=60, args={V.ARG_EXTERNAL_ID: 2, V.ARG_FLOPS: 4e9})
    b.kernel(600, 700, launch_us=510, args={V.ARG_EXTERNAL_ID: 4, V.ARG_FLOPS: 2e9})
    b.kernel(460, 470, launch_us=410, name="VectorE: relu", args={V.ARG_EXTERNAL_ID: 3})
    s = b.report().summary
    ops = {o.name: o for o in s.ops}
    assert (ops["aten::linear"].host_total_ns, ops["aten::linear"].host_self_ns) == (
        300 * US,
        100 * US,
    )
    assert ops["aten::linear"].device_self_ns == 0
    assert ops["aten::linear"].device_total_ns == 100 * US
    assert ops["aten::addmm"].calls == 2
    # its two launches (2 µs each, at 60 and 510) are runtime children: not host self time
    assert (ops["aten::addmm"].host_total_ns, ops["aten::addmm"].host_self_ns) == (
        220 * US,
        216 * US,
    )
    assert ops["aten::addmm"].device_self_ns == ops["aten::addmm"].device_total_ns == 200 * US
    assert [o.name for o in s.ops][:2] == ["aten::addmm", "aten::linear"]
    assert not any(o.name.startswith("ProfilerStep") for o in s.ops)
    mm = {k.name: k for k in s.kernels}["TensorE: mm"]
    assert (mm.calls, mm.total_ns, mm.min_ns, mm.max_ns) == (2, 200 * US, 100 * US, 100 * US)
    assert mm.achieved_tflops == pytest.approx(6e9 / 200e-6 / 1e12)
    assert mm.pct_of_peak == pytest.approx(100 * mm.achieved_tflops / 100.0, abs=1e-3)
    relu = {k.name: k for k in s.kernels}["VectorE: relu"]
    assert relu.achieved_tflops is None and relu.pct_of_peak is None
    assert s.kernels[0].name == "TensorE: mm"


def test_repeated_op_merges_and_annotation_ops_are_not_rows() -> None:
    """As torch's ``_remove_dup_nodes`` and torch-tb-profiler: an op whose only op child has
    its name is one call, the child's launches replacing its own; 2021-style ``Operator``
    ranges that are annotations today (Optimizer, DataLoader) stay tree nodes, not rows."""
    b = Build().step(1, 0, 1000)
    b.host("Optimizer.step#SGD.step", 0, 900)
    b.host("aten::div", 10, 110, args={V.ARG_EXTERNAL_ID: 1})  # > aten::div > aten::empty
    b.host("aten::div", 20, 100, args={V.ARG_EXTERNAL_ID: 2})
    b.host("aten::empty", 30, 40, args={V.ARG_EXTERNAL_ID: 3})
    b.kernel(200, 230, launch_us=50, name="VectorE: div", args={V.ARG_EXTERNAL_ID: 2})
    b.host("aten::div", 300, 400, args={V.ARG_EXTERNAL_ID: 4})  # two op children: no merge
    b.host("aten::div", 310, 330, args={V.ARG_EXTERNAL_ID: 5})
    b.host("aten::mul", 340, 360, args={V.ARG_EXTERNAL_ID: 6})
    ops = {o.name: o for o in b.report().summary.ops}
    assert "Optimizer.step#SGD.step" not in ops
    div = ops["aten::div"]
    assert div.calls == 1 + 2
    assert div.host_total_ns == (100 + 100 + 20) * US
    # merged call: 100 - empty 10 - launch 2; the other two: 100 - 20 - 20, and 20
    assert div.host_self_ns == (88 + 60 + 20) * US
    assert div.device_self_ns == div.device_total_ns == 30 * US
    assert ops["aten::empty"].calls == ops["aten::mul"].calls == 1


def test_host_only_trace_has_ops_and_no_kernels() -> None:
    s = Build().step(1, 0, 100).host("aten::add", 10, 20, kind=EventKind.CPU_OP).report().summary
    assert [o.name for o in s.ops] == ["aten::add"] and s.kernels == ()


def test_pct_of_peak_uses_each_rows_dtype_engine_and_link() -> None:
    """fp32 and bf16 matmuls under one name, an integer kernel (no table entry: the engine's
    fp32 figure) and host-to-device / device-to-device copies: each against its own peak,
    worked out by hand from the properties written here."""
    b = Build().step(1, 0, 10_000)
    table = {"TensorE": {"float32": 40.0, "bfloat16": 160.0}, "VectorE": {"float32": 0.5}}
    b.b.metadata["deviceProperties"] = [
        {
            V.PROP_PEAK_TFLOPS: table,
            V.PROP_PEAK_BF16_TFLOPS: 160.0,
            V.PROP_PEAK_FP32_TFLOPS: 40.0,
            V.PROP_HBM_GBPS: 1000.0,
            V.PROP_HOST_LINK_GBPS: 20.0,
            V.PROP_DMA_GBPS: 200.0,
        }
    ]
    mm = {V.ARG_ENGINE: "TensorE"}
    b.kernel(0, 100, args={**mm, V.ARG_DTYPE: "float32", V.ARG_FLOPS: 2e9})  # 50 µs at peak
    b.kernel(200, 300, args={**mm, V.ARG_DTYPE: "bfloat16", V.ARG_FLOPS: 8e9})  # 50 µs
    b.kernel(
        400,
        500,
        name="VectorE: bincount",
        args={V.ARG_ENGINE: "VectorE", V.ARG_DTYPE: "int64", V.ARG_FLOPS: 1e7},
    )  # 20 µs
    copy = {V.ARG_BYTES: 1e6}
    b.kernel(
        600,
        700,
        name="Memcpy HtoD (Host -> NeuronCore)",
        kind=EventKind.MEMCPY,
        stream=2,
        args={**copy, V.ARG_DIRECTION: "h2d"},
    )  # 50 µs at 20 GB/s
    b.kernel(
        800,
        900,
        name="Memcpy DtoD (NeuronCore -> NeuronCore)",
        kind=EventKind.MEMCPY,
        stream=2,
        args={**copy, V.ARG_DIRECTION: "d2d"},
    )  # 5 µs at 200 GB/s
    k = {x.name: x for x in b.report().summary.kernels}
    assert k["TensorE: mm"].pct_of_peak == pytest.approx(100 * (50 + 50) / 200)
    assert k["TensorE: mm"].achieved_tflops == pytest.approx(10e9 / 200e-6 / 1e12)
    assert k["VectorE: bincount"].pct_of_peak == pytest.approx(20.0)
    assert k["Memcpy HtoD (Host -> NeuronCore)"].pct_of_peak == pytest.approx(50.0)
    assert k["Memcpy DtoD (NeuronCore -> NeuronCore)"].pct_of_peak == pytest.approx(5.0)
