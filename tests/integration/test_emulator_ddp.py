"""Two processes train with DDP on the emulated device, as the example of docs/emulator.md
does: ``init_process_group()`` with no backend (gloo, from torch's default-backend table), a DDP
training loop, a host-memory collective and a barrier on the same group. Results equal a CPU
reference on the full batch, and both ranks emit collective (cc_running) events with the group's
ranks. (One run of the ranks for all three tests: a run costs ~5 s of start-up.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ranks import run_ranks

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from neuron_profiler.runtime_trace import format as F  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]

WORKER = r"""
import sys
import torch, torch.distributed as dist
import neuron_profiler.emulator as emu
from neuron_profiler.emulator.runtime import get_runtime

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
rt = get_runtime()
rt.sys_trace_start()
for _ in range(3):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(ddp(xs.to("neuron")), ys.to("neuron"))
    loss.backward()
    opt.step()
t = torch.full((3,), float(rank + 1), device="neuron")
dist.all_reduce(t)  # synchronous API: the host waits for the collective
rt.sys_trace_stop()
host = torch.full((2,), float(rank + 1))
dist.all_reduce(host)  # a host-memory collective on the same group
dist.barrier()
out = sys.argv[1]
open(out + ".events.json", "wb").write(rt.sys_trace_fetch())
torch.save({"params": [p.detach().cpu() for p in model.parameters()], "sum": t.cpu(),
            "host": host, "default": dist.get_default_backend_for_device("neuron")},
           out + ".pt")
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


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[Path]:
    tmp = tmp_path_factory.mktemp("ddp")
    run_ranks(WORKER, lambda r: [str(tmp / f"rank{r}")], tmp, timeout=120)
    return [tmp / f"rank{r}" for r in range(2)]


def test_ddp_results_equal_full_batch_cpu_reference(ranks: list[Path]) -> None:
    ref = _reference()
    for prefix in ranks:
        saved = torch.load(str(prefix) + ".pt")
        assert torch.equal(saved["sum"], torch.full((3,), 3.0))
        for p, q in zip(saved["params"], ref, strict=True):
            torch.testing.assert_close(p, q)


def test_the_default_backend_is_gloo_and_host_collectives_work(ranks: list[Path]) -> None:
    for prefix in ranks:
        saved = torch.load(str(prefix) + ".pt")
        assert saved["default"] == "gloo"
        assert torch.equal(saved["host"], torch.full((2,), 3.0))  # 1 + 2


def test_both_ranks_emit_collective_events(ranks: list[Path]) -> None:
    param_bytes = sum(p.numel() * 4 for p in _reference())
    for prefix in ranks:
        events = json.loads(Path(str(prefix) + ".events.json").read_bytes())["events"]
        starts = [e for e in events if e["event_type"] == F.CC_RUNNING and e["phase"] == F.START]
        stops = [e for e in events if e["event_type"] == F.CC_RUNNING and e["phase"] == F.STOP]
        assert len(starts) == len(stops) >= 4
        ext = [e["data"][F.EXT_KEY] for e in starts]
        assert all(x[F.X_RANKS] == [0, 1] and x[F.X_QUEUE] == F.QUEUE_COLLECTIVE for x in ext)
        allreduce = [x for x in ext if x[F.X_COLLECTIVE_OP] == "allreduce"]
        assert [x[F.X_BYTES] for x in allreduce] == [param_bytes] * 3 + [12]  # 3 buckets + t
        assert all(x[F.X_ALGORITHM] == "ring" and x[F.X_MODELLED] for x in ext)
        waits = [
            e
            for e in events
            if e["event_type"] == F.EXT_HOST_SYNC
            and e["phase"] == F.START
            and e["data"][F.EXT_KEY][F.X_SYNC_REASON] == "collective_wait"
        ]
        assert waits == []  # Work.wait(): the stream waits on the device, the host does not
