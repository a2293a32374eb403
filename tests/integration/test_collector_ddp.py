"""DDP over gloo on the emulated device, profiled with NEURON on both ranks: collectives land on
each core's collectives thread with op, bytes, ranks and algorithm, linked to the launching op,
and count as device time in key_averages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ranks import run_ranks

from neuron_profiler.trace import vocabulary as V

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed")

pytestmark = [pytest.mark.torch, pytest.mark.slow]

WORKER = r"""
import json, os, sys
import torch, torch.distributed as dist
import neuron_profiler.emulator as emu
emu.enable(cores=1)
from neuron_profiler import NEURON
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", rank=rank, world_size=world)
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
out = sys.argv[1]
prof.export_chrome_trace(out + ".json")
dev = {e.key: e.device_time_total for e in prof.key_averages()
       if e.device_type == DeviceType.CPU and e.device_time_total > 0}
json.dump(dev, open(out + ".dev.json", "w"))
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    tmp = tmp_path_factory.mktemp("ddp_prof")
    run_ranks(WORKER, lambda r: [str(tmp / f"rank{r}")], tmp)
    return [tmp / f"rank{r}" for r in range(2)]


def test_collectives_on_both_ranks_with_args_and_device_time(ranks: list[Path]) -> None:
    for base in ranks:
        trace = json.loads(Path(str(base) + ".json").read_text())
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
        device_time = json.loads(Path(str(base) + ".dev.json").read_text())
        assert all(device_time.get(name, 0) > 0 for name in launchers)


def test_hta_reads_both_ranks_as_device_work(ranks: list[Path], tmp_path: Path) -> None:
    """HTA 0.5.0 on the 2-rank DDP profile: one rank per file, breakdowns that agree with our
    device rows (hta_checks.py); its collective views find no NCCL kernels (documented)."""
    pytest.importorskip("hta")
    from hta_checks import check_with_hta

    for base in ranks:
        (tmp_path / Path(str(base) + ".json").name).write_bytes(
            Path(str(base) + ".json").read_bytes()
        )
    said = check_with_hta(tmp_path)
    assert said["overlap"]["comp_comm_overlap_pctg"].isna().all()
