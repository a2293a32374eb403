"""A Python exception raised in a backward hook on a device tensor reaches the caller of
``backward()`` / ``autograd.grad()`` with its type and message, as on CPU and CUDA, and the device
keeps working. Each case runs in a subprocess: torch's Python device guard ended the process
there (std::terminate in its noexcept ``exchangeStream`` while autograd's engine unwound the
hook's exception), which would have killed pytest too."""

from __future__ import annotations

import json

import pytest
from fresh_process import run_fresh

torch = pytest.importorskip("torch")


pytestmark = pytest.mark.torch

_SCRIPT = r"""
import json, sys
import neuron_profiler.emulator as emu
numerics, cores = sys.argv[1] == "numerics", int(sys.argv[2])
emu.enable(cores=cores, numerics=numerics)
import torch

dev = torch.device("neuron", cores - 1)


class HookError(Exception):
    pass


def raiser(case):
    def hook(*_):
        raise HookError(f"boom-{case}")
    return hook


class Raising(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        raise HookError("boom-function")


def leaf():
    x = torch.ones(4, device=dev, requires_grad=True)
    x.register_hook(raiser("leaf"))
    (x * 2).sum().backward()


def intermediate():
    x = torch.ones(4, device=dev, requires_grad=True)
    h = x * 2
    h.register_hook(raiser("intermediate"))
    h.sum().backward()


def post_accumulate():
    x = torch.ones(4, device=dev, requires_grad=True)
    x.register_post_accumulate_grad_hook(raiser("post_accumulate"))
    (x * 2).sum().backward()


def autograd_grad():
    x = torch.ones(4, device=dev, requires_grad=True)
    x.register_hook(raiser("autograd_grad"))
    torch.autograd.grad((x * 2).sum(), x)


def module_full_backward():
    m = torch.nn.Linear(4, 3).to(dev)
    m.register_full_backward_hook(raiser("module_full_backward"))
    m(torch.ones(2, 4, device=dev, requires_grad=True)).sum().backward()


def module_backward_pre():
    m = torch.nn.Linear(4, 3).to(dev)
    m.register_full_backward_pre_hook(raiser("module_backward_pre"))
    m(torch.ones(2, 4, device=dev)).sum().backward()


def function():
    x = torch.ones(4, device=dev, requires_grad=True)
    Raising.apply(x).sum().backward()


results = {}
for fn in (leaf, intermediate, post_accumulate, autograd_grad, module_full_backward,
           module_backward_pre, function):
    try:
        fn()
        results[fn.__name__] = None
    except Exception as exc:
        results[fn.__name__] = [type(exc).__name__, str(exc)]
# the device afterwards: d/dx sum(3 x^2) = 6 x
x = torch.tensor([1.0, 2.0, -0.5], device=dev, requires_grad=True)
(3 * x * x).sum().backward()
results["grad_after"] = x.grad.cpu().tolist()
results["add_after"] = (torch.arange(3.0, device=dev) + 1).cpu().tolist()
print("RESULTS " + json.dumps(results))
"""

_CASES = (
    "leaf",
    "intermediate",
    "post_accumulate",
    "autograd_grad",
    "module_full_backward",
    "module_backward_pre",
    "function",
)


@pytest.mark.parametrize(
    ("mode", "cores"), [("numerics", 1), ("timing", 1), ("numerics", 2)], ids=str
)
def test_backward_hook_exception_reaches_the_caller(mode: str, cores: int) -> None:
    run = run_fresh(_SCRIPT, mode, str(cores))
    line = next(ln for ln in run.stdout.splitlines() if ln.startswith("RESULTS "))
    results = json.loads(line.removeprefix("RESULTS "))
    for case in _CASES:
        assert results[case] == ["HookError", f"boom-{case}"], case
    assert results["grad_after"] == [6.0, 12.0, -3.0]
    assert results["add_after"] == [1.0, 2.0, 3.0]
