"""FSDP2 (``fully_shard``) and FSDP1 train on the emulated device over gloo as the same script
does with FSDP on CPU: each rank process runs every scenario twice, on a "cpu" and on a "neuron"
device mesh of the same gloo group, and the test compares losses and unsharded parameters.

Scenarios (fsdp_workloads.py): a TorchTitan-shaped Llama block stack (per-block ``fully_shard``,
activation checkpointing, AdamW, ``clip_grad_norm_`` over DTensor gradients) with
``reshard_after_forward`` True and False, and with a bf16-params / fp32-reduce mixed precision
policy (SGD there: fsdp_workloads.train); an MLP sharded from a CPU module (FSDP moves it: ``param.data = param.to(device)``);
a DCP checkpoint round trip with ``get_model_state_dict`` / ``set_model_state_dict``; FSDP1 with
``device_id``. Two ranks, and four ranks for the MLP: one launch of four rank processes, the
two-rank scenarios on a mesh of ranks 0 and 1 (their own process group)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ranks import run_ranks

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed")

pytestmark = [pytest.mark.torch, pytest.mark.slow]
TESTS_DIR = Path(__file__).resolve().parents[1]
STEPS = 3

WORKER = r"""
import os, sys
sys.path.insert(0, sys.argv[2])
import torch, torch.distributed as dist
import neuron_profiler.emulator as emu
import fsdp_workloads as W

torch.set_num_threads(1)  # the ranks share this machine's cores
emu.enable(cores=1)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecisionPolicy, fully_shard
from torch.nn.attention import SDPBackend, sdpa_kernel

global_rank, global_world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", rank=global_rank, world_size=global_world)
steps = int(sys.argv[3])
cfg = W.LlamaConfig()
MIXED = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


def on(device, model):
    return model.to("neuron") if device == "neuron" else model


def shard_mlp(model, mesh):
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def llama(device, mesh, adam=True, **kw):
    model = W.shard_llama(on(device, W.make_llama(cfg)), mesh, **kw)
    losses = train(model, W.llama_batches(cfg, steps, 4), device, mesh, adam=adam)
    return losses, W.full_params(model)


def train(model, batches, device, mesh, **kw):  # over the mesh's ranks, as their group
    group = mesh.get_group()
    return W.train(model, batches, device, mesh.get_local_rank(), mesh.size(), group=group, **kw)


def run(scenario, device, mesh, tmp):
    if scenario == "reshard":
        return llama(device, mesh, reshard_after_forward=True)
    if scenario == "no_reshard":
        return llama(device, mesh, reshard_after_forward=False)
    if scenario == "mixed":
        return llama(device, mesh, mp_policy=MIXED, adam=False)  # bf16: see W.train()
    if scenario == "mlp_from_cpu":  # FSDP moves the CPU module's parameters to the mesh's device
        model = shard_mlp(W.make_mlp(), mesh)
        losses = train(model, W.mlp_batches(steps, 8), device, mesh)
        return losses, W.full_params(model)
    if scenario == "checkpoint":
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import (
            get_model_state_dict, set_model_state_dict)

        group = mesh.get_group()
        model = shard_mlp(on(device, W.make_mlp()), mesh)
        train(model, W.mlp_batches(steps, 8), device, mesh)
        saved = W.full_params(model)
        path = os.path.join(tmp, device)
        dcp.save(get_model_state_dict(model), checkpoint_id=path, process_group=group)
        fresh = shard_mlp(on(device, W.make_mlp(seed=7)), mesh)
        state = get_model_state_dict(fresh)
        dcp.load(state, checkpoint_id=path, process_group=group)
        set_model_state_dict(fresh, state)
        loaded = W.full_params(fresh)
        assert all(torch.equal(saved[k], loaded[k]) for k in saved), "DCP round trip"
        losses = train(fresh, W.mlp_batches(1, 8, seed=3), device, mesh)
        return losses, {**loaded, **{"after." + k: v for k, v in W.full_params(fresh).items()}}
    if scenario == "fsdp1":
        target = torch.device("neuron", 0) if device == "neuron" else torch.device("cpu")
        model = FullyShardedDataParallel(
            W.make_mlp(), device_id=target, use_orig_params=True, process_group=mesh.get_group()
        )
        losses = train(model, W.mlp_batches(steps, 8), device, mesh)
        with FullyShardedDataParallel.summon_full_params(model):
            params = {k: v.detach().cpu().clone() for k, v in model.named_parameters()}
        return losses, params
    raise ValueError(scenario)


# One launch of four ranks for both worlds (a launch costs each rank a torch start-up): the
# four-rank scenarios on a mesh of all four, then the two-rank ones on ranks 0 and 1 only, as a
# mesh of their own (the "shard" dimension of a 2 x 2 mesh: every rank makes the meshes, ranks 2
# and 3 are done once the four-rank scenarios are).
meshes = {}
for device in ("cpu", "neuron"):
    pairs = init_device_mesh(device, (global_world // 2, 2), mesh_dim_names=("pair", "shard"))
    meshes[device] = {global_world: init_device_mesh(device, (global_world,)), 2: pairs["shard"]}
results = {}
for world, scenarios in ((global_world, sys.argv[6]), (2, sys.argv[4])):
    if world == 2 and global_rank >= 2:
        break
    for device in ("cpu", "neuron"):
        for scenario in filter(None, scenarios.split(",")):
            with sdpa_kernel(SDPBackend.MATH):  # the emulator's attention path, on CPU too
                got = run(scenario, device, meshes[device][world], sys.argv[5])
            results[(scenario, device, world)] = got
torch.save(results, sys.argv[1])
dist.barrier()  # ranks 2 and 3 stay until 0 and 1 are done: an exit resets their connections
dist.destroy_process_group()
"""
TWO_RANKS = ["reshard", "no_reshard", "mixed", "mlp_from_cpu", "checkpoint", "fsdp1"]
FOUR_RANKS = ["mlp_from_cpu", "fsdp1"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """Every rank's results, by (scenario, device, world size), from one launch of four."""
    tmp = tmp_path_factory.mktemp("fsdp")
    run_ranks(
        WORKER,
        lambda r: [
            str(tmp / f"rank{r}.pt"),
            str(TESTS_DIR),
            str(STEPS),
            ",".join(TWO_RANKS),
            str(tmp / "ckpt"),
            ",".join(FOUR_RANKS),
        ],
        tmp,
        world=4,
        timeout=300,
    )
    return [torch.load(tmp / f"rank{r}.pt") for r in range(4)]


def _of(ranks: list[dict], world: int) -> list[dict]:
    """Each rank of that world's results, by (scenario, device)."""
    return [{k[:2]: v for k, v in r.items() if k[2] == world} for r in ranks[:world]]


@pytest.fixture(scope="module")
def two_ranks(runs: list[dict]) -> list[dict]:
    return _of(runs, 2)


# float32 scenarios run the same CPU kernels on both devices: equal to float32 rounding (seen:
# 7e-7). The mixed-precision one computes in bf16 and trains with SGD (train()): within one bf16
# rounding step, 2**-8 relative (seen: 5e-5 on parameters, 1e-4 on a loss of 4.3).
TOLERANCE = {"mixed": {"rtol": 2**-8, "atol": 1e-3}}
FP32 = {"rtol": 1e-5, "atol": 1e-5}


@pytest.mark.parametrize("scenario", TWO_RANKS)
def test_two_ranks_train_as_fsdp_on_cpu(two_ranks: list[dict], scenario: str) -> None:
    tol = TOLERANCE.get(scenario, FP32)
    for results in two_ranks:
        cpu_losses, cpu_params = results[(scenario, "cpu")]
        dev_losses, dev_params = results[(scenario, "neuron")]
        assert len(dev_losses) == (1 if scenario == "checkpoint" else STEPS)
        torch.testing.assert_close(torch.tensor(dev_losses), torch.tensor(cpu_losses), **tol)
        assert dev_params.keys() == cpu_params.keys() and cpu_params
        for name, p in cpu_params.items():
            torch.testing.assert_close(dev_params[name], p, **tol, msg=name)
    # both ranks hold the same unsharded parameters (a real all-gather, not local copies)
    for name, p in two_ranks[0][(scenario, "neuron")][1].items():
        assert torch.equal(p, two_ranks[1][(scenario, "neuron")][1][name])


def test_training_moved_the_parameters(two_ranks: list[dict]) -> None:
    """The comparisons above compare trained models: the steps changed every parameter."""
    initial = _initial_llama()
    _, params = two_ranks[0][("reshard", "neuron")]
    moved = [name for name, p in params.items() if not torch.equal(p, initial[name])]
    assert sorted(moved) == sorted(initial)


def _initial_llama() -> dict[str, torch.Tensor]:
    import sys

    sys.path.insert(0, str(TESTS_DIR))
    import fsdp_workloads as W

    model = W.make_llama(W.LlamaConfig())
    return {k: v.detach() for k, v in model.state_dict().items()}


def test_four_ranks_mlp_fsdp2_and_fsdp1(runs: list[dict]) -> None:
    ranks = _of(runs, 4)
    assert len(ranks) == 4
    for scenario in FOUR_RANKS:
        for results in ranks:
            cpu_losses, cpu_params = results[(scenario, "cpu")]
            dev_losses, dev_params = results[(scenario, "neuron")]
            torch.testing.assert_close(torch.tensor(dev_losses), torch.tensor(cpu_losses), **FP32)
            assert dev_params.keys() == cpu_params.keys() and cpu_params
            for name, p in cpu_params.items():
                torch.testing.assert_close(dev_params[name], p, **FP32, msg=f"{scenario} {name}")
        for name, p in ranks[0][(scenario, "neuron")][1].items():  # one model on every rank
            assert all(torch.equal(p, r[(scenario, "neuron")][1][name]) for r in ranks[1:])
