"""``key_averages()`` of a ``with_stack=True`` profile with a ``record_function`` on the
emulated device: torch imports ``torch.profiler._cupti_monitor`` at the first
``record_function``, and the ``<module>`` frame of a module first imported while profiling can
come back with a name that is not UTF-8 (``key_averages()`` then raised UnicodeDecodeError in
3 of 4 fresh processes). Registering the collector imports it first."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

SCRIPT = """
import sys
import torch
from neuron_profiler import emulator
emulator.enable(cores=1)
from neuron_profiler import NEURON
from torch.profiler import ProfilerActivity, profile, record_function
assert "torch.profiler._cupti_monitor" in sys.modules  # imported before any profile
m = torch.nn.Linear(16, 4).to("neuron")
with profile(activities=[ProfilerActivity.CPU, NEURON], with_stack=True) as prof:
    for _ in range(2):
        with record_function("my_step"):
            m(torch.randn(8, 16, device="neuron")).sum().item()
rows = prof.key_averages()
assert any(e.key == "my_step" for e in rows)
print(rows.table(row_limit=3).count("my_step"))
"""


def test_key_averages_of_a_stack_profile_with_record_function() -> None:
    res = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-2000:]
