"""The emulator's inner CPU execution is invisible to torch.profiler: each user op appears once,
never more often than the same code records on CPU."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from torch.profiler import ProfilerActivity, profile  # noqa: E402

import neuron_profiler.emulator as emu  # noqa: E402

pytestmark = pytest.mark.torch
# Size/dim queries that the "sizes" dispatch policy routes through the dispatcher, and PyTorch's
# own marker for Python-subclass dispatch: neither is an op the emulator runs.
NOT_OPS = {
    "PythonSubclass",
    "aten::dim",
    "aten::sym_numel",
    "aten::sym_size",
    "aten::sym_stride",
    "aten::is_contiguous",
    "aten::sym_storage_offset",
    "aten::size",
    "aten::stride",
}


@pytest.fixture(autouse=True)
def _device():
    emu.enable(cores=2)


def _counts(fn) -> dict[str, int]:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return {e.key: e.count for e in prof.key_averages()}


def test_directly_called_ops_appear_exactly_once_each() -> None:
    n = 7
    counts = {}
    for dev in ("cpu", "neuron"):
        a, b = torch.randn(8, 8, device=dev), torch.randn(8, 8, device=dev)

        def work(a=a, b=b) -> None:
            for _ in range(n):
                c = torch.relu(torch.mm(a, b))
                c.add_(1.0)
                c.sum()

        counts[dev] = _counts(work)
    for op in ("aten::mm", "aten::relu", "aten::add_", "aten::sum"):
        assert counts["neuron"][op] == n == counts["cpu"][op]


def test_training_step_records_no_op_more_often_than_cpu() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    x, y = torch.randn(5, 8), torch.randn(5, 4)
    counts = {}
    for dev in ("cpu", "neuron"):
        m = copy.deepcopy(model).to(dev)
        opt = torch.optim.SGD(m.parameters(), lr=0.1, foreach=False)  # same path on both
        xd, yd = x.to(dev), y.to(dev)

        def step(m=m, opt=opt, xd=xd, yd=yd) -> None:
            torch.nn.functional.mse_loss(m(xd), yd).backward()
            opt.step()

        counts[dev] = _counts(step)
    on_device = {k: v for k, v in counts["neuron"].items() if k not in NOT_OPS}
    assert on_device["aten::addmm"] == counts["cpu"]["aten::addmm"] == 2
    assert on_device["aten::gelu_backward"] == counts["cpu"]["aten::gelu_backward"] == 1
    extra = {
        k: (v, counts["cpu"].get(k, 0))
        for k, v in on_device.items()
        if k.startswith("aten::") and v > counts["cpu"].get(k, 0)
    }
    assert extra == {}
