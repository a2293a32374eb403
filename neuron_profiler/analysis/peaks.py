"""The device's peak figures, from ``deviceProperties``: the one lookup the analyses share
(kernel % of peak, a CPU fallback's native time), and the chip profile it names::

    props = peak_properties(trace)                  # None: the trace gives no peaks
    peak_tflops(props, "float32", "TensorE")        # the compute peak for that dtype and engine
    device_chip(trace)                              # costmodel profile (trn2, v100, ...) or None

A compute peak is the ``peak_tflops`` table's figure for the row's ``dtype`` on its ``engine``; a
dtype the table lacks (integers, float64) is at that engine's float32 figure, as the emulator
models it. Without a table (older traces): ``peak_bf16_tflops`` for bfloat16/float16 or no
dtype, else ``peak_fp32_tflops``. A byte-bound row is measured against the host link (h2d, d2h
copies), the DMA engines (d2d) or HBM. A capture whose device says ``peaks_known: false`` gives
none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from neuron_profiler.costmodel.chips import CHIPS, ChipSpec, chip_for_device
from neuron_profiler.costmodel.ops import OpCost
from neuron_profiler.costmodel.roofline import roofline_s
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace.model import Trace

_HALF_PRECISION = ("bfloat16", "float16")


def peak_properties(trace: Trace) -> Mapping[str, Any] | None:
    """The ``deviceProperties`` of the first device that gives peak figures."""
    for p in trace.device_properties():
        if p.get(V.PROP_PEAKS_KNOWN, True) is not False and _number(p.get(V.PROP_HBM_GBPS)):
            return p
    return None


def device_chip(trace: Trace) -> ChipSpec | None:
    """The cost model's profile of the chip the trace ran on, from its ``deviceProperties``: our
    ``chip`` key, else a profile whose name occurs in the device's ``name`` (or AMD's
    ``gcnArchName``); None when none does."""
    for props in trace.device_properties():
        key = props.get(V.PROP_CHIP)
        if isinstance(key, str) and key in CHIPS:
            return CHIPS[key]
        for field in (V.PROP_NAME, "gcnArchName"):
            name = props.get(field)
            if isinstance(name, str) and (spec := chip_for_device(name)) is not None:
                return spec
    return None


def profile_native_time(cost: OpCost, spec: ChipSpec) -> float:
    """Roofline ns of one op on a chip profile (per logical core), where the trace gives no
    peaks (a real capture) but names its chip: the cost model's figures (docs/chips.md)."""
    peak = spec.matrix_flops_per_s(cost.dtype) if cost.matrix else spec.vector_flops_per_s()
    return roofline_s(cost.flops, cost.bytes_moved, peak, spec.hbm_bytes_per_s()) * 1e9


def peak_tflops(props: Mapping[str, Any], dtype: object, engine: object) -> float | None:
    """The compute peak for an op of this dtype on this engine (see the module docstring)."""
    table = props.get(V.PROP_PEAK_TFLOPS)
    per_dtype = table.get(engine) if isinstance(table, dict) and isinstance(engine, str) else None
    if isinstance(per_dtype, dict):
        given = per_dtype.get(dtype) if isinstance(dtype, str) else None
        return _number(given) or _number(per_dtype.get("float32"))
    if not isinstance(dtype, str) or dtype in _HALF_PRECISION:
        return _number(props.get(V.PROP_PEAK_BF16_TFLOPS))
    return _number(props.get(V.PROP_PEAK_FP32_TFLOPS))


def native_time(
    flops: float, nbytes: float, dtype: object, engine: object, props: Mapping[str, Any] | None
) -> float:
    """Roofline ns of one call on the device; NaN when an input or a peak is unknown."""
    peak = None if props is None else peak_tflops(props, dtype, engine)
    hbm = hbm_gbps(props)
    if peak is None or hbm is None or np.isnan(flops) or np.isnan(nbytes):
        return float("nan")
    return max(flops / (peak * 1e3), nbytes / hbm)  # TFLOPS = 1e3 FLOP/ns; GB/s = B/ns


def hbm_gbps(props: Mapping[str, Any] | None) -> float | None:
    return None if props is None else _number(props.get(V.PROP_HBM_GBPS))


def bandwidth_gbps(props: Mapping[str, Any] | None, direction: object) -> float | None:
    """The peak a byte-bound row is measured against: a host <-> device copy (``direction``
    h2d / d2h) the host link, a device-to-device copy the core's DMA engines, other work HBM."""
    if props is None:
        return None
    key = {
        V.DIR_H2D: V.PROP_HOST_LINK_GBPS,
        V.DIR_D2H: V.PROP_HOST_LINK_GBPS,
        V.DIR_D2D: V.PROP_DMA_GBPS,
    }.get(direction if isinstance(direction, str) else "", V.PROP_HBM_GBPS)
    return _number(props.get(key))


def _number(value: object) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
    return float(value) if ok and np.isfinite(value) else None
