"""An in-place op's device cost counts what it writes (the arguments its schema marks written),
not every operand: add_(self, other) reads two tensors and writes one, as the cost model's trace
rule prices it (the projection's)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import neuron_profiler.emulator as emu  # noqa: E402
from neuron_profiler.costmodel.ops import op_cost as trace_cost  # noqa: E402
from neuron_profiler.emulator import dispatch as D  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.fixture(autouse=True)
def _device():
    emu.enable(cores=1)


@pytest.fixture
def priced(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Bytes the emulator priced per op, from its cost calls."""
    seen: dict[str, int] = {}
    real = D.op_cost

    def spy(name: str, **kw):  # noqa: ANN003, ANN202
        cost = real(name, **kw)
        seen[name] = cost.bytes_moved
        return cost

    monkeypatch.setattr(D, "op_cost", spy)
    return seen


def test_binary_in_place_ops_write_self_only(priced: dict[str, int]) -> None:
    n = 1000
    a, b = torch.ones(n, device="neuron"), torch.ones(n, device="neuron")
    a.add_(b, alpha=0.5)
    xs = [torch.ones(n, device="neuron") for _ in range(2)]
    ys = [torch.ones(n, device="neuron") for _ in range(2)]
    torch._foreach_add_(xs, ys, alpha=0.5)
    torch._foreach_mul_(xs, 0.9)
    assert priced["aten::add_"] == 3 * n * 4
    assert priced["aten::_foreach_add_"] == 3 * 2 * n * 4
    assert priced["aten::_foreach_mul_"] == 2 * 2 * n * 4
    dims = [[[n], [n]], [[n], [n]], []]
    types = ["TensorList", "TensorList", "Scalar"]
    assert (
        trace_cost("aten::_foreach_add_", dims, types).bytes_moved == priced["aten::_foreach_add_"]
    )
    assert (
        trace_cost("aten::add_", [[n], [n], []], ["float", "float", "Scalar"]).bytes_moved
        == (priced["aten::add_"])
    )
