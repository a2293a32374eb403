"""DDP on the emulated device with the collective futures holding device tensors: the reducer's
gradient copies are device work (no host -> device copy per parameter), and a comm hook
(``fp16_compress_hook``) runs on the device and trains equal to the same hook on CPU."""

from __future__ import annotations

import json

import pytest
from ranks import run_ranks

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed")

from neuron_profiler.runtime_trace import format as F  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]
STEPS = 3

WORKER = r'''
import json, os, sys
import torch, torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
import neuron_profiler.emulator as emu
from neuron_profiler.emulator.runtime import get_runtime

emu.enable(cores=1)
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", rank=rank, world_size=world)
rt = get_runtime()
STEPS = int(sys.argv[2])


def run(device, hook, capture):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    ddp = torch.nn.parallel.DistributedDataParallel(model.to(device))
    if hook:
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 8, generator=g), torch.randn(8, 4, generator=g)
    xs, ys = x.chunk(world)[rank], y.chunk(world)[rank]
    if capture:
        rt.sys_trace_start()
    for _ in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(xs.to(device)), ys.to(device))
        loss.backward()
        opt.step()
    params = [p.detach().cpu().tolist() for p in model.parameters()]
    events = None
    if capture:
        rt.sys_trace_stop()
        events = json.loads(rt.sys_trace_fetch())["events"]
    return params, events


def flat(value):
    return ([x for item in value for x in flat(item)] if isinstance(value, (list, tuple))
            else [value])


def futures():
    """Collective futures hold the caller's own device tensors: a list-of-lists result
    (all_gather) and a coalesced one (all_reduce_coalesced, which returns only a Work)."""
    mine = torch.full((3,), float(rank + 1)).to("neuron")
    outs = [torch.zeros(3).to("neuron") for _ in range(world)]
    gathered = flat(dist.all_gather(outs, mine, async_op=True).get_future().wait())
    ts = [torch.ones(2).to("neuron") * (rank + 1), torch.ones(3).to("neuron")]
    work = dist.all_reduce_coalesced(ts, async_op=True)
    reduced = flat((work.get_future() if hasattr(work, "get_future") else work).wait())
    return {"gathered": [[any(v is o for o in outs), v.device.type, v.cpu().tolist()]
                         for v in gathered],
            "reduced": [[any(v is t for t in ts), v.device.type, v.cpu().tolist()]
                        for v in reduced]}


out = {"futures": futures()}
for hook in (False, True):
    out[f"cpu{int(hook)}"] = run("cpu", hook, False)[0]
    out[f"dev{int(hook)}"], out[f"events{int(hook)}"] = run("neuron", hook, True)
json.dump(out, open(sys.argv[1], "w"))
dist.destroy_process_group()
'''


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    tmp = tmp_path_factory.mktemp("ddp_device")
    run_ranks(WORKER, lambda r: [str(tmp / f"rank{r}.json"), str(STEPS)], tmp)
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(2)]


def _starts(events: list[dict], event_type: str) -> list[dict]:
    return [e for e in events if e["event_type"] == event_type and e["phase"] == F.START]


@pytest.mark.parametrize("hook", [0, 1])
def test_reducer_copies_are_device_work_not_host_copies(ranks: list[dict], hook: int) -> None:
    for rank in ranks:
        events = rank[f"events{hook}"]
        sizes = sorted(e["data"][F.EXT_KEY][F.X_BYTES] for e in _starts(events, F.DMEM_BUF_COPYIN))
        # per step: the rank's inputs (4x8 fp32) and targets (4x4 fp32); once: the reducer's
        # bucket-index sync on the first backward (5 + 1 int32). No copy per parameter.
        assert sizes == sorted([128, 64] * STEPS + [20, 4]), sizes
        assert len(_starts(events, F.CC_RUNNING)) >= STEPS


def test_comm_hook_runs_on_the_device_and_trains_equal_to_cpu(ranks: list[dict]) -> None:
    for rank in ranks:
        for hook in (0, 1):
            for dev, cpu in zip(rank[f"dev{hook}"], rank[f"cpu{hook}"], strict=True):
                torch.testing.assert_close(torch.tensor(dev), torch.tensor(cpu))
        kernels = [e["data"][F.EXT_KEY] for e in _starts(rank["events1"], F.NC_EXEC_RUNNING)]
        fp16 = [k for k in kernels if k[F.X_DTYPE] == "float16"]
        assert len(fp16) >= 2 * STEPS  # compress (to fp16, divide) on the device, per step
        plain = [e["data"][F.EXT_KEY] for e in _starts(rank["events0"], F.NC_EXEC_RUNNING)]
        assert not [k for k in plain if k[F.X_DTYPE] == "float16"]


def test_collective_futures_hold_the_callers_device_tensors(ranks: list[dict]) -> None:
    """Nested (all_gather) and coalesced (all_reduce_coalesced) results, as on a real device."""
    for rank in ranks:
        got = rank["futures"]
        assert got["gathered"] == [[True, "neuron", [1.0] * 3], [True, "neuron", [2.0] * 3]]
        assert got["reduced"] == [[True, "neuron", [3.0] * 2], [True, "neuron", [2.0] * 3]]
