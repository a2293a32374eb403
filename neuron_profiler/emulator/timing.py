"""The emulated device's timing model: a roofline per op and a clock per core queue.

    model = RooflineModel(chip("trn2"), speed_factor=1.0)
    dur_ns = model.kernel_ns(flops=2 * m * n * k, bytes_moved=..., dtype="bfloat16", matrix=True)
    clock = QueueClock()
    start, end = clock.schedule(launch_ns=t, duration_ns=dur_ns, latency_ns=chip.launch_latency_ns)

Durations are pure functions of (chip, op size, dtype, speed factor): deterministic run to run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from neuron_profiler.costmodel.chips import ChipSpec
from neuron_profiler.costmodel.roofline import collective_s, host_copy_s, kernel_s
from neuron_profiler.trace import vocabulary as V

# NeuronCore engines (docs/chips.md): TensorE does matrix work, ScalarE activation functions,
# GpSimdE gathers and scatters, VectorE the rest. Which aten op runs where is this emulator's
# assumption, made to name kernels the way the hardware's profile groups them.
TENSOR_ENGINE, VECTOR_ENGINE, SCALAR_ENGINE, GPSIMD_ENGINE = (
    V.MATRIX_ENGINE,
    "VectorE",
    "ScalarE",
    "GpSimdE",
)
GRAPH_ENGINE = "NEFF"  # one execution of a compiled graph, all engines (compiled.py)
_SCALAR_OPS = frozenset(
    f"aten::{op}"
    for op in (
        "exp",
        "log",
        "tanh",
        "sigmoid",
        "gelu",
        "gelu_backward",
        "silu",
        "silu_backward",
        "erf",
        "pow",
        "sqrt",
        "rsqrt",
        "sin",
        "cos",
        "relu",
        "threshold_backward",
        "tanh_backward",
        "sigmoid_backward",
        "_softmax",
        "_softmax_backward_data",
        "_log_softmax",
        "_log_softmax_backward_data",
        "softplus",
        "elu",
        "leaky_relu",
        "hardtanh",
    )
)
_GPSIMD_OPS = frozenset(
    f"aten::{op}"
    for op in (
        "embedding",
        "embedding_dense_backward",
        "index",
        "index_select",
        "index_put_",
        "index_add_",
        "gather",
        "scatter",
        "scatter_add",
        "scatter_add_",
        "sort",
        "topk",
        "cumsum",
        "argmax",
        "argmin",
        "nonzero",
        "masked_fill_",
        "masked_select",
        "embedding_backward",
        "take",
    )
)


# dtypes the model distinguishes (fp8 at the FP8 rate, fp16 at the BF16 rate, anything else at
# the FP32 rate on the Tensor engine; one vector rate whatever the dtype).
_MATRIX_DTYPES = ("float32", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2")
_VECTOR_DTYPES = ("float32", "bfloat16", "float16")


def engine_for(op: str, matrix: bool) -> str:
    """The engine a kernel of ``op`` is modelled on (named in its trace row)."""
    if matrix:
        return TENSOR_ENGINE
    if op in _SCALAR_OPS:
        return SCALAR_ENGINE
    return GPSIMD_ENGINE if op in _GPSIMD_OPS else VECTOR_ENGINE


@dataclass(frozen=True)
class RooflineModel:
    """``max(flops / peak, bytes / bandwidth) + fixed kernel time``, divided by ``speed_factor``
    (labelled in traces).

    speed_factor > 1 makes the device faster, < 1 slower (a demo uses it to make device work
    dominate); it is recorded in the trace metadata next to ``emulated: true``.
    """

    chip: ChipSpec
    speed_factor: float = 1.0

    def __post_init__(self) -> None:
        if not (self.speed_factor > 0 and math.isfinite(self.speed_factor)):
            raise ValueError(f"speed_factor must be a positive number, got {self.speed_factor}")
        # Rates read on every op: computed once (the dataclass is frozen, so via object).
        object.__setattr__(self, "_hbm", self.chip.hbm_bytes_per_s())
        object.__setattr__(self, "_vector", self.chip.vector_flops_per_s())
        object.__setattr__(self, "_matrix", {})

    def _ns(self, seconds: float) -> int:
        return max(1, math.ceil(seconds * 1e9 / self.speed_factor))

    def _chip_peak(self, dtype: str, matrix: bool) -> float:
        """The chip's compute rate for a kernel of this dtype on its engine (Tensor engine for
        matrix ops, the vector rate otherwise), before the speed factor; cached per dtype."""
        if not matrix:
            return self._vector  # type: ignore[attr-defined]
        peak = self._matrix.get(dtype)  # type: ignore[attr-defined]
        if peak is None:
            peak = self._matrix[dtype] = self.chip.matrix_flops_per_s(dtype)  # type: ignore[attr-defined]
        return peak

    def peak_flops_per_s(self, dtype: str, matrix: bool) -> float:
        """The compute peak the model uses for a kernel of this dtype, *after* the speed
        factor."""
        return self._chip_peak(dtype, matrix) * self.speed_factor

    def kernel_ns(self, *, flops: int, bytes_moved: int, dtype: str, matrix: bool) -> int:
        """The cost model's kernel time (``costmodel.roofline.kernel_s``), the projection's too."""
        peak = self._chip_peak(dtype, matrix)
        return self._ns(kernel_s(flops, bytes_moved, peak, self._hbm, self.chip.kernel_fixed_ns))  # type: ignore[attr-defined]

    def roofline_ns(self, *, flops: int, bytes_moved: int, dtype: str, matrix: bool) -> int:
        """``kernel_ns`` without the fixed kernel time: one fused group inside a compiled graph,
        whose execution pays the fixed time once."""
        peak = self._chip_peak(dtype, matrix)
        return self._ns(kernel_s(flops, bytes_moved, peak, self._hbm, 0))  # type: ignore[attr-defined]

    def peaks(self) -> dict:
        """Every peak the model uses, after the speed factor (deviceProperties): compute in
        TFLOPS per engine and dtype, bandwidths in GB/s. Keys from the trace vocabulary."""
        from neuron_profiler.trace import vocabulary as V

        s = self.speed_factor
        tensor = {d: self.chip.matrix_flops_per_s(d) * s / 1e12 for d in _MATRIX_DTYPES}
        vector = {d: self.chip.vector_flops_per_s() * s / 1e12 for d in _VECTOR_DTYPES}
        return {
            V.PROP_PEAK_TFLOPS: {
                TENSOR_ENGINE: tensor,
                VECTOR_ENGINE: vector,
                SCALAR_ENGINE: dict(vector),
                GPSIMD_ENGINE: dict(vector),
            },
            V.PROP_PEAK_BF16_TFLOPS: tensor["bfloat16"],
            V.PROP_PEAK_FP32_TFLOPS: tensor["float32"],
            V.PROP_HBM_GBPS: self.chip.hbm_bytes_per_s() * s / 1e9,
            V.PROP_HOST_LINK_GBPS: self.chip.host_link_bytes_per_s() * s / 1e9,
            V.PROP_DMA_GBPS: self.chip.dma_bytes_per_s() * s / 1e9,
            V.PROP_COLLECTIVE_LINK_GBPS: self.chip.collective_gbps_per_core * s,
            V.PROP_PEAKS_SPEED_FACTOR: s,
        }

    def host_copy_ns(self, nbytes: int) -> int:
        return self._ns(host_copy_s(self.chip, nbytes))

    def host_staging_ns(self, nbytes: int) -> int:
        """Host time to copy ``nbytes`` between pageable memory and the runtime's pinned staging
        buffer. Host work: not divided by the speed factor (which scales the device)."""
        return math.ceil(nbytes / self.chip.host_staging_bytes_per_s() * 1e9)

    def device_copy_ns(self, nbytes: int) -> int:
        return self._ns(nbytes / self.chip.dma_bytes_per_s() + self.chip.dma_fixed_ns * 1e-9)

    def collective_ns(self, *, nbytes: int, world: int, collective: str) -> int:
        """The cost model's ring (``costmodel.roofline.collective_s``) on this chip's links."""
        return self._ns(collective_s(self.chip, nbytes=nbytes, world=world, collective=collective))


class QueueClock:
    """One device queue: work starts at ``max(launch + latency, queue free)`` and runs in order."""

    def __init__(self) -> None:
        self.free_at_ns = 0

    def schedule(
        self, *, launch_ns: int, duration_ns: int, latency_ns: int = 0, not_before_ns: int = 0
    ) -> tuple[int, int]:
        """``not_before_ns``: a dependency (inputs produced on another queue) the work waits for."""
        start = max(launch_ns + latency_ns, self.free_at_ns, not_before_ns)
        end = start + duration_ns
        self.free_at_ns = end
        return start, end
