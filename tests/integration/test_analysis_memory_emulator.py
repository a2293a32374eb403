"""The memory analysis (analysis/memory.py) on the emulated device: a training loop whose peak is
worked out by hand from its tensor sizes, and the same loop with a leak injected, profiled with
profile_memory=True and analysed from the exported trace as ``neuron-prof analyze`` reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

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
from neuron_profiler.analysis import analyze  # noqa: E402
from neuron_profiler.analysis.memory import BEFORE_WINDOW, UNKNOWN_OP  # noqa: E402
from neuron_profiler.costmodel.chips import CHIPS  # noqa: E402
from neuron_profiler.emulator.runtime import get_runtime  # noqa: E402
from neuron_profiler.trace import load_trace  # noqa: E402

pytestmark = pytest.mark.torch

assert STEP_PEAK == 196_616
STEPS = 4


@pytest.fixture
def device():
    emu.enable(cores=2, chip="trn2", numerics=False)
    yield torch.device("neuron", 0)
    rt = get_runtime()
    if rt.capturing:
        rt.sys_trace_stop()
    emu.enable(cores=2, chip="trn2")


def _profiled(device: torch.device, path: Path, leak: list | None) -> int:
    """Profile model creation and STEPS steps of SGD on sum(x @ w); returns what the device
    held before (earlier tests' tensors: the allocator's total counts them)."""
    from torch.profiler import ProfilerActivity, profile, schedule

    from neuron_profiler import NEURON

    before = torch.neuron.memory_allocated(device)
    with profile(  # a schedule, so that torch records the ProfilerStep annotations
        activities=[ProfilerActivity.CPU, NEURON],
        profile_memory=True,
        with_stack=True,
        schedule=schedule(wait=0, warmup=0, active=STEPS + 1),
    ) as prof:
        # the loop written here, not tests/memory_workload.train: the call sites are this file's
        w = torch.randn(WIDTH, WIDTH, device=device, requires_grad=True)
        x = torch.randn(BATCH, WIDTH, device=device)
        for _ in range(STEPS):
            y = x @ w
            loss = y.sum()
            loss.backward()
            with torch.no_grad():
                w.add_(w.grad, alpha=-1e-3)
            w.grad = None
            del y, loss
            if leak is not None:
                leak.append(torch.ones(LEAK_BYTES // F32, device=device))
            prof.step()
    prof.export_chrome_trace(str(path))
    return before


def test_training_loop_peak_live_tensors_and_ops(device, tmp_path: Path) -> None:
    before = _profiled(device, tmp_path / "t.json", leak=None)
    mem = analyze(load_trace(tmp_path / "t.json")).memory
    assert mem is not None
    (core,) = [d for d in mem.devices if d.label == "neuron:0"]
    assert core.absolute and core.peak_bytes == before + STEP_PEAK
    assert max(core.step_peak_bytes) == before + STEP_PEAK
    trn2 = CHIPS["trn2"]  # the chip's HBM shared by its logical cores (docs/chips.md)
    assert core.capacity_bytes == int(trn2.hbm_gib * 2**30 / trn2.logical_cores)
    assert core.headroom_bytes == core.capacity_bytes - before - STEP_PEAK
    live = {o.op: o.live_bytes for o in core.by_op if o.live_bytes}
    assert sum(live.values()) == core.peak_bytes  # every byte at the peak has its row
    assert live.pop(BEFORE_WINDOW, 0) == before
    assert live.pop("aten::randn") == W_BYTES + X_BYTES  # w and x
    assert live.pop("aten::sum") == SCALAR
    assert live.pop("aten::ones_like") == SCALAR
    # y (forward) and w's gradient being written (backward) are mm's; in 2 of about 60 loaded
    # runs the gradient's event was read outside any op of its thread (not reproduced since; the
    # cause is not known): it is then <unknown>, never another op's
    mm = live.pop("aten::mm")
    assert (mm, live) in ((X_BYTES + W_BYTES, {}), (X_BYTES, {UNKNOWN_OP: W_BYTES}))
    largest = sorted((t.bytes, t.op) for t in core.live_at_peak if t.op != UNKNOWN_OP)
    assert (W_BYTES, "aten::randn") in largest and (X_BYTES, "aten::mm") in largest
    assert sorted(t.bytes for t in core.live_at_peak)[-4:] == [X_BYTES, X_BYTES, W_BYTES, W_BYTES]
    sites = {t.call_site for t in core.live_at_peak if t.op == "aten::mm"}
    assert sites and all(Path(__file__).name in s and "_profiled" in s for s in sites), sites
    assert not [f for f in mem.findings if f.device == "neuron:0"]


def test_an_injected_leak_is_found_with_its_growth_per_step(device, tmp_path: Path) -> None:
    leak: list = []
    before = _profiled(device, tmp_path / "t.json", leak=leak)
    mem = analyze(load_trace(tmp_path / "t.json")).memory
    assert mem is not None
    (core,) = [d for d in mem.devices if d.label == "neuron:0"]
    # the last step's leak comes after its backward: the peak holds STEPS - 1 leaked tensors
    assert core.peak_bytes == before + STEP_PEAK + (STEPS - 1) * LEAK_BYTES
    assert core.growth_per_step_bytes == LEAK_BYTES
    (found,) = [f for f in mem.findings if f.device == "neuron:0"]
    assert (found.kind, found.bytes) == ("memory_leak", LEAK_BYTES)
    assert found.docs == "docs/analysis.md#memory_leak"
    assert "16,384 B a step" in found.suggestion


def test_tb_profiler_finds_the_same_peak(device, tmp_path: Path) -> None:
    """torch-tb-profiler 0.4.3's memory view reads the same trace: its peak per device (the
    highest Total Allocated, keyed by device type and id) is ours."""
    pytest.importorskip("torch_tb_profiler")
    import logging

    from torch_tb_profiler.profiler.data import RunProfileData

    logging.getLogger("torch_tb_profiler").setLevel(logging.ERROR)
    leak: list = []
    _profiled(device, tmp_path / "t.json", leak=leak)
    data = RunProfileData.parse("worker0", "1", str(tmp_path / "t.json"), str(tmp_path))
    data.process()
    # 0.4.3 knows CPU and CUDA by name; PrivateUse1 (20) is kept as None
    peaks = data.memory_snapshot.get_peak_memory().items()
    theirs = {dev_id: peak for (kind, dev_id), peak in peaks if kind is None}  # (host: CPU)
    mem = analyze(load_trace(tmp_path / "t.json")).memory
    assert mem is not None
    ours = {d.device_id: d.peak_bytes for d in mem.devices if d.device_type == 20}
    assert ours == theirs and ours
