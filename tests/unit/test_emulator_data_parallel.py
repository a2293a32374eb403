"""``nn.DataParallel`` on the emulated cores behaves as on CUDA devices: the batch is split
across ``device_ids``, each core runs a replica, outputs come back on ``output_device`` and
gradients on ``device_ids[0]``; results and a training step equal the module on CPU (full
batch). Before, the first forward failed (``torch._C`` has no ``_scatter`` in a CPU build)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

import neuron_profiler.emulator as emu  # noqa: E402
from neuron_profiler.emulator.runtime import get_runtime  # noqa: E402
from neuron_profiler.runtime_trace import format as F  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.fixture(autouse=True)
def _device():
    emu.enable(cores=2)
    yield
    emu.enable(cores=2)


def _models() -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    ref = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    ref.load_state_dict(model.state_dict())
    return model, ref


@pytest.mark.parametrize("device_ids", [None, [0], [1, 0]], ids=["all", "one", "reversed"])
def test_data_parallel_trains_equal_to_cpu(device_ids: list[int] | None) -> None:
    model, ref = _models()
    first = device_ids[0] if device_ids else 0
    dp = torch.nn.DataParallel(model.to(torch.device("neuron", first)), device_ids=device_ids)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    for _ in range(2):
        x = torch.randn(7, 4, generator=g)  # odd: the chunks differ in size
        out = dp(x)
        expected = ref(x)
        assert out.device == torch.device("neuron", first)
        torch.testing.assert_close(out.cpu(), expected)
        out.square().mean().backward()
        expected.square().mean().backward()
        for p, q in zip(model.parameters(), ref.parameters(), strict=True):
            assert p.grad.device == torch.device("neuron", first)
            torch.testing.assert_close(p.grad.cpu(), q.grad)
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.detach().cpu(), q.detach())


def test_each_core_runs_a_replica_on_its_part_of_the_batch() -> None:
    """Both cores run the forward's matmuls; keyword and dict inputs are scattered too."""

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 3)

        def forward(self, x: torch.Tensor, extra: dict) -> dict:
            return {"y": self.lin(x) + extra["b"], "n": torch.tensor([x.shape[0]], device=x.device)}

    torch.manual_seed(2)
    net = Net()
    ref = Net()
    ref.load_state_dict(net.state_dict())
    dp = torch.nn.DataParallel(net.to("neuron"))
    x, b = torch.randn(6, 4), torch.randn(6, 3)
    rt = get_runtime()
    rt.sys_trace_start()
    try:
        out = dp(x, extra={"b": b})
    finally:
        rt.sys_trace_stop()
    torch.testing.assert_close(out["y"].cpu(), ref(x, {"b": b})["y"])
    assert out["n"].tolist() == [3, 3]  # one row per replica, gathered on neuron:0
    cores = {
        e["nc_idx"]
        for e in json.loads(rt.sys_trace_fetch())["events"]
        if e["event_type"] == F.NC_EXEC_RUNNING
        and e["phase"] == F.START
        and e["data"][F.EXT_KEY].get(F.X_OP) in ("aten::addmm", "aten::mm")
    }
    assert cores == {0, 1}


def test_data_parallel_runs_in_timing_mode() -> None:
    emu.enable(cores=2, numerics=False)
    model = torch.nn.Linear(512, 512).to("neuron")
    out = torch.nn.DataParallel(model)(torch.randn(64, 512))
    assert out.shape == (64, 512) and out.device == torch.device("neuron", 0)
    out.sum().backward()
    assert model.weight.grad.shape == (512, 512)
