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


NESTING = """
import sys
import torch
from neuron_profiler import emulator
emulator.enable(cores=1, chip="trn2", numerics=sys.argv[1] == "numerics")
from neuron_profiler import NEURON
from torch.profiler import ProfilerActivity, profile
m = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
m = m.to("neuron")
x = torch.randn(32, 256).to("neuron")
with profile(activities=[ProfilerActivity.CPU, NEURON], with_stack=True) as prof:
    for _ in range(2):
        loss = m(x).sum()
        loss.backward()
        loss.item()
rows = [
    (e.key, e.self_cpu_time_total)
    for e in prof.key_averages()
    if "dispatch.py" in e.key or "local_scalar_dense" in e.key
]
assert len({k.split(":")[0] for k, _ in rows}) >= 2, [e.key for e in prof.key_averages()][:40]
print([k for k, t in rows if t < 0])
"""


@pytest.mark.parametrize("mode", ["numerics", "timing"])
def test_kernel_launch_rows_nest_in_the_dispatch_frames(mode: str) -> None:
    """A kernel's ``nrt launch`` row begins and ends in ``execute``'s frame, an ``.item()``'s
    copy row in ``local_scalar_dense``'s: torch's tree builder then finds them nested, and
    neither frame gets a negative self CPU time (they did, by tens to hundreds of µs, when the
    rows ended inside the frames below them)."""
    proc = subprocess.run(
        [sys.executable, "-c", NESTING, mode], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"
