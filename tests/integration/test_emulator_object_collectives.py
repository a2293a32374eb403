"""Object collectives with the emulated device as the current device: the tensors inside the
objects arrive where a CUDA run puts them. torch pickles each object (``_object_to_tensor``) and
unpickles it on the receivers (``_tensor_to_object``): a device tensor is unpickled onto the
device it was saved from (a CUDA tensor onto ``cuda:N``), a host tensor onto the host. Before,
device tensors arrived as host tensors (the emulator pickled them as host copies)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ranks import run_ranks

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed")

pytestmark = [pytest.mark.torch, pytest.mark.slow]

WORKER = r'''
import json, sys
import torch, torch.distributed as dist
import neuron_profiler.emulator as emu

emu.enable(cores=1)
dist.init_process_group()
rank, world = dist.get_rank(), dist.get_world_size()


def make(r):
    """What rank r sends: a device tensor, a host tensor and a plain value."""
    return {"dev": torch.arange(3.0, device="neuron") + r, "host": torch.ones(2) * r, "r": r}


def describe(obj):
    return {k: [str(v.device), v.cpu().tolist()] if torch.is_tensor(v) else v
            for k, v in obj.items()}


out = {}
objs = [make(0) if rank == 0 else None]
dist.broadcast_object_list(objs, src=0)
out["broadcast"] = describe(objs[0])
gathered = [None] * world
dist.all_gather_object(gathered, make(rank))
out["all_gather"] = [describe(o) for o in gathered]
received = [None]
dist.scatter_object_list(received, [make(10 + r) for r in range(world)] if rank == 0 else None,
                         src=0)
out["scatter"] = describe(received[0])
# the arrived device tensors compute on the device with local ones
out["sum"] = (objs[0]["dev"] + torch.ones(3, device="neuron")).cpu().tolist()
json.dump(out, open(sys.argv[1], "w"))
dist.destroy_process_group()
'''


def _expected(r: int) -> dict:
    """``make(r)`` computed on the host: values, and the device a CUDA run gives each tensor."""
    return {
        "dev": ["neuron:0", [0.0 + r, 1.0 + r, 2.0 + r]],
        "host": ["cpu", [float(r)] * 2],
        "r": r,
    }


def test_object_collectives_deliver_device_tensors_on_the_device(tmp_path: Path) -> None:
    run_ranks(WORKER, lambda r: [str(tmp_path / f"rank{r}.json")], tmp_path, timeout=180)
    for rank in range(2):
        got = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert got["broadcast"] == _expected(0)
        assert got["all_gather"] == [_expected(0), _expected(1)]
        assert got["scatter"] == _expected(10 + rank)
        assert got["sum"] == [1.0, 2.0, 3.0]
