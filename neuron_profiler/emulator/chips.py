"""Chip constants for the emulated device's roofline model: one table, each figure with its source.

Per-chip figures are from AWS's Trainium2/Trainium3 architecture pages; docs/chips.md lists every
figure with its public source.
Per-logical-core figures divide by the logical core count. Figures marked ``ASSUMPTION`` have no
public source; they are this project's choice and documented as such.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChipSpec:
    """Throughputs of one chip; per-core values derive from ``logical_cores``.

    Args:
        name: "trn2" or "trn3".
        logical_cores: logical NeuronCores per chip (trn2: 8 physical -> 4 logical by default).
        bf16_tflops: dense BF16 matrix throughput per chip (Tensor engine).
        fp8_tflops: dense FP8 matrix throughput per chip.
        fp32_matrix_ratio: FP32 matrix throughput as a fraction of BF16 (ASSUMPTION: 1/4).
        vector_gflops_per_core: elementwise throughput per logical core (ASSUMPTION, see table).
        hbm_gib / hbm_tbps: HBM capacity and bandwidth per chip.
        dma_engines_per_core / dma_gbps_per_engine: DMA engines per physical core, GB/s each.
        host_link_gbps: host <-> device copy bandwidth per chip (ASSUMPTION: PCIe Gen5 x16 ~ 64).
        host_staging_gbps: how fast the host copies pageable memory into the runtime's pinned
            staging buffer before a host -> device DMA, and out of it after a device -> host one
            (ASSUMPTION: 10 GB/s, one host thread's memcpy; host time, not scaled by the speed
            factor). Pinned host memory needs no staging: the DMA reads or writes it directly.
        launch_latency_ns: fixed per-launch device latency (ASSUMPTION: 15 µs, runtime dispatch).
        host_launch_ns: host time the framework's backend spends per eager op it launches, beyond
            the Python call, autograd and dispatcher (which run for real on the emulated device
            too): finding the op's compiled kernel and submitting it to the runtime (ASSUMPTION:
            10 µs; docs/chips.md gives the public figures it is set against). Host time, not
            scaled by the speed factor. The emulator's own dispatch beyond it is emulator
            overhead (host_cost.py).
        collective_gbps_per_core: ring link bandwidth per logical core for collectives
            (ASSUMPTION: 100 GB/s; AWS publishes NeuronLink per-chip totals, not a per-core ring
            figure).
        collective_step_latency_ns: latency per ring step (ASSUMPTION: 5 µs).
        kernel_fixed_ns: fixed device time of any kernel, however small (ASSUMPTION: 1 µs:
            instruction fetch, semaphore waits, engine start).
        dma_fixed_ns: fixed device time of any DMA transfer, however small (ASSUMPTION: 2 µs:
            descriptor setup and completion notification). It also keeps every device event at
            least a microsecond long, which tools that round times to whole µs (HTA) need.
        launch_queue_depth: operations launched and unfinished per core before the host blocks.
            Source: the runtime limits in-flight async execution requests to 63 per runtime
            (runtime 2.25.57, Neuron 2.23 release notes); applying it per core is an
            ASSUMPTION (one runtime per core, as one process per core in data-parallel runs).
    """

    name: str
    logical_cores: int
    physical_cores: int
    bf16_tflops: float
    fp8_tflops: float
    fp32_matrix_ratio: float
    vector_gflops_per_core: float
    hbm_gib: float
    hbm_tbps: float
    dma_engines_per_core: int
    dma_gbps_per_engine: float
    host_link_gbps: float
    launch_latency_ns: int
    collective_gbps_per_core: float = 100.0
    collective_step_latency_ns: int = 5_000
    kernel_fixed_ns: int = 1_000
    dma_fixed_ns: int = 2_000
    launch_queue_depth: int = 63
    host_staging_gbps: float = 10.0
    host_launch_ns: int = 10_000

    def matrix_flops_per_s(self, dtype: str) -> float:
        """Per-logical-core matrix throughput for a dtype name ("bfloat16", "float32", ...)."""
        per_core = self.bf16_tflops * 1e12 / self.logical_cores
        if dtype in ("bfloat16", "float16"):
            return per_core
        if dtype.startswith("float8"):
            return self.fp8_tflops * 1e12 / self.logical_cores
        return per_core * self.fp32_matrix_ratio

    def vector_flops_per_s(self) -> float:
        return self.vector_gflops_per_core * 1e9

    def hbm_bytes_per_s(self) -> float:
        return self.hbm_tbps * 1e12 / self.logical_cores

    def dma_bytes_per_s(self) -> float:
        physical_per_logical = self.physical_cores // self.logical_cores
        return self.dma_engines_per_core * physical_per_logical * self.dma_gbps_per_engine * 1e9

    def host_link_bytes_per_s(self) -> float:
        return self.host_link_gbps * 1e9 / self.logical_cores

    def host_staging_bytes_per_s(self) -> float:
        """One host thread's copy rate between pageable memory and the staging buffer (host
        work, so per process, not divided among cores)."""
        return self.host_staging_gbps * 1e9


CHIPS: dict[str, ChipSpec] = {
    # Trainium2: 8 NeuronCore-v3, 2 physical per logical by default; 667 BF16 / 1299 FP8 TFLOPS;
    # 96 GiB HBM at 2.9 TB/s; 16 DMA engines per core at ~27.2 GB/s (AWS Trn2 architecture page).
    # Vector engine 0.96 GHz: ASSUMPTION 128 lanes x 2 flops x 0.96 GHz x 2 physical ~ 492 GFLOPS.
    "trn2": ChipSpec(
        name="trn2",
        logical_cores=4,
        physical_cores=8,
        bf16_tflops=667.0,
        fp8_tflops=1299.0,
        fp32_matrix_ratio=0.25,
        vector_gflops_per_core=492.0,
        hbm_gib=96.0,
        hbm_tbps=2.9,
        dma_engines_per_core=16,
        dma_gbps_per_engine=27.2,
        host_link_gbps=64.0,
        launch_latency_ns=15_000,
    ),
    # Trainium3: 8 NeuronCore-v4 (one logical each); 671 BF16 / 2517 MXFP8 TFLOPS; 144 GiB at
    # 4.9 TB/s; ~38.4 GB/s per DMA engine (AWS Trn3 page). Vector 1.2 GHz: ASSUMPTION 128 x 2 x 1.2.
    "trn3": ChipSpec(
        name="trn3",
        logical_cores=8,
        physical_cores=8,
        bf16_tflops=671.0,
        fp8_tflops=2517.0,
        fp32_matrix_ratio=0.25,
        vector_gflops_per_core=307.2,
        hbm_gib=144.0,
        hbm_tbps=4.9,
        dma_engines_per_core=16,
        dma_gbps_per_engine=38.4,
        host_link_gbps=64.0,
        launch_latency_ns=15_000,
    ),
}


def chip(name: str) -> ChipSpec:
    try:
        return CHIPS[name]
    except KeyError:
        raise ValueError(f"unknown chip {name!r}; choose one of {', '.join(CHIPS)}") from None
