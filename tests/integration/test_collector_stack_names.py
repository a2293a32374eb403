"""``key_averages()`` of a ``with_stack=True`` profile with a ``record_function`` on the
emulated device: torch imports ``torch.profiler._cupti_monitor`` at the first
``record_function``, and the ``<module>`` frame of a module first imported while profiling can
come back with a name that is not UTF-8 (``key_averages()`` then raised UnicodeDecodeError in
3 of 4 fresh processes). Registering the collector imports it first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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


HOST_ROWS = """
import json, sys
import torch
from neuron_profiler import emulator
emulator.enable(cores=2, chip="trn2", numerics=sys.argv[1] == "numerics")
from neuron_profiler import NEURON
from torch.profiler import ProfilerActivity, profile
m = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU()).to("neuron")
h = torch.randn(64, 256)
pinned = torch.randn(64, 256).pin_memory()
host_out = torch.empty(64, 256)
compiled = sys.argv[3] == "compiled"
if compiled:
    graph = torch.compile(lambda t: (t.sin() @ t.T).relu(), backend="neuron")
    graph(h.to("neuron"))  # compiled before the profile


def copies_and_fallbacks():
    x = h.to("neuron")  # pageable host -> device: the call spans the staging
    xp = pinned.to("neuron", non_blocking=True)  # pinned, non_blocking
    y = m(x + xp)
    (y[:4] * 2).relu()  # small: computed for real in timing mode too (a math overhead span)
    y.cpu()  # device -> pageable host
    y.to("cpu", non_blocking=True)  # device -> pinned host, non_blocking
    host_out.copy_(y)  # copy_ to the host
    y.to("neuron:1")  # device -> device across cores
    y.to(torch.float16)  # a cast on the core
    torch.nonzero(y > 0)  # CPU fallback (the fallback table's aten::nonzero)
    torch.ones(8, dtype=torch.float64, device="neuron").add_(1)  # fallback writing back


with profile(
    activities=[ProfilerActivity.CPU, NEURON], with_stack=True, with_modules=True
) as prof:
    for _ in range(2):
        if compiled:
            graph(h.to("neuron"))
        else:
            copies_and_fallbacks()
        torch.neuron.synchronize()
prof.export_chrome_trace(sys.argv[2])
frames = {
    e["name"]
    for e in json.load(open(sys.argv[2]))["traceEvents"]
    if e.get("cat") == "python_function"
}
print(json.dumps({e.key: e.self_cpu_time_total for e in prof.key_averages() if e.key in frames}))
"""

# The emulator's rows on host threads (docs/collector.md, "What the trace contains"): runtime
# calls, CPU fallbacks and host syncs (privateuse1_runtime), and its overhead spans.
_RUNTIME = "privateuse1_runtime"
_OVERHEAD = "emulator overhead: "
# A row's times are read by calling time.time_ns, whose own call the tracer records: the row
# starts (or ends) inside that frame, by design (docs/emulator.md, with_stack).
_CLOCK = "<built-in function time_ns>"


def _ns(e: dict) -> tuple[int, int]:
    start = round(e["ts"] * 1000)
    return start, start + round(e.get("dur", 0) * 1000)


def _profile(mode: str, workload: str, path: Path) -> tuple[dict[str, float], list[dict]]:
    """The python_function frames' self CPU times (µs, ``key_averages()``) and the trace's
    events of a ``with_stack`` / ``with_modules`` profile of the workload."""
    proc = subprocess.run(
        [sys.executable, "-c", HOST_ROWS, mode, str(path), workload],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    self_us = json.loads(proc.stdout.strip().splitlines()[-1])
    return self_us, json.loads(path.read_text())["traceEvents"]


def _crossing(events: list[dict]) -> tuple[set[str], list[tuple[str, str, str]]]:
    """The emulator's host rows' names, and each (row, frame, how) where a row does not nest:
    it ends after the innermost Python frame around its start, or a frame that opened inside
    it outlives it (``time.time_ns``'s own frames aside)."""
    frames: dict[tuple, list[tuple[int, int, str]]] = {}
    for e in events:
        if e.get("cat") == "python_function" and e.get("ph") == "X" and e["name"] != _CLOCK:
            frames.setdefault((e["pid"], e["tid"]), []).append((*_ns(e), e["name"]))
    rows = [
        e
        for e in events
        if e.get("ph") == "X"
        and (e.get("cat") == _RUNTIME or e.get("name", "").startswith(_OVERHEAD))
    ]
    crossing = []
    for r in rows:
        start, end = _ns(r)
        around = frames.get((r["pid"], r["tid"]), [])
        parents = [f for f in around if f[0] <= start < f[1]]
        assert parents, r
        parent = max(parents, key=lambda f: f[0])  # the innermost: the latest to open
        if end > parent[1]:
            crossing.append((r["name"], parent[2], "ends after its parent"))
        for f in around:
            if start < f[0] < end < f[1]:
                crossing.append((r["name"], f[2], "a frame opened inside it outlives it"))
    return {e["name"] for e in rows}, crossing


@pytest.mark.parametrize("mode", ["numerics", "timing"])
def test_copy_and_fallback_rows_nest_in_their_frames(mode: str, tmp_path: Path) -> None:
    """``.to()`` / ``.cpu()`` / ``copy_`` copies (pageable, pinned, non_blocking, across cores,
    a cast), CPU fallbacks (one writing an input back), their syncs and the host math of small
    ops (timing mode computes them for real) under ``with_stack`` and
    ``with_modules``: each of the emulator's host rows lies within the innermost Python frame
    around its start, and no frame starts inside a row and ends after it; so no python_function
    frame gets a negative self CPU time (``to_copy`` -150 to -270 µs and ``execute`` -230 to
    -850 µs when the rows ended inside the frames that schedule them)."""
    self_us, events = _profile(mode, "copies", tmp_path / "trace.json")
    assert any("to_copy" in k for k in self_us) and any("run_fallback" in k for k in self_us)
    assert {k: t for k, t in self_us.items() if t < 0} == {}
    names, crossing = _crossing(events)
    for expected in (
        "nrt launch: aten::_to_copy",
        "nrt launch: aten::copy_",
        "CPU fallback: aten::nonzero",
        "CPU fallback: aten::add_",
        "host sync: aten::_to_copy",
        "emulator overhead: pinned_copy",
        "emulator overhead: numerics",
    ):
        assert expected in names, sorted(names)
    memcpy = {e["name"].split(" (")[0] for e in events if e.get("cat") == "gpu_memcpy"}
    assert memcpy == {"Memcpy HtoD", "Memcpy DtoH", "Memcpy DtoD"}
    assert crossing == []


@pytest.mark.parametrize("mode", ["numerics", "timing"])
def test_compiled_graph_rows_nest_in_their_frames(mode: str, tmp_path: Path) -> None:
    """A compiled graph's launch row ends in ``NeuronGraph.__call__``'s frame, before the
    timeline's frames open. (torch's own ``AOTDispatcher Runtime Wrapper Prologue`` span ends
    inside its ``exit_prologue`` frames, so AOTAutograd's ``runtime_wrapper`` can show a
    negative self time of its own: only the emulator's frames are checked here.)"""
    self_us, events = _profile(mode, "compiled", tmp_path / "trace.json")
    ours = {k: t for k, t in self_us.items() if "neuron_profiler/" in k}
    assert any("compiled.py" in k for k in ours)
    assert {k: t for k, t in ours.items() if t < 0} == {}
    names, crossing = _crossing(events)
    assert "neuron_graph_1 (inference)" in names, sorted(names)
    assert crossing == []
