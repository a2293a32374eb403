"""Roofline durations against hand-computed figures from the published chip numbers; queue order."""

from __future__ import annotations

import pytest

from neuron_profiler.costmodel.chips import CHIPS, chip
from neuron_profiler.emulator.timing import QueueClock, RooflineModel


def test_bf16_matmul_is_compute_bound_at_published_peak() -> None:
    trn2 = RooflineModel(chip("trn2"))
    m = n = k = 4096
    flops = 2 * m * n * k
    nbytes = 2 * (m * k + k * n + m * n)
    fixed_s = chip("trn2").kernel_fixed_ns * 1e-9  # the model's documented per-kernel constant
    expected_s = flops / (667e12 / 4) + fixed_s  # 667 TFLOPS BF16 per chip, 4 logical cores
    assert flops / (667e12 / 4) > nbytes / (2.9e12 / 4)  # really compute bound
    assert trn2.kernel_ns(
        flops=flops, bytes_moved=nbytes, dtype="bfloat16", matrix=True
    ) == pytest.approx(expected_s * 1e9, rel=1e-6)


def test_elementwise_is_bandwidth_bound_and_fp32_matrix_slower() -> None:
    trn2 = RooflineModel(chip("trn2"))
    numel = 1 << 24
    add_ns = trn2.kernel_ns(flops=numel, bytes_moved=12 * numel, dtype="float32", matrix=False)
    fixed_ns = chip("trn2").kernel_fixed_ns
    assert add_ns == pytest.approx(12 * numel / (2.9e12 / 4) * 1e9 + fixed_ns, rel=1e-6)
    args = dict(flops=2 * 2048**3, bytes_moved=0, matrix=True)
    assert trn2.kernel_ns(dtype="float32", **args) > trn2.kernel_ns(dtype="bfloat16", **args)


def test_speed_factor_scales_and_trn3_differs() -> None:
    base = RooflineModel(chip("trn2")).host_copy_ns(1 << 30)
    assert RooflineModel(chip("trn2"), speed_factor=0.1).host_copy_ns(1 << 30) == pytest.approx(
        base * 10, rel=1e-6
    )
    assert set(CHIPS) >= {"trn2", "trn3"}
    assert RooflineModel(chip("trn3")).device_copy_ns(1 << 30) != RooflineModel(
        chip("trn2")
    ).device_copy_ns(1 << 30)
    with pytest.raises(ValueError, match="speed_factor"):
        RooflineModel(chip("trn2"), speed_factor=0)
    with pytest.raises(ValueError, match="unknown chip"):
        chip("trn9")


def test_queue_is_asynchronous_and_in_order() -> None:
    clock = QueueClock()
    s1, e1 = clock.schedule(launch_ns=1000, duration_ns=500, latency_ns=10)
    s2, e2 = clock.schedule(launch_ns=1100, duration_ns=100, latency_ns=10)  # queued behind op 1
    s3, _ = clock.schedule(launch_ns=5000, duration_ns=1, latency_ns=10)  # idle queue
    assert (s1, e1) == (1010, 1510) and (s2, e2) == (1510, 1610) and s3 == 5010


def test_ring_collective_follows_the_ring_formula() -> None:
    spec = chip("trn2")
    model = RooflineModel(spec)
    nbytes, n = 64 << 20, 4
    link = spec.collective_gbps_per_core * 1e9
    step = spec.collective_step_latency_ns * 1e-9
    allreduce_s = 2 * (n - 1) * step + 2 * (n - 1) / n * nbytes / link
    allgather_s = (n - 1) * step + (n - 1) / n * nbytes / link
    assert model.collective_ns(nbytes=nbytes, world=n, collective="allreduce") == pytest.approx(
        allreduce_s * 1e9, abs=1
    )  # ns, rounded up
    assert model.collective_ns(nbytes=nbytes, world=n, collective="allgather") == pytest.approx(
        allgather_s * 1e9, abs=1
    )
    assert (
        model.collective_ns(nbytes=nbytes, world=1, collective="allreduce")
        == spec.collective_step_latency_ns
    )


def test_host_staging_is_host_time_at_the_staging_bandwidth() -> None:
    """Pageable host memory goes through the runtime's staging buffer at 10 GB/s (docs/chips.md,
    an assumption): 8 MiB take 838,861 ns, whatever the speed factor (host work, not device)."""
    nbytes = 8 << 20  # 8,388,608 bytes / 10e9 B/s = 838,860.8 ns
    assert RooflineModel(chip("trn2")).host_staging_ns(nbytes) == 838_861
    assert RooflineModel(chip("trn3"), speed_factor=4.0).host_staging_ns(nbytes) == 838_861
