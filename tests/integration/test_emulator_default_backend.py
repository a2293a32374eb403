"""Two ranks run the DDP example of docs/emulator.md as written: ``init_process_group()`` with no
backend on the emulated device (gloo, from torch's default-backend table), a DDP training loop,
a host-memory collective and a barrier. Results equal a CPU reference on the full batch."""

from __future__ import annotations

from pathlib import Path

import pytest
from ranks import run_ranks

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

pytestmark = [pytest.mark.torch, pytest.mark.slow]

WORKER = r"""
import sys
import torch, torch.distributed as dist
import neuron_profiler.emulator as emu

emu.enable(cores=1)
dist.init_process_group()  # no backend: gloo (RANK, WORLD_SIZE, MASTER_* from the environment)
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
ddp = torch.nn.parallel.DistributedDataParallel(model.to("neuron"))
opt = torch.optim.AdamW(ddp.parameters(), lr=1e-2)
g = torch.Generator().manual_seed(1)
x, y = torch.randn(8, 8, generator=g), torch.randn(8, 4, generator=g)
xs, ys = x.chunk(world)[rank], y.chunk(world)[rank]
for _ in range(3):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(ddp(xs.to("neuron")), ys.to("neuron"))
    loss.backward()
    opt.step()
host = torch.full((2,), float(rank + 1))
dist.all_reduce(host)  # a host-memory collective on the same group
dist.barrier()
torch.save({"params": [p.detach().cpu() for p in model.parameters()], "host": host,
            "default": dist.get_default_backend_for_device("neuron")}, sys.argv[1])
dist.destroy_process_group()
"""


def _reference() -> list:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 8, generator=g), torch.randn(8, 4, generator=g)
    for _ in range(3):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach() for p in model.parameters()]


def test_ddp_with_the_default_backend_equals_full_batch_cpu_reference(tmp_path: Path) -> None:
    run_ranks(WORKER, lambda r: [str(tmp_path / f"rank{r}.pt")], tmp_path, timeout=300)
    ref = _reference()
    for r in range(2):
        saved = torch.load(str(tmp_path / f"rank{r}.pt"))
        assert saved["default"] == "gloo"
        assert torch.equal(saved["host"], torch.full((2,), 3.0))  # 1 + 2
        for p, q in zip(saved["params"], ref, strict=True):
            torch.testing.assert_close(p, q)
