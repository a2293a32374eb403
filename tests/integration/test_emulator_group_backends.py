"""Process groups serve both the host and the emulated device from the start, as torch's
defaults do for CUDA ("cpu:gloo,cuda:nccl"): CPU collectives on a ``new_group`` made with the
default backend (which torch registers for "neuron" only), and device point-to-point batches
(``batch_isend_irecv``, which looks the device's backend up) on a group made with
``backend="gloo"`` (registered for "cpu" only). Both failed with "No backend type associated
with device type ..." until a device collective had run on the group."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ranks import run_ranks

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed")

pytestmark = [pytest.mark.torch, pytest.mark.slow]

WORKER = r"""
import json, sys
import torch, torch.distributed as dist
import neuron_profiler.emulator as emu

emu.enable(cores=1)
backend = None if sys.argv[2] == "default" else sys.argv[2]
dist.init_process_group(backend)
rank, world = dist.get_rank(), dist.get_world_size()
out = {}
group = dist.new_group(list(range(world)))
host = torch.ones(2) * (rank + 1)
dist.all_reduce(host, group=group)  # the group's first collective: on host memory
out["host_on_new_group"] = host.tolist()
dev = torch.full((3,), float(rank), device="neuron")
got = torch.zeros(3, device="neuron")
peer = (rank + 1) % world
ops = [dist.P2POp(dist.isend, dev, peer), dist.P2POp(dist.irecv, got, (rank - 1) % world)]
for w in dist.batch_isend_irecv(ops):
    w.wait()
out["p2p"] = [str(got.device), got.cpu().tolist()]
dist.destroy_process_group()
json.dump(out, open(sys.argv[1], "w"))
"""


@pytest.mark.parametrize("backend", ["default", "gloo"])
def test_host_and_device_collectives_on_any_group_from_the_start(
    tmp_path: Path, backend: str
) -> None:
    run_ranks(WORKER, lambda r: [str(tmp_path / f"rank{r}.json"), backend], tmp_path)
    for r in range(2):
        out = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert out["host_on_new_group"] == [3.0, 3.0]  # 1 + 2
        assert out["p2p"] == ["neuron:0", [float(1 - r)] * 3]  # the other rank's values
