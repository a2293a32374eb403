"""The emulated device's allocator (emulator/memory.py, snapshot.py): statistics, torch.profiler's
memory events and snapshots, against peaks worked out by hand from the tensor sizes, an injected
leak, torch's own readers (torch.accelerator.memory through the emulator's DeviceAllocator, the
Chrome export's [memory] events, torch.cuda._memory_viz)."""

from __future__ import annotations

import gc
import json
import pickle
import weakref
from pathlib import Path

import pytest
from fresh_process import run_fresh

torch = pytest.importorskip("torch")

from memory_workload import (  # noqa: E402
    BATCH,
    F32,
    LEAK_BYTES,
    SCALAR,
    STEP_PEAK,
    W_BYTES,
    WIDTH,
    X_BYTES,
)

import neuron_profiler.emulator as emu  # noqa: E402
from neuron_profiler.emulator.runtime import get_runtime  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.fixture(params=[True, False], ids=["numerics", "timing"])
def device(request: pytest.FixtureRequest):
    gc.collect()  # an earlier test's garbage cycles (a profiler, a frame) free their buffers now
    emu.enable(cores=2, chip="trn2", numerics=request.param)
    yield torch.device("neuron", 0)
    rt = get_runtime()
    if rt.capturing:
        rt.sys_trace_stop()
    torch.neuron.memory._record_memory_history(None)
    emu.enable(cores=2, chip="trn2")


def _train(w: torch.Tensor, x: torch.Tensor, steps: int, leak: list | None = None, prof=None):
    """memory_workload.train, written in this file: the snapshot's stacks must name it."""
    for _ in range(steps):
        y = x @ w
        loss = y.sum()
        loss.backward()
        with torch.no_grad():
            w.add_(w.grad, alpha=-1e-3)
        w.grad = None
        del y, loss
        if leak is not None:
            leak.append(torch.ones(LEAK_BYTES // F32, device=w.device))
        if prof is not None:
            prof.step()


def _model(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    w = torch.randn(WIDTH, WIDTH, device=device, requires_grad=True)
    x = torch.randn(BATCH, WIDTH, device=device)
    return w, x


def test_training_step_peak_and_current_match_the_sizes_by_hand(device) -> None:
    before = torch.neuron.memory_allocated(device)
    w, x = _model(device)
    assert torch.neuron.memory_allocated(device) - before == W_BYTES + X_BYTES
    torch.neuron.reset_peak_memory_stats(device)
    _train(w, x, steps=3)
    assert torch.neuron.max_memory_allocated(device) - before == STEP_PEAK
    assert torch.neuron.memory_allocated(device) - before == W_BYTES + X_BYTES  # all freed
    assert torch.neuron.memory_reserved(device) == torch.neuron.memory_allocated(device)
    del w, x
    assert torch.neuron.memory_allocated(device) == before


def test_an_injected_leak_grows_the_stats_by_the_leaked_bytes_per_step(device) -> None:
    w, x = _model(device)
    leak: list = []
    torch.neuron.reset_peak_memory_stats(device)
    _train(w, x, steps=1, leak=leak)
    current, peak = torch.neuron.memory_allocated(device), torch.neuron.max_memory_allocated(device)
    for step in range(1, 4):
        _train(w, x, steps=1, leak=leak)
        assert torch.neuron.memory_allocated(device) - current == step * LEAK_BYTES
        assert torch.neuron.max_memory_allocated(device) - peak == step * LEAK_BYTES
    allocs = torch.neuron.memory_stats(device)["allocation.all.current"]
    leak.clear()
    assert torch.neuron.memory_stats(device)["allocation.all.current"] == allocs - 4


def test_cores_are_accounted_apart(device) -> None:
    on_one = torch.neuron.memory_allocated(1)
    on_zero = torch.neuron.memory_allocated(0)
    t = torch.empty(1000, dtype=torch.float16, device="neuron:1")
    assert torch.neuron.memory_allocated(1) - on_one == 2000
    assert torch.neuron.memory_allocated(0) == on_zero
    view = t[10:]  # a view owns no memory
    assert torch.neuron.memory_allocated(1) - on_one == 2000
    del t, view
    assert torch.neuron.memory_allocated(1) == on_one


def test_a_buffer_lives_as_long_as_any_tensor_on_its_storage(device) -> None:
    """A view or an alias outliving the tensor that allocated the buffer keeps its bytes
    allocated, as a real allocator frees a block when its storage dies. (A view also keeps its
    base tensor alive, as autograd's ``_base``; ``detach()`` does not.)"""
    before = torch.neuron.memory_allocated(device)
    x = torch.ones(BATCH, WIDTH, device=device)
    view = x.t()
    del x
    assert torch.neuron.memory_allocated(device) - before == X_BYTES
    del view
    assert torch.neuron.memory_allocated(device) == before
    x = torch.ones(BATCH, WIDTH, device=device)
    alias = x.detach()  # a new tensor on the same storage, not a view (AccumulateGrad's steal)
    del x
    assert torch.neuron.memory_allocated(device) - before == X_BYTES
    del alias
    assert torch.neuron.memory_allocated(device) == before


BIAS_BYTES = WIDTH * F32  # a (WIDTH,) bias, and its gradient


def test_gradients_stay_allocated_until_dropped(device) -> None:
    """After backward every parameter's gradient is allocated (AccumulateGrad stores it as
    ``grad.detach()``, an alias, and the gradient's own tensor dies inside backward); setting
    ``.grad`` to None, or ``zero_grad()``, frees exactly those bytes."""
    w, x = _model(device)
    b = torch.zeros(WIDTH, device=device, requires_grad=True)
    opt = torch.optim.SGD([w, b], lr=1e-3)
    before = torch.neuron.memory_allocated(device)
    (x @ w + b).sum().backward()  # the temporaries, the seed and the loss are gone after it
    assert torch.neuron.memory_allocated(device) - before == W_BYTES + BIAS_BYTES
    w.grad = None
    assert torch.neuron.memory_allocated(device) - before == BIAS_BYTES
    b.grad = None
    assert torch.neuron.memory_allocated(device) == before
    (x @ w + b).sum().backward()
    opt.step()  # SGD without momentum: updates in place, keeps no state
    assert torch.neuron.memory_allocated(device) - before == W_BYTES + BIAS_BYTES
    opt.zero_grad()  # set_to_none
    assert torch.neuron.memory_allocated(device) == before


def test_sgd_step_peak_matches_the_sizes_by_hand(device) -> None:
    """Two layers, h = x @ w1, y = h @ w2, loss = y.sum(), SGD. Backward computes w2's
    gradient first; it stays allocated (w2.grad) while MmBackward of the first layer writes
    w1's, the peak: w1, w2, x, h, y, the loss, the seed (``torch.autograd.backward`` holds it
    until backward returns), the gradient of h (that node's input), w2's gradient and w1's new
    one. SGD without momentum updates in place and keeps no state. (Counting a gradient only
    while its own tensor lives, w2's would be gone by then: one W_BYTES less.)"""
    w1, x = _model(device)
    w2 = torch.randn(WIDTH, WIDTH, device=device, requires_grad=True)
    opt = torch.optim.SGD([w1, w2], lr=1e-3)
    before = torch.neuron.memory_allocated(device)
    torch.neuron.reset_peak_memory_stats(device)
    for _ in range(2):
        opt.zero_grad()
        h = x @ w1
        y = h @ w2
        loss = y.sum()
        loss.backward()
        opt.step()
        del h, y, loss
    params_and_x = 2 * W_BYTES + X_BYTES
    peak = params_and_x + X_BYTES + X_BYTES + SCALAR + SCALAR + X_BYTES + W_BYTES + W_BYTES
    assert torch.neuron.max_memory_allocated(device) - before == peak - params_and_x
    assert torch.neuron.memory_allocated(device) - before == 2 * W_BYTES  # the gradients
    opt.zero_grad()
    assert torch.neuron.memory_allocated(device) == before


# torch.accelerator.memory's functions, each against torch.neuron's of the same name
ACCELERATOR_READERS = ("memory_allocated", "max_memory_allocated", "memory_reserved")
ACCELERATOR_READERS += ("max_memory_reserved",)
# trn2: 96 GiB of HBM shared by 4 logical NeuronCores (AWS Trn2 architecture page)
TRN2_HBM_PER_CORE = 96 * 2**30 // 4


def test_torch_accelerator_memory_reads_our_stats_after_a_training_step(device) -> None:
    """torch.accelerator.memory, unpatched: through the emulator's C++ DeviceAllocator it
    reads the figures worked out by hand, the same as torch.neuron's, on each core."""
    acc = torch.accelerator
    assert acc.current_accelerator().type == "neuron"
    before = acc.memory_allocated(0)
    w, x = _model(device)
    acc.reset_peak_memory_stats(0)
    _train(w, x, steps=1)
    assert acc.max_memory_allocated(0) - before == STEP_PEAK
    assert acc.memory_allocated(0) - before == W_BYTES + X_BYTES
    on_one = acc.memory_allocated(1)
    t = torch.empty(1000, dtype=torch.float16, device="neuron:1")
    assert acc.memory_allocated(torch.device("neuron", 1)) - on_one == 2000
    for core in (0, 1):
        for name in ACCELERATOR_READERS:
            assert getattr(acc, name)(core) == getattr(torch.neuron, name)(core), (name, core)
        ours, theirs = torch.neuron.memory_stats(core), acc.memory_stats(core)
        assert {k: theirs[k] for k in ours} == ours  # every figure we keep, under its name
        others = {k: v for k, v in theirs.items() if k not in ours}
        assert others and set(others.values()) == {0}  # pools, splits: none in the emulator
        assert ours["allocated_bytes.all.current"] > 0
        free, total = acc.get_memory_info(core)
        assert (free, total) == (TRN2_HBM_PER_CORE - acc.memory_reserved(core), TRN2_HBM_PER_CORE)
    del t


def test_torch_accelerator_resets_reset_ours(device) -> None:
    t = torch.empty(256, device="neuron:1")
    del t  # a peak above the current figure, and one allocation and free counted
    assert torch.neuron.max_memory_allocated(1) > torch.neuron.memory_allocated(1)
    torch.accelerator.reset_peak_memory_stats(1)
    assert torch.neuron.max_memory_allocated(1) == torch.neuron.memory_allocated(1)
    assert torch.neuron.memory_stats(1)["allocation.all.freed"] > 0
    torch.accelerator.reset_accumulated_memory_stats(1)
    stats = torch.neuron.memory_stats(1)
    assert stats["allocation.all.freed"] == stats["allocated_bytes.all.allocated"] == 0


def test_torch_accelerator_errors_name_the_problem(device) -> None:
    with pytest.raises(RuntimeError, match="neuron:7 is not an emulated device"):
        torch.accelerator.memory_allocated(7)
    # c10 memory for the device: there was no PrivateUse1 allocator at all (a crash), now a message
    with pytest.raises(
        RuntimeError, match="emulated neuron device allocates no memory through c10"
    ):
        torch.UntypedStorage(8, device="neuron")


NO_COMPILER = """
import torch
import neuron_profiler.emulator as emu
emu.enable(cores=2, chip="trn2")
t = torch.empty(1000, device="neuron:1")
print(torch.neuron.memory_allocated(1), torch.neuron.max_memory_allocated(1))
try:
    torch.accelerator.memory_allocated(1)
except RuntimeError as err:
    print("unavailable:", "not a DeviceAllocator" in str(err))
"""


def test_without_a_compiler_one_line_says_why_and_torch_neuron_stats_work(tmp_path: Path) -> None:
    """No cached build and no compiler: enable() works, one line on stderr names the problem,
    torch.neuron's statistics still count, torch.accelerator.memory stays as torch leaves it."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURON_PROFILER_")}
    env.update(TORCH_EXTENSIONS_DIR=str(tmp_path), CXX=str(tmp_path / "no-such-c++"))
    out = subprocess.run(
        [sys.executable, "-c", NO_COMPILER], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines() == ["4000 4000", "unavailable: True"]
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines == [
        "neuron-profiler: torch.accelerator.memory does not reach the emulated device: cannot "
        "build the emulated device's memory extension: no C++ compiler: "
        f"'{tmp_path / 'no-such-c++'}' not found on PATH (install g++ or set CXX)"
    ]


def _memory_events(trace: Path) -> list[dict]:
    events = json.loads(trace.read_text())["traceEvents"]
    return [e for e in events if e.get("name") == "[memory]"]


def _host_events_of_size(trace: Path, sizes: set[int]) -> list[str]:
    """Host (CPU) [memory] events of one of ``sizes``, each described by what it was (alloc or
    free), its thread and the innermost op around it on that thread: where to look when a
    device buffer's host memory leaks onto the host books."""
    events = json.loads(trace.read_text())["traceEvents"]
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    cpu_type = int(torch._C._autograd.DeviceType.CPU)
    found = []
    for e in _memory_events(trace):
        size = e["args"]["Bytes"]
        if e["args"]["Device Type"] != cpu_type or abs(size) not in sizes:
            continue
        around = [
            op
            for op in ops
            if op["tid"] == e["tid"] and op["ts"] <= e["ts"] <= op["ts"] + op.get("dur", 0)
        ]
        if around:
            where = "inside " + min(around, key=lambda op: op.get("dur", 0))["name"]
        else:
            ended = [op for op in ops if op["tid"] == e["tid"] and op["ts"] <= e["ts"]]
            last = max(ended, key=lambda op: op["ts"] + op.get("dur", 0))["name"] if ended else None
            where = f"outside any op, after {last}"
        what = "alloc" if size > 0 else "free"
        found.append(f"{what} of {abs(size)} bytes on thread {e['tid']} {where}")
    return found


def test_profile_memory_reports_device_allocations_and_the_peak(device, tmp_path: Path) -> None:
    from torch.profiler import ProfilerActivity, profile

    from neuron_profiler import NEURON

    w, x = _model(device)
    host_x = torch.ones(BATCH, WIDTH)
    gc.collect()  # host garbage of earlier tests, freed inside the window, would read as CPU memory
    torch.neuron.reset_peak_memory_stats(device)
    with profile(activities=[ProfilerActivity.CPU, NEURON], profile_memory=True) as prof:
        _train(w, x, steps=2)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as to_device:
        on_device = host_x.to(device)  # device memory
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as to_host:
        on_host = w.detach().cpu()  # host memory, as on any device
    del on_device, on_host
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    device_type = int(torch._C._autograd.DeviceType.PrivateUse1)
    on_device = [
        e["args"] for e in _memory_events(trace) if e["args"]["Device Type"] == device_type
    ]
    allocs = [a["Bytes"] for a in on_device if a["Bytes"] > 0]
    frees = [-a["Bytes"] for a in on_device if a["Bytes"] < 0]
    # per step: y, loss, the seed and w's gradient allocated, and all four freed
    assert sorted(allocs) == sorted([X_BYTES, SCALAR, SCALAR, W_BYTES] * 2)
    assert sorted(frees) == sorted(allocs)
    peak = max(a["Total Allocated"] for a in on_device)
    assert peak == torch.neuron.max_memory_allocated(device)
    assert all(
        a["Device Id"] == 0 and a["Total Reserved"] == a["Total Allocated"] for a in on_device
    )
    by_op = {e.key: e for e in prof.key_averages()}
    steps = 2  # per step: mm makes y forward and w's gradient backward, sum the loss
    assert by_op["aten::mm"].device_memory_usage == steps * (X_BYTES + W_BYTES)
    assert by_op["aten::sum"].device_memory_usage == steps * SCALAR
    assert by_op["aten::ones_like"].device_memory_usage == steps * SCALAR
    assert sum(e.self_device_memory_usage for e in by_op.values()) == 0  # all freed in the window
    # the device's buffers are host tensors inside the emulator: not host memory to the profile
    # (no host event of a device buffer's size; a stray host free inside the window, garbage
    # of the process, may be there on a loaded machine and is no double count)
    stray = _host_events_of_size(trace, {X_BYTES, W_BYTES})
    assert not stray, "host events of a device buffer's size:\n" + "\n".join(stray)
    up = {e.key: e for e in to_device.key_averages()}["aten::_to_copy"]
    assert (up.device_memory_usage, up.cpu_memory_usage) == (X_BYTES, 0)
    down = {e.key: e for e in to_host.key_averages()}["aten::_to_copy"]
    assert (down.device_memory_usage, down.cpu_memory_usage) == (0, W_BYTES)


def test_torch_memory_profiler_timeline_peaks_with_ours(device) -> None:
    """torch's own memory profiler (torch.profiler._memory_profiler, what export_memory_timeline
    draws) builds its timeline from the [memory] events; it leaves out tensors allocated before
    the profile (w and x, and any other live tensor), so its peak is ours minus those."""
    from torch.profiler import ProfilerActivity, profile
    from torch.profiler._memory_profiler import MemoryProfileTimeline

    w, x = _model(device)
    torch.neuron.reset_peak_memory_stats(device)
    with profile(
        activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True
    ) as prof:
        _train(w, x, steps=2)
    timeline = MemoryProfileTimeline(prof._memory_profile())
    _, sizes = timeline._coalesce_timeline(device)
    others = torch.neuron.memory_allocated(device) - W_BYTES - X_BYTES  # earlier tests' tensors
    assert torch.neuron.max_memory_allocated(device) == others + STEP_PEAK
    assert max(sum(s) for s in sizes) == STEP_PEAK - W_BYTES - X_BYTES


_BUFFERS_FREED_RUN = """
import sys
import torch
import neuron_profiler.emulator as emu
from neuron_profiler.emulator.memory import ALLOCATOR
from torch.profiler import ProfilerActivity, profile

emu.enable(cores=1, numerics=sys.argv[1] == "numerics")
device = "neuron:0"
with profile(activities=[ProfilerActivity.CPU], profile_memory=True):
    a = torch.ones(64, 64, device=device)
    x = a + 1
    for _ in range(20):
        x = x + a  # frees the previous x
    del x, a
    torch.ones(4, device=device)  # one more op: its quiet window drops the freed tensors
torch.ones(4, device=device)  # the profile ended: the next free lets go of what was kept
assert ALLOCATOR.kept == [], ALLOCATOR.kept
print("DONE", flush=True)
"""


@pytest.mark.parametrize("mode", ["numerics", "timing"])
def test_buffers_freed_in_a_memory_profile_leave_no_unknown_host_frees(mode: str) -> None:
    """Device buffers made and freed inside a profile_memory window: their host tensors were
    not reported as host memory, and their frees are not either (c10's CPU allocator would log
    an unknown-size block for each one it frees while reporting). c10 logs that once per 1000
    such frees per process, so it runs in a fresh process, where the first one prints (in this
    process an earlier test's could have used the first up)."""
    proc = run_fresh(_BUFFERS_FREED_RUN, mode)
    assert "DONE" in proc.stdout and "unknown size" not in proc.stderr


def test_a_stolen_gradient_is_freed_in_a_quiet_window(device) -> None:
    """AccumulateGrad steals w's gradient as an alias (``grad.detach()``, a new tensor on the
    same storage), so the gradient's own tensor dies inside backward while ``w.grad`` still
    holds the storage. Let go of between ops, that storage must not be freed there, outside a
    quiet window: c10's CPU allocator remembers the sizes of host blocks freed after a profile,
    and a device buffer's storage freed at such an address while it reports reads as host
    memory. Kept, it is freed in the next op's quiet window."""
    from torch.profiler import ProfilerActivity, profile

    w, x = _model(device)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True):
        (x @ w).sum().backward()
        with torch.no_grad():
            w.add_(w.grad, alpha=-1e-3)  # an op (a quiet window) after the gradient's tensor died
        storage = weakref.ref(w.grad.untyped_storage())
        w.grad = None
        kept = storage() is not None
        torch.ones(4, device=device)  # the next op
        freed = storage() is None
    assert (kept, freed) == (True, True)


def test_a_stolen_gradient_is_reported_freed_when_dropped_not_in_accumulate_grad(
    device, tmp_path: Path
) -> None:
    """In a memory profile w's gradient stays allocated after backward (``w.grad``): its free is
    reported after ``w.grad = None``, not inside AccumulateGrad, where the gradient's own
    tensor dies."""
    from torch.profiler import ProfilerActivity, profile

    w, x = _model(device)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        (x @ w).sum().backward()
        after_backward = torch.neuron.memory_allocated(device)
        torch.ones(4, device=device)  # an op (its result freed): the gradient is not
        kept = torch.neuron.memory_allocated(device) == after_backward
        w.grad = None
        dropped = after_backward - torch.neuron.memory_allocated(device)
    assert (kept, dropped) == (True, W_BYTES)
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    device_type = int(torch._C._autograd.DeviceType.PrivateUse1)
    frees = [
        e["ts"]
        for e in _memory_events(trace)
        if e["args"]["Device Type"] == device_type and e["args"]["Bytes"] == -W_BYTES
    ]
    events = json.loads(trace.read_text())["traceEvents"]
    accumulate = [e for e in events if e.get("ph") == "X" and "AccumulateGrad" in e["name"]]
    assert len(frees) == 1 and accumulate
    assert all(frees[0] > e["ts"] + e["dur"] for e in accumulate)


def test_without_profile_memory_no_memory_events(device, tmp_path: Path) -> None:
    from torch.profiler import ProfilerActivity, profile

    from neuron_profiler import NEURON

    w, x = _model(device)
    with profile(activities=[ProfilerActivity.CPU, NEURON]) as prof:
        _train(w, x, steps=1)
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    assert _memory_events(trace) == []
    assert torch.neuron.max_memory_allocated(device) > 0


def _replay_peak(trace: list[dict], start: int) -> int:
    live, peak = start, start
    for entry in trace:
        if entry["action"] == "alloc":
            live += entry["size"]
        elif entry["action"] == "free_completed":
            live -= entry["size"]
        peak = max(peak, live)
    return peak


def test_snapshot_replays_to_the_peak_and_torch_memory_viz_reads_it(device, tmp_path: Path) -> None:
    from torch.cuda import _memory_viz
    from torch.profiler import ProfilerActivity, profile, schedule

    from neuron_profiler import NEURON

    w, x = _model(device)
    leak: list = []
    start = torch.neuron.memory_allocated(device)
    torch.neuron.reset_peak_memory_stats(device)
    torch.neuron.memory._record_memory_history(max_entries=100_000)
    with profile(
        activities=[ProfilerActivity.CPU, NEURON],
        schedule=schedule(wait=0, warmup=1, active=2),
    ) as prof:
        _train(w, x, steps=3, leak=leak, prof=prof)
    path = tmp_path / "snapshot.pickle"
    torch.neuron.memory._dump_snapshot(str(path))
    torch.neuron.memory._record_memory_history(None)
    snap = pickle.loads(path.read_bytes())

    trace = snap["device_traces"][0]
    assert _replay_peak(trace, start) == torch.neuron.max_memory_allocated(device)
    assert snap["device_traces"][1] == []
    allocs = [e for e in trace if e["action"] == "alloc"]
    assert len(allocs) == 3 * 5  # y, loss, seed, gradient, leaked tensor per step
    ours = [[f for f in e["frames"] if f["filename"] == __file__] for e in allocs]
    assert all(frames and frames[0]["name"] == "_train" for frames in ours)
    forward = [e for e in allocs if e["size"] == X_BYTES]  # y = x @ w: the program's own line
    assert all(e["frames"][0]["name"] == "_train" for e in forward)
    live = sum(s["allocated_size"] for s in snap["segments"] if s["device"] == 0)
    assert live == torch.neuron.memory_allocated(device)
    leaked = [s for s in snap["segments"] if s["total_size"] == LEAK_BYTES]
    assert len(leaked) == 3 and all(s["blocks"][0]["state"] == "active_allocated" for s in leaked)
    steps = [(a["name"], a["stage"]) for a in snap["external_annotations"]]
    # three prof.step() calls; the profiler opens step 3 after the last one, closed at exit
    assert steps == [(f"ProfilerStep#{i}", stage) for i in range(4) for stage in ("START", "END")]
    times = [a["time_us"] for a in snap["external_annotations"]]
    assert times == sorted(times) and times[0] <= allocs[0]["time_us"] <= times[1]

    assert "Active Memory Timeline" in _memory_viz.trace_plot(snap)
    assert _memory_viz.segment_plot(snap)
    flame = _memory_viz.memory(snap, format_flamegraph=lambda lines: lines)
    assert f"{LEAK_BYTES}" in flame and "_train" in flame
    assert "total_allocated" in _memory_viz.segsum(snap)
    assert _memory_viz.trace(snap).count("\n") >= len(trace)


def test_history_state_mode_stop_and_cores(device) -> None:
    """``enabled="state"`` keeps the live buffers' stacks and no trace; None stops recording;
    each core has its own trace; ``import torch.neuron.memory`` works as for torch.cuda."""
    import importlib

    assert importlib.import_module("torch.neuron.memory") is torch.neuron.memory
    torch.neuron.memory._record_memory_history(enabled="state")
    kept = torch.empty(100, device="neuron:1")  # 400 bytes on core 1
    snap = torch.neuron.memory._snapshot()
    assert snap["device_traces"] == [[], []]
    (segment,) = [s for s in snap["segments"] if s["address"] == kept.data_ptr()]
    assert (segment["device"], segment["total_size"], segment["segment_type"]) == (1, 400, "small")
    assert segment["frames"][0]["name"] == "test_history_state_mode_stop_and_cores"

    torch.neuron.memory._record_memory_history()
    on_one = torch.empty(10, device="neuron:1")
    del on_one
    traces = torch.neuron.memory._snapshot()["device_traces"]
    assert traces[0] == []
    actions = [(e["action"], e["size"]) for e in traces[1]]
    assert actions == [("alloc", 40), ("free_requested", 40), ("free_completed", 40)]
    torch.neuron.memory._record_memory_history(None)  # stops, and forgets the trace
    on_zero = torch.empty(10, device="neuron:0")
    after = torch.neuron.memory._snapshot()
    assert after["device_traces"] == [[], []]
    (segment,) = [s for s in after["segments"] if s["address"] == on_zero.data_ptr()]
    assert segment["frames"] == []  # no stacks recorded any more
    with pytest.raises(ValueError, match="enabled must be"):
        torch.neuron.memory._record_memory_history(enabled="everything")


def test_without_the_extension_stats_work_and_one_line_says_why(
    device, monkeypatch, capsys
) -> None:
    """No memory extension (no compiler): profiles run without device memory events, one line
    on stderr names the problem, and the statistics are unaffected."""
    from torch.profiler import ProfilerActivity, profile

    from neuron_profiler.emulator import native
    from neuron_profiler.emulator.memory import ALLOCATOR
    from neuron_profiler.errors import CollectorUnavailableError

    def no_extension() -> None:
        raise CollectorUnavailableError("no C++ compiler found (test)")

    monkeypatch.setattr(native, "load_native", no_extension)
    monkeypatch.setattr(ALLOCATOR, "native", None)
    monkeypatch.setattr(ALLOCATOR, "native_error", None)
    w, x = _model(device)
    torch.neuron.reset_peak_memory_stats(device)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        _train(w, x, steps=1)
    others = torch.neuron.memory_allocated(device) - W_BYTES - X_BYTES
    assert torch.neuron.max_memory_allocated(device) == others + STEP_PEAK
    assert all(e.device_memory_usage == 0 for e in prof.key_averages())
    err = capsys.readouterr().err.splitlines()
    assert [line for line in err if "device memory not reported" in line] == [
        "neuron-profiler: device memory not reported to torch.profiler: "
        "no C++ compiler found (test)"
    ]


def test_snapshot_without_the_extension_says_once_it_has_no_step_annotations(
    device, monkeypatch, capsys
) -> None:
    """No memory extension (no compiler): a recorded snapshot is complete apart from its
    ProfilerStep annotations, and one line on stderr says so, once per process."""
    from torch.profiler import ProfilerActivity, profile, schedule

    from neuron_profiler.emulator import native, snapshot
    from neuron_profiler.errors import CollectorUnavailableError

    def no_extension() -> None:
        raise CollectorUnavailableError("no C++ compiler found (test)")

    monkeypatch.setattr(native, "load_native", no_extension)
    monkeypatch.setattr(snapshot, "_said", [])
    torch.neuron.memory._record_memory_history(max_entries=1000)
    with profile(
        activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=0, active=2)
    ) as p:
        for _ in range(2):
            kept = torch.empty(256, device=device)
            p.step()
    taken = torch.neuron.memory._snapshot()
    torch.neuron.memory._record_memory_history(None)
    torch.neuron.memory._record_memory_history(max_entries=1000)  # asked again: said once
    assert taken["external_annotations"] == []
    assert kept.data_ptr() in {s["address"] for s in taken["segments"]}
    assert [e["action"] for e in taken["device_traces"][0]].count("alloc") >= 2
    err = [line for line in capsys.readouterr().err.splitlines() if "annotations" in line]
    assert err == [f"{snapshot.NO_STEP_ANNOTATIONS}: no C++ compiler found (test)"]


def test_a_device_cast_is_no_host_op_and_no_host_memory(device, tmp_path: Path) -> None:
    """``w.to(torch.bfloat16)`` between device buffers (512 KiB out: modelled in timing mode,
    below the memory-map size): the profile has only the op's own rows, and its output is device
    memory, freed, not host memory. Timing mode showed aten::zeros > empty, zero_, fill_ inside
    the op and a 512 KiB host allocation per cast never freed (a host leak to the analyzer)."""
    from torch.profiler import ProfilerActivity, profile

    w = torch.randn(512, 512, device=device)
    out_bytes = 512 * 512 * 2
    gc.collect()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for _ in range(3):
            wb = w.to(torch.bfloat16)
            del wb
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    events = json.loads(trace.read_text())["traceEvents"]
    rows = {e["name"] for e in events if e.get("cat") == "cpu_op"}
    assert rows == {"aten::to", "aten::_to_copy", "PythonSubclass"}
    stray = _host_events_of_size(trace, {out_bytes})
    assert not stray, "host events of the cast's size:\n" + "\n".join(stray)
    device_type = int(torch._C._autograd.DeviceType.PrivateUse1)
    on_device = [
        e["args"]["Bytes"] for e in _memory_events(trace) if e["args"]["Device Type"] == device_type
    ]
    assert sorted(on_device) == sorted([out_bytes, -out_bytes] * 3)
