"""The roofline and ring formulas the emulator and the projection share (torch-free)::

    seconds = roofline_s(flops, bytes_moved, peak_flops_per_s, bytes_per_s)
    seconds = collective_s(chip, nbytes=..., world=8, collective="allreduce")

An op takes as long as its slower resource: flops at the engine's peak or bytes at the memory
bandwidth (Williams, Waterman & Patterson, "Roofline", CACM 2009). A collective runs the ring
algorithm (Patarasuk & Yuan, JPDC 2009): all-reduce moves 2(n-1)/n of the buffer in 2(n-1)
steps, all-gather / reduce-scatter / all-to-all (n-1)/n in n-1 steps, anything else one buffer
in n-1 steps, each step paying the link latency.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from neuron_profiler.costmodel.chips import ChipSpec
from neuron_profiler.trace import vocabulary as V

# Achieved fraction of the roofline bound of an op run on the host CPU profile (an op a Neuron
# target runs on the host): ASSUMPTION, a round figure between the memory-bound elementwise
# kernels (near their bandwidth) and small matrix products (far from peak).
DEFAULT_EFFICIENCY = 0.5
# Achieved fraction of the roofline bound of a device kernel priced from its size alone: the
# emulated device's kernels and a CPU-only trace's ops moved onto a device, one figure for both
# (``kernel_s``). ASSUMPTION: the bound itself; the projection's range spans ±50% around it.
KERNEL_EFFICIENCY = 1.0


def roofline_s(
    flops: float, bytes_moved: float, peak_flops_per_s: float, bytes_per_s: float
) -> float:
    return max(flops / peak_flops_per_s, bytes_moved / bytes_per_s)


def kernel_s(
    flops: float,
    bytes_moved: float,
    peak_flops_per_s: float,
    bytes_per_s: float,
    fixed_ns: int,
) -> float:
    """Seconds of one device kernel priced from its size: its roofline bound at
    ``KERNEL_EFFICIENCY`` plus the chip's fixed kernel time (``fixed_ns``; 0 for one fused group
    inside a compiled graph, whose execution pays it once). The emulator and the projection both
    price kernels here."""
    bound = roofline_s(flops, bytes_moved, peak_flops_per_s, bytes_per_s)
    return bound / KERNEL_EFFICIENCY + fixed_ns * 1e-9


def ring_traffic(nbytes: float, world: int, collective: str) -> tuple[int, float]:
    """(steps, bytes each rank sends) of one ring collective over ``world`` ranks;
    ``collective``: its name (``vocabulary.collective_kind`` reads the kind: ``allreduce``,
    ``all_reduce``, ``ncclDevKernel_AllReduce...``); any other kind (broadcast, reduce, a
    point-to-point) passes the whole message along the ring."""
    n = max(1, world)
    kind = V.collective_kind(collective)
    if kind == "all_reduce":
        return 2 * (n - 1), 2 * (n - 1) / n * nbytes
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return n - 1, (n - 1) / n * nbytes
    return n - 1, float(nbytes)


def host_copy_s(chip: ChipSpec, nbytes: Any, copies: int = 1) -> Any:
    """Seconds to move ``nbytes`` (a number or an array) across the host link in ``copies``
    DMAs, each with the chip's fixed DMA time: the emulator's host <-> device copy, and the
    projection's copies of an op the target runs on the host (its inputs out, its outputs
    back: two)."""
    return nbytes / chip.host_link_bytes_per_s() + copies * chip.dma_fixed_ns * 1e-9


def collective_s(chip: ChipSpec, *, nbytes: float, world: int, collective: str) -> float:
    """Seconds of one ring collective on the chip's links (one step's latency alone when the
    group has one rank)."""
    if max(1, world) == 1:
        return chip.collective_step_latency_ns * 1e-9
    steps, volume = ring_traffic(nbytes, world, collective)
    return steps * chip.collective_step_latency_ns * 1e-9 + volume / (
        chip.collective_gbps_per_core * 1e9
    )


def bound_parts_s(
    chip: ChipSpec,
    flops: np.ndarray,
    bytes_moved: np.ndarray,
    dtype: np.ndarray,
    matrix: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(compute seconds, memory seconds) of many ops on one chip, vectorised: the matrix peak of
    each op's dtype (one lookup per distinct dtype) or the vector rate, and the HBM bandwidth."""
    names, code = np.unique(dtype.astype(str), return_inverse=True)
    matrix_peak = np.array([chip.matrix_flops_per_s(str(d)) for d in names])[code.reshape(-1)]
    peak = np.where(matrix, matrix_peak, chip.vector_flops_per_s())
    return flops / peak, bytes_moved / chip.hbm_bytes_per_s()
