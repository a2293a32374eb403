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

from neuron_profiler.emulator.chips import ChipSpec


@dataclass(frozen=True)
class RooflineModel:
    """``max(flops / peak, bytes / bandwidth)`` divided by ``speed_factor`` (labelled in traces).

    speed_factor > 1 makes the device faster, < 1 slower (a demo uses it to make device work
    dominate); it is recorded in the trace metadata next to ``emulated: true``.
    """

    chip: ChipSpec
    speed_factor: float = 1.0

    def __post_init__(self) -> None:
        if not (self.speed_factor > 0 and math.isfinite(self.speed_factor)):
            raise ValueError(f"speed_factor must be a positive number, got {self.speed_factor}")

    def _ns(self, seconds: float) -> int:
        return max(1, math.ceil(seconds * 1e9 / self.speed_factor))

    def kernel_ns(self, *, flops: int, bytes_moved: int, dtype: str, matrix: bool) -> int:
        peak = self.chip.matrix_flops_per_s(dtype) if matrix else self.chip.vector_flops_per_s()
        return self._ns(max(flops / peak, bytes_moved / self.chip.hbm_bytes_per_s()))

    def host_copy_ns(self, nbytes: int) -> int:
        return self._ns(nbytes / self.chip.host_link_bytes_per_s())

    def device_copy_ns(self, nbytes: int) -> int:
        return self._ns(nbytes / self.chip.dma_bytes_per_s())


class QueueClock:
    """One device queue: work starts at ``max(launch + latency, queue free)`` and runs in order."""

    def __init__(self) -> None:
        self.free_at_ns = 0

    def schedule(self, *, launch_ns: int, duration_ns: int, latency_ns: int = 0) -> tuple[int, int]:
        start = max(launch_ns + latency_ns, self.free_at_ns)
        end = start + duration_ns
        self.free_at_ns = end
        return start, end
