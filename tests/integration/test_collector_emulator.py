"""The collector on the real emulated device (neuron_profiler.emulator), over a schedule.

Runs in a subprocess: the emulator must be enabled before anything else claims PrivateUse1, and
its process-wide state must not leak into other tests. A tee around the emulator source keeps
every payload the runtime handed out, so the test compares the exported traces with what the
source produced, parsed independently of the collector.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("torch")

from neuron_profiler.runtime_trace.activities import ActivityKind  # noqa: E402
from neuron_profiler.runtime_trace.parser import parse_system_trace  # noqa: E402

SCRIPT = r"""
import json, sys
from pathlib import Path
import torch
from neuron_profiler import emulator
emulator.enable(cores=2, chip="trn2")
from neuron_profiler import collectors
from neuron_profiler.collectors.sources import EmulatorSource
from torch.profiler import ProfilerActivity, profile, schedule

out = Path(sys.argv[1])
class Tee:
    name, links_by_correlation = "emulator", True
    def __init__(self):
        self.inner, self.n = EmulatorSource(), 0
    def start(self, m, c):
        self.inner.start(m, c)
    def stop(self):
        payload = self.inner.stop()
        (out / f"payload{self.n}.json").write_bytes(payload)
        self.n += 1
        return payload
    def device_properties(self):
        return self.inner.device_properties()
collectors.set_source(Tee())
NEURON = collectors.NEURON
dev0, dev1 = torch.device("neuron:0"), torch.device("neuron:1")
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
model = model.to(dev0)
opt = torch.optim.AdamW(model.parameters())
x, y = torch.randn(16, 32, device=dev0), torch.randint(0, 8, (16,), device=dev0)
w = torch.randn(8, 8, device=dev1)
def step():
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    (w @ w).relu()                                    # work on the second core
    torch.randn(4, 4, dtype=torch.float64).to(dev0).exp().cpu()   # float64: a CPU fallback
    return loss.item()
n = [0]
def ready(p):
    p.export_chrome_trace(str(out / f"trace{n[0]}.json"))
    (out / f"table{n[0]}.txt").write_text(p.key_averages().table(row_limit=50))
    from torch.autograd import DeviceType
    selfdev = {e.key: e.self_device_time_total for e in p.key_averages()
               if e.device_type == DeviceType.CPU and e.self_device_time_total}
    (out / f"selfdev{n[0]}.json").write_text(json.dumps(selfdev))
    n[0] += 1
with profile(activities=[ProfilerActivity.CPU, NEURON],
             schedule=schedule(wait=1, warmup=1, active=2, repeat=2), on_trace_ready=ready) as p:
    for _ in range(9):
        step()
        p.step()
print("done", n[0])
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("emulated")
    try:
        import neuron_profiler.emulator as emu
    except ImportError as err:
        pytest.skip(f"emulator not importable: {err}")
    if not hasattr(emu, "enable"):
        pytest.skip("emulator has no enable() yet")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(out)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("done 2")
    return out


def _device(trace: dict) -> list[dict]:
    return [
        e
        for e in trace["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy")
    ]


def test_each_cycle_has_exactly_the_source_activities(run: Path) -> None:
    """Capture begins at the warm-up (Kineto's configure): the payload holds the warm-up step's
    work too, which ended (each step ends in .item()) before the window began: left out and
    counted; every other device activity is in the trace once."""
    for cycle in range(2):
        trace = json.loads((run / f"trace{cycle}.json").read_text())
        acts = parse_system_trace((run / f"payload{cycle}.json").read_bytes())
        work = [int(k) for k in (ActivityKind.KERNEL, ActivityKind.DMA, ActivityKind.COLLECTIVE)]
        rows = [i for i, k in enumerate(acts.kind) if int(k) in work]
        key = {i: (int(acts.core[i]), int(acts.exec_id[i])) for i in rows}
        got = Counter((e["pid"], e["args"]["exec_id"]) for e in _device(trace))
        assert set(got.values()) == {1} and set(got) <= set(key.values()) and got
        warmup = [i for i in rows if key[i] not in got]
        assert warmup  # the warm-up step was captured ...
        first_kept = min(int(acts.start_ns[i]) for i in rows if key[i] in got)
        assert max(int(acts.end_ns[i]) for i in warmup) <= first_kept  # ... and ran before
        assert trace["neuron_excluded_outside_window"] >= len(warmup)


def test_layout_links_and_properties(run: Path) -> None:
    trace = json.loads((run / "trace1.json").read_text())
    device = _device(trace)
    assert {e["pid"] for e in device} == {0, 1}  # both cores used
    assert all("External id" in e["args"] and e["args"]["emulated"] for e in device)
    ops = {
        e["args"]["External id"]: e["name"]
        for e in trace["traceEvents"]
        if e.get("cat") == "cpu_op"
    }
    assert all(ops[e["args"]["External id"]].startswith("aten::") for e in device)
    props = trace["deviceProperties"]
    assert [p["name"] for p in props] == ["NeuronCore 0", "NeuronCore 1"]
    assert all(p["chip"] == "trn2" and p["emulated"] is True and p["hbm_bytes"] > 0 for p in props)
    assert trace["neuron_dropped_events"] == {"0": 0, "1": 0}
    assert trace["neuron_timing_modelled"] is True


def test_fallback_with_copies_and_device_time_table(run: Path) -> None:
    trace = json.loads((run / "trace0.json").read_text())
    fb = [
        e
        for e in trace["traceEvents"]
        if e.get("ph") == "X" and e.get("name", "").startswith("CPU fallback: ")
    ]
    assert fb and all(
        e["args"]["cpu fallback"] is True and "float64" in e["args"]["fallback reason"] for e in fb
    )
    for f in fb:
        copies = [
            e
            for e in trace["traceEvents"]
            if e.get("cat") == "gpu_memcpy"
            and e["args"].get("External id") == f["args"]["External id"]
        ]
        assert {c["args"]["direction"] for c in copies} >= {"d2h"}
    table = (run / "table0.txt").read_text()
    assert "Self NEURON" in table and "aten::addmm" in table


def test_key_averages_counts_each_device_activity_once(run: Path) -> None:
    """Self NEURON time summed over host ops equals the device activities' total duration."""
    for cycle in range(2):
        trace = json.loads((run / f"trace{cycle}.json").read_text())
        device_us = sum(e["dur"] for e in _device(trace))
        self_dev = json.loads((run / f"selfdev{cycle}.json").read_text())
        assert sum(self_dev.values()) == pytest.approx(device_us, rel=0.01)
        assert not [k for k in self_dev if not (k.startswith("aten::") or "::" in k)], self_dev


PRIVATEUSE1_ONLY = r"""
import sys
import torch
from neuron_profiler import emulator
emulator.enable(cores=1, numerics=False)
from torch.profiler import ProfilerActivity, profile
x = torch.randn(64, 64, device="neuron")
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
    (x @ x).sum().item()
device = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1]
print(len(device), sorted({e.name for e in device}))
"""


def test_enable_registers_the_collector_for_privateuse1() -> None:
    """After ``enable()``, a profile that asks for ``ProfilerActivity.PrivateUse1`` (what a
    script written for any PrivateUse1 backend asks) gets the device's rows, NEURON never
    imported: the emulator registers the collector as a real device's plugin is once imported."""
    out = subprocess.run(
        [sys.executable, "-c", PRIVATEUSE1_ONLY], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    count, names = out.stdout.split(" ", 1)
    assert int(count) >= 2 and "TensorE: mm" in names, out.stdout


WARMUP_SCRIPT = r"""
import json, sys
import torch
from neuron_profiler import emulator
emulator.enable(cores=1, chip="trn2", numerics=False)
from neuron_profiler import NEURON
from torch.profiler import ProfilerActivity, profile, schedule
x = torch.randn(8192, 8192).to("neuron")  # ~26 ms a matmul on trn2: the host runs far ahead
torch.neuron.synchronize()  # its copy done before the profile (it would not be in the trace)
with profile(activities=[ProfilerActivity.CPU, NEURON],
             schedule=schedule(wait=0, warmup=1, active=1, repeat=1),
             on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[1])) as prof:
    for _ in range(2):
        for _ in range(int(sys.argv[2])):
            y = x @ x          # no sync: the device runs well behind the host
        prof.step()
print("done")
"""


def test_warmup_work_running_in_the_window_is_kept_unlinked(tmp_path: Path) -> None:
    """A device-bound loop without syncs: the warm-up step's kernels run during the active step.
    Kineto keeps such CUDA kernels (CUPTI records from the warm-up on; the window is judged by
    device time), so the device is not shown idle while it ran them: the trace holds the
    warm-up's kernels that ran in the window, without a launching op, then the active step's,
    back to back from before the step began (how many of the warm-up's ended before the window
    opened depends on the host's speed, so that number is not asserted)."""
    out, per_step = tmp_path / "warm.json", 12
    proc = subprocess.run(
        [sys.executable, "-c", WARMUP_SCRIPT, str(out), str(per_step)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    trace = json.loads(out.read_text())
    kernels = sorted(
        (e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"),
        key=lambda e: e["ts"],
    )
    ops = {e["args"]["External id"] for e in trace["traceEvents"] if e.get("cat") == "cpu_op"}
    linked = [k for k in kernels if k["args"].get("External id") in ops]
    warmup = kernels[: len(kernels) - per_step]
    assert len(linked) == per_step and kernels[-per_step:] == linked
    assert 1 <= len(warmup) <= per_step  # the warm-up's ran first, unlinked
    (step,) = [e for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]
    assert kernels[0]["ts"] <= step["ts"]  # the device was busy when the step began ...
    gaps = [b["ts"] - (a["ts"] + a["dur"]) for a, b in zip(kernels, kernels[1:], strict=False)]
    assert max(gaps) < 20  # ... and stayed so (µs: launch latency at most, never a step's worth)
