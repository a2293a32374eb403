"""``from neuron_profiler import NEURON`` on a machine with no Neuron device (no TorchNeuron, the
emulator not enabled): PyTorch's PrivateUse1 backend is named "neuron" for profiling, and
``torch.neuron`` is a device that is not here. Before, the name had no module behind it, so
``torch.accelerator.is_available()`` raised ("Device 'neuron' does not have a corresponding
module registered as 'torch.neuron'"), which broke ``torch.compile`` in CPU-only programs. The
emulator enabled afterwards replaces the stand-in. Each case runs in a fresh process."""

from __future__ import annotations

import pytest
from fresh_process import run_fresh

pytest.importorskip("torch")


pytestmark = [pytest.mark.torch]

SCRIPT = r"""
import sys
import torch
from neuron_profiler import NEURON
from torch.profiler import ProfilerActivity, profile

print("accelerator", torch.accelerator.is_available())
print("compiled", torch.compile(lambda x: x * 2, backend="aot_eager")(torch.ones(2)).tolist())
with profile(activities=[ProfilerActivity.CPU, NEURON]) as prof:
    torch.ones(3) + 1
print("profiled", any(e.name == "aten::add" for e in prof.events()))
if sys.argv[1] == "then-emulator":
    from neuron_profiler import emulator
    emulator.enable(cores=1)
    print("emulated", torch.accelerator.is_available(), (torch.ones(2, device="neuron") + 1).tolist())
"""


@pytest.mark.parametrize("then", ["alone", "then-emulator"])
def test_naming_the_backend_leaves_a_device_that_is_not_here(then: str) -> None:
    proc = run_fresh(SCRIPT, then)
    lines = proc.stdout.splitlines()
    assert lines[:3] == ["accelerator False", "compiled [2.0, 2.0]", "profiled True"]
    if then == "then-emulator":
        assert lines[3] == "emulated True [2.0, 2.0]"
