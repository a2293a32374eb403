"""Two processes train with DDP on the emulated device, as the example of docs/emulator.md
does: ``init_process_group()`` with no backend (gloo, from torch's default-backend table), a DDP
training loop, a host-memory collective and a barrier on the same group. Results equal a CPU
reference on the full batch, and both ranks emit collective (cc_running) events with the group's
ranks.

Then, in the same ranks, with the collective futures holding device tensors: the reducer's
gradient copies are device work (no host -> device copy per parameter), and a comm hook
(``fp16_compress_hook``) runs on the device and trains equal to the same hook on CPU.

Last, in the same ranks, DDP profiled with NEURON: collectives land on each core's collectives
thread with op, bytes, ranks and algorithm, linked to the launching op, and count as device time
in key_averages; HTA reads both ranks. (One launch of the ranks for every test here: a launch
costs ~5 s of start-up.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ranks import run_ranks

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from neuron_profiler.runtime_trace import format as F  # noqa: E402
from neuron_profiler.trace import vocabulary as V  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]
STEPS = 3  # per run of the reducer / comm hook checks

WORKER = r'''
import json, sys
import torch, torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
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


# the reducer's copies, comm hooks and collective futures (STEPS steps per run), on the same
# group: one launch of the ranks for every test here
STEPS = int(sys.argv[2])
device_out = {"futures": futures()}
for hook in (False, True):
    device_out[f"cpu{int(hook)}"] = run("cpu", hook, False)[0]
    device_out[f"dev{int(hook)}"], device_out[f"events{int(hook)}"] = run("neuron", hook, True)
json.dump(device_out, open(out + ".device.json", "w"))

# last, the same DDP training profiled with torch.profiler and NEURON
from neuron_profiler import NEURON
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
ddp = torch.nn.parallel.DistributedDataParallel(model.to("neuron"))
opt = torch.optim.AdamW(ddp.parameters(), lr=1e-2)
x, y = torch.randn(4, 8), torch.randn(4, 4)
with profile(activities=[ProfilerActivity.CPU, NEURON]) as prof:
    for _ in range(2):
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x.to("neuron")), y.to("neuron")).backward()
        opt.step()
    t = torch.ones(3, device="neuron")
    dist.all_reduce(t)
prof.export_chrome_trace(out + ".prof.json")
dev = {e.key: e.device_time_total for e in prof.key_averages()
       if e.device_type == DeviceType.CPU and e.device_time_total > 0}
json.dump(dev, open(out + ".prof.dev.json", "w"))
dist.destroy_process_group()
'''


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
    run_ranks(WORKER, lambda r: [str(tmp / f"rank{r}"), str(STEPS)], tmp, timeout=120)
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


@pytest.fixture(scope="module")
def device_runs(ranks: list[Path]) -> list[dict]:
    """Each rank's reducer / comm hook / futures results (the worker's second part)."""
    return [json.loads(Path(str(prefix) + ".device.json").read_text()) for prefix in ranks]


def _starts(events: list[dict], event_type: str) -> list[dict]:
    return [e for e in events if e["event_type"] == event_type and e["phase"] == F.START]


@pytest.mark.parametrize("hook", [0, 1])
def test_reducer_copies_are_device_work_not_host_copies(device_runs: list[dict], hook: int) -> None:
    for rank in device_runs:
        events = rank[f"events{hook}"]
        sizes = sorted(e["data"][F.EXT_KEY][F.X_BYTES] for e in _starts(events, F.DMEM_BUF_COPYIN))
        # per step: the rank's inputs (4x8 fp32) and targets (4x4 fp32); once: the reducer's
        # bucket-index sync on the first backward (5 + 1 int32). No copy per parameter.
        assert sizes == sorted([128, 64] * STEPS + [20, 4]), sizes
        assert len(_starts(events, F.CC_RUNNING)) >= STEPS


def test_comm_hook_runs_on_the_device_and_trains_equal_to_cpu(device_runs: list[dict]) -> None:
    for rank in device_runs:
        for hook in (0, 1):
            for dev, cpu in zip(rank[f"dev{hook}"], rank[f"cpu{hook}"], strict=True):
                torch.testing.assert_close(torch.tensor(dev), torch.tensor(cpu))
        kernels = [e["data"][F.EXT_KEY] for e in _starts(rank["events1"], F.NC_EXEC_RUNNING)]
        fp16 = [k for k in kernels if k[F.X_DTYPE] == "float16"]
        assert len(fp16) >= 2 * STEPS  # compress (to fp16, divide) on the device, per step
        plain = [e["data"][F.EXT_KEY] for e in _starts(rank["events0"], F.NC_EXEC_RUNNING)]
        assert not [k for k in plain if k[F.X_DTYPE] == "float16"]


def test_collective_futures_hold_the_callers_device_tensors(device_runs: list[dict]) -> None:
    """Nested (all_gather) and coalesced (all_reduce_coalesced) results, as on a real device."""
    for rank in device_runs:
        got = rank["futures"]
        assert got["gathered"] == [[True, "neuron", [1.0] * 3], [True, "neuron", [2.0] * 3]]
        assert got["reduced"] == [[True, "neuron", [3.0] * 2], [True, "neuron", [2.0] * 3]]


def test_collectives_on_both_ranks_with_args_and_device_time(ranks: list[Path]) -> None:
    for base in ranks:
        trace = json.loads(Path(str(base) + ".prof.json").read_text())
        ops = {
            e["args"]["External id"]: e["name"]
            for e in trace["traceEvents"]
            if e.get("cat") == "cpu_op"
        }
        cc = [
            e
            for e in trace["traceEvents"]
            if e.get("ph") == "X"
            and e.get("cat") == "kernel"
            and e["args"].get("neuron collective")
        ]
        assert cc, "no collectives in the trace"
        for e in cc:
            a = e["args"]
            assert e["tid"] == a["stream"] == V.queue_stream(e["pid"], 2)  # collectives queue
            assert a["Process Group Ranks"] == [0, 1] and a["Group size"] == 2
            assert a["Collective name"] and a["algorithm"] and a["bytes"] > 0
            assert e["args"]["External id"] in ops
        launchers = {ops[e["args"]["External id"]] for e in cc}
        device_time = json.loads(Path(str(base) + ".prof.dev.json").read_text())
        assert all(device_time.get(name, 0) > 0 for name in launchers)


def test_hta_reads_both_ranks_as_device_work(ranks: list[Path], tmp_path: Path) -> None:
    """HTA 0.5.0 on the 2-rank DDP profile: one rank per file, breakdowns that agree with our
    device rows (hta_checks.py); its collective views find no NCCL kernels (documented)."""
    pytest.importorskip("hta")
    from hta_checks import check_with_hta

    for base in ranks:
        (tmp_path / Path(str(base) + ".prof.json").name).write_bytes(
            Path(str(base) + ".prof.json").read_bytes()
        )
    said = check_with_hta(tmp_path)
    assert said["overlap"]["comp_comm_overlap_pctg"].isna().all()


OPTIONS_WORKER = r"""
import sys
import torch, torch.distributed as dist
import neuron_profiler.emulator as emu

emu.enable(cores=1)
dist.init_process_group()
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
used = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


class WithUnused(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.used, self.unused = used, torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.used(x)  # self.unused gets no gradient


model = WithUnused()
option = sys.argv[2]
ddp = torch.nn.parallel.DistributedDataParallel(
    model.to("neuron"), **{option: True}
)
opt = torch.optim.AdamW(ddp.parameters(), lr=1e-2)
g = torch.Generator().manual_seed(1)
x, y = torch.randn(8, 8, generator=g), torch.randn(8, 4, generator=g)
xs, ys = x.chunk(world)[rank], y.chunk(world)[rank]
for _ in range(3):
    opt.zero_grad()
    out = ddp(xs.to("neuron"))
    torch.nn.functional.mse_loss(out, ys.to("neuron")).backward()
    opt.step()
torch.save([p.detach().cpu() for p in used.parameters()], sys.argv[1])
dist.destroy_process_group()
"""


@pytest.mark.parametrize("option", ["find_unused_parameters", "static_graph"])
def test_ddp_options_that_stage_in_pinned_memory(option: str, tmp_path: Path) -> None:
    """find_unused_parameters and static_graph make DDP's C++ reducer stage its used-parameter
    map in pinned host memory, which it asks the PrivateUse1 hooks for (and then checks with
    is_pinned): the emulator's C++ hooks give it; training equals the CPU reference."""
    run_ranks(
        OPTIONS_WORKER, lambda r: [str(tmp_path / f"rank{r}.pt"), option], tmp_path, timeout=120
    )
    ref = _reference()
    for r in range(2):
        for p, q in zip(torch.load(tmp_path / f"rank{r}.pt"), ref, strict=True):
            torch.testing.assert_close(p, q)
