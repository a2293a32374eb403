"""Which backend the emulated device's process groups use: torch's default-backend table maps
"neuron" to gloo, so ``init_process_group()`` needs no backend; NCCL is refused in one line.
One-process groups (a HashStore), so these run inside pytest; two ranks are in
tests/integration/test_emulator_ddp.py."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import neuron_profiler.emulator as emu  # noqa: E402
from neuron_profiler.emulator import process_groups as PG  # noqa: E402
from neuron_profiler.errors import EmulatorError  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.fixture(autouse=True)
def _device():
    emu.enable(cores=1)
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def test_the_device_default_backend_is_gloo() -> None:
    assert dist.get_default_backend_for_device("neuron") == "gloo"
    assert dist.Backend.default_device_backend_map["neuron"] == dist.Backend.GLOO


def test_init_without_backend_runs_device_and_host_collectives() -> None:
    dist.init_process_group(rank=0, world_size=1, store=dist.HashStore())
    host = torch.arange(4.0)
    dist.all_reduce(host)  # right after init: the group serves the host memory too
    assert torch.equal(host, torch.arange(4.0))
    dev = torch.full((3,), 2.0, device="neuron")
    dist.all_reduce(dev)
    assert torch.equal(dev.cpu(), torch.full((3,), 2.0))
    sub = dist.new_group([0])  # a group made later, with the default backend too
    dist.all_reduce(dev, group=sub)
    dist.barrier()
    assert torch.equal(dev.cpu(), torch.full((3,), 2.0))


@pytest.mark.parametrize("backend", ["nccl", "NCCL", "cuda:nccl", "neuron:nccl,cpu:gloo"])
def test_nccl_is_refused_in_one_line(backend: str) -> None:
    with pytest.raises(EmulatorError) as err:
        dist.init_process_group(backend, rank=0, world_size=1, store=dist.HashStore())
    message = str(err.value)
    assert message == PG.NCCL_REFUSED and "\n" not in message
    assert "gloo" in message
    assert not dist.is_initialized()


def test_nccl_for_cuda_next_to_gloo_for_the_host_is_left_to_torch() -> None:
    """``cpu:gloo,cuda:nccl`` gives the host memory gloo, so the device's collectives work;
    whether NCCL exists is torch's business (this build has none: torch's own error)."""
    assert not PG._names_nccl_for_neuron("cpu:gloo,cuda:nccl")
    assert not PG._names_nccl_for_neuron("gloo")
