"""Chip profiles of the cost model: one table, each figure with its public source.

The emulated device times its ops on the Trainium rows (trn2, trn3); the projection
(``analysis.projection``) reads every row, the GPUs of the shared real traces included, to scale
measured device time from one chip to another. Per-chip figures are from the vendors' datasheets
and architecture pages; docs/chips.md lists every figure with its public source. Per-logical-core
figures divide by the logical core count (a GPU is one core; the mi250 row is one of an MI250's
two GCDs, each its own PyTorch device, with half the module's figures). Figures marked
``ASSUMPTION`` have no public source; they are this project's choice and documented as such.
"""

from __future__ import annotations

from dataclasses import dataclass

TF32 = "tfloat32"  # FP32 inputs on TF32 tensor cores (costmodel.ops.math_dtype says when)


@dataclass(frozen=True)
class ChipSpec:
    """Throughputs of one chip; per-core values derive from ``logical_cores``.

    Args:
        name: the table key ("trn2", "h100", ...).
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
            overhead (emulator/host_cost.py).
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
    tf32_tflops: float = 0.0  # TF32 tensor-core peak (0: none; FP32 matrix work at the FP32 rate)
    device_names: tuple[str, ...] = ()  # substrings of deviceProperties "name" that mean this chip
    host_fallback: bool = (
        False  # ops the chip lacks run on the host (the emulator's fallback table)
    )
    # a compiled region runs as one graph execution, launched once (Neuron's NEFF); GPUs launch
    # each of a compiled region's kernels (Inductor's generated code)
    graph_executions: bool = False

    def matrix_flops_per_s(self, dtype: str) -> float:
        """Per-logical-core matrix throughput for a dtype name ("bfloat16", "float32", ...)."""
        per_core = self.bf16_tflops * 1e12 / self.logical_cores
        if dtype in ("bfloat16", "float16"):
            return per_core
        if dtype.startswith("float8"):
            return self.fp8_tflops * 1e12 / self.logical_cores
        if dtype == TF32 and self.tf32_tflops:
            return self.tf32_tflops * 1e12 / self.logical_cores
        return per_core * self.fp32_matrix_ratio

    def vector_flops_per_s(self) -> float:
        return self.vector_gflops_per_core * 1e9

    def hbm_bytes_per_s(self) -> float:
        return self.hbm_tbps * 1e12 / self.logical_cores

    def hbm_bytes_per_core(self) -> int:
        """One logical core's share of the chip's HBM capacity."""
        return int(self.hbm_gib * 2**30 / self.logical_cores)

    def dma_bytes_per_s(self) -> float:
        physical_per_logical = self.physical_cores // self.logical_cores
        return self.dma_engines_per_core * physical_per_logical * self.dma_gbps_per_engine * 1e9

    def host_link_bytes_per_s(self) -> float:
        return self.host_link_gbps * 1e9 / self.logical_cores

    def host_staging_bytes_per_s(self) -> float:
        """One host thread's copy rate between pageable memory and the staging buffer (host
        work, so per process, not divided among cores)."""
        return self.host_staging_gbps * 1e9


def _gpu(
    name: str,
    device_names: tuple[str, ...],
    bf16_tflops: float,
    fp8_tflops: float,
    fp32_tflops: float,
    hbm_gib: float,
    hbm_tbps: float,
    link_gbps: float,
    pcie_gbps: float,
    *,
    tf32_tflops: float = 0.0,
    fp32_matrix_tflops: float | None = None,
) -> ChipSpec:
    """One GPU (one logical core): the figures that differ between GPUs; the rest as docs/chips.md
    says (ASSUMPTION rows)."""
    return ChipSpec(
        name=name,
        logical_cores=1,
        physical_cores=1,
        bf16_tflops=bf16_tflops,
        fp8_tflops=fp8_tflops,
        fp32_matrix_ratio=(fp32_matrix_tflops or fp32_tflops) / bf16_tflops,
        tf32_tflops=tf32_tflops,
        vector_gflops_per_core=fp32_tflops * 1000.0,
        hbm_gib=hbm_gib,
        hbm_tbps=hbm_tbps,
        dma_engines_per_core=1,
        dma_gbps_per_engine=hbm_tbps * 1000.0 / 2,
        host_link_gbps=pcie_gbps,
        launch_latency_ns=GPU_LAUNCH_LATENCY_NS,
        collective_gbps_per_core=link_gbps,
        collective_step_latency_ns=GPU_COLLECTIVE_STEP_LATENCY_NS,
        launch_queue_depth=GPU_LAUNCH_QUEUE_DEPTH,
        device_names=device_names,
    )


# ASSUMPTION (no datasheet figure): launch -> start of a kernel on an idle GPU stream, and the
# latency of one ring step of a collective over NVLink / Infinity Fabric.
GPU_LAUNCH_LATENCY_NS = 5_000
GPU_COLLECTIVE_STEP_LATENCY_NS = 5_000
# ASSUMPTION: pending kernel launches per GPU before a launch call blocks (CUDA documents no
# figure; 1024 is the commonly measured depth of its launch queue).
GPU_LAUNCH_QUEUE_DEPTH = 1024

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
        host_fallback=True,
        graph_executions=True,
        device_names=("trn2", "Trainium2"),
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
        host_fallback=True,
        graph_executions=True,
        device_names=("trn3", "Trainium3"),
    ),
    # Trainium1: 2 NeuronCore-v2 per chip (one logical each); 190 BF16 TFLOPS (no FP8 figure
    # used: FP8 at the BF16 rate); 32 GiB at 820 GB/s (AWS Trn1 page). Vector: ASSUMPTION as trn2.
    "trn1": ChipSpec(
        name="trn1",
        logical_cores=2,
        physical_cores=2,
        bf16_tflops=190.0,
        fp8_tflops=190.0,
        fp32_matrix_ratio=0.25,
        vector_gflops_per_core=246.0,
        hbm_gib=32.0,
        hbm_tbps=0.82,
        dma_engines_per_core=16,
        dma_gbps_per_engine=27.2,
        host_link_gbps=32.0,
        launch_latency_ns=15_000,
        host_fallback=True,
        graph_executions=True,
        device_names=("trn1", "Trainium1"),
    ),
    # GPUs (one logical core each): matrix = dense Tensor Core FP16/BF16 peak, vector = FP32
    # non-tensor peak, FP32 matrix products at the FP32 rate (PyTorch's default leaves TF32
    # matmul off), FP32 convolutions at the TF32 rate where the GPU has one (cuDNN's TF32 is on
    # by default: costmodel.ops.math_dtype);
    # HBM, NVLink per direction and PCIe per direction from NVIDIA's datasheets (docs/chips.md).
    # D2D copies at half the HBM rate (read + write: ASSUMPTION); launch latency, collective
    # step latency: ASSUMPTION (no datasheet figure; replay measures the trace's own).
    "v100": _gpu("v100", ("V100",), 125.0, 125.0, 15.7, 32.0, 0.9, 150.0, 16.0),
    "a100": _gpu(
        "a100", ("A100",), 312.0, 312.0, 19.5, 40.0, 1.555, 300.0, 32.0, tf32_tflops=156.0
    ),
    "a100-80gb": _gpu(
        "a100-80gb",
        ("A100-SXM4-80GB", "A100 80GB"),
        312.0,
        312.0,
        19.5,
        80.0,
        2.039,
        300.0,
        32.0,
        tf32_tflops=156.0,
    ),
    "h100": _gpu(
        "h100", ("H100",), 989.4, 1978.9, 66.9, 80.0, 3.35, 450.0, 64.0, tf32_tflops=494.7
    ),
    "h200": _gpu(
        "h200", ("H200",), 989.4, 1978.9, 66.9, 141.0, 4.8, 450.0, 64.0, tf32_tflops=494.7
    ),
    # MI250: one GCD per PyTorch device, half the module's 362.1 FP16/BF16, 45.3 FP32 vector and
    # 3.2 TB/s; Infinity Fabric 50 GB/s per link per direction, PCIe Gen4 x16 (AMD, ROCm docs).
    "mi250": _gpu(
        "mi250",
        ("MI250", "gfx90a"),
        181.05,
        181.05,
        22.65,
        64.0,
        1.6,
        50.0,
        32.0,
        fp32_matrix_tflops=45.25,
    ),
}

# The host that runs a fallback op (its own time is carried over where measured; this profile
# prices one the source ran on a device): ASSUMPTION, a round server figure (0.5 TFLOPS FP32 over
# all cores, 50 GB/s of DRAM bandwidth); docs/chips.md.
HOST_CPU = ChipSpec(
    name="host-cpu",
    logical_cores=1,
    physical_cores=1,
    bf16_tflops=0.5,
    fp8_tflops=0.5,
    fp32_matrix_ratio=1.0,
    vector_gflops_per_core=500.0,
    hbm_gib=0.0,
    hbm_tbps=0.05,
    dma_engines_per_core=1,
    dma_gbps_per_engine=25.0,
    host_link_gbps=25.0,
    launch_latency_ns=0,
    kernel_fixed_ns=0,
)


def chip_for_device(device_name: str) -> ChipSpec | None:
    """The profile whose ``device_names`` occur in a deviceProperties name (the longest match:
    "A100-SXM4-80GB" over "A100"); None when no profile matches."""
    hits = [
        (len(key), spec)
        for spec in CHIPS.values()
        for key in spec.device_names
        if key.lower() in device_name.lower()
    ]
    return max(hits, key=lambda h: h[0])[1] if hits else None


def chip(name: str) -> ChipSpec:
    try:
        return CHIPS[name]
    except KeyError:
        raise ValueError(f"unknown chip {name!r}; choose one of {', '.join(CHIPS)}") from None
