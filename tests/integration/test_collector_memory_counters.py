"""Device memory counters in the collector's trace, live: the emulator (tensors = the allocator's
bytes, the rest the modelled runtime memory of the chip) and libnrt (tests/fake_libnrt's own
per-core bookkeeping), against a workload whose peak is known by construction, torch's own
``[memory]`` events, hand-worked modelled figures, a Chrome round trip and the Perfetto tracks
decoded with perfetto's protos."""

from __future__ import annotations

import ctypes
import gc
import json
import shutil
import subprocess
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from memory_workload import STEP_PEAK, W_BYTES, X_BYTES, model  # noqa: E402
from memory_workload import train as _train  # noqa: E402
from perfetto_checks import decode_and_check  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import neuron_profiler.emulator as emu  # noqa: E402
from neuron_profiler import collectors  # noqa: E402
from neuron_profiler.collectors.libnrt import SysTrace  # noqa: E402
from neuron_profiler.collectors.sources import LibnrtSource  # noqa: E402
from neuron_profiler.exporters.writers import write_trace  # noqa: E402
from neuron_profiler.runtime_trace.memory_counters import (  # noqa: E402
    DROPPED_OVER_CAP,
    UNATTRIBUTED,
)
from neuron_profiler.trace import load_trace  # noqa: E402
from neuron_profiler.trace import schema as S  # noqa: E402
from neuron_profiler.trace import vocabulary as V  # noqa: E402

pytestmark = pytest.mark.torch

MIB = 1 << 20
CHANGES_PER_STEP = 8  # y, loss, seed, w's gradient: each allocated and freed
# trn2's modelled runtime memory per logical core, by hand (docs/emulator.md "Runtime memory"):
# model code 2 physical cores x 96 MiB, scratchpad 256, DMA rings 64, collectives 128,
# profiler buffers 64; no weights outside the tensors
RESERVED_TRN2 = {
    V.HBM_WEIGHTS: 0,
    V.HBM_MODEL_CODE: 192 * MIB,
    V.HBM_SCRATCHPAD: 256 * MIB,
    V.HBM_DMA_RINGS: 64 * MIB,
    V.HBM_COLLECTIVES: 128 * MIB,
    V.HBM_PROFILER: 64 * MIB,
}
FAKE_SRC = Path(__file__).resolve().parents[1] / "fake_libnrt" / "fake_libnrt.c"

emu.enable(cores=2, chip="trn2")
collectors.require()  # under CI=true a missing bridge fails here instead of skipping
NEURON = collectors.NEURON


@pytest.fixture
def device():
    emu.enable(cores=2, chip="trn2", numerics=False)
    yield torch.device("neuron", 0)
    emu.enable(cores=2, chip="trn2")


def _counts(device: torch.device) -> int:
    stats = torch.neuron.memory_stats(device)
    return stats["allocation.all.allocated"] + stats["allocation.all.freed"]


def _counters(trace) -> dict[str, list[tuple[int, int, dict]]]:
    """Counter samples of category neuron_hbm_usage by name: (ts_ns, pid, args) in time order."""
    out: dict[str, list] = {}
    for row in np.flatnonzero(trace.col(S.PH) == S.Phase.COUNTER).tolist():
        if trace.strings[trace.col(S.CAT_ID)[row]] == V.CAT_HBM_USAGE:
            ts, pid = int(trace.col(S.TS_NS)[row]), int(trace.col(S.PID)[row])
            out.setdefault(trace.name(row), []).append((ts, pid, trace.args(row)))
    return out


def _capture(device: torch.device, tmp_path: Path, profile_memory: bool):
    w, x = model(device)
    gc.collect()
    start = torch.neuron.memory_allocated(device)
    changes = _counts(device)
    with profile(activities=[ProfilerActivity.CPU, NEURON], profile_memory=profile_memory) as prof:
        _train(w, x, steps=2)
    changes = _counts(device) - changes
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return prof, path, start, changes


@pytest.mark.parametrize("profile_memory", [False, True], ids=["plain", "profile_memory"])
def test_emulator_counters_add_up_and_tensors_follow_the_allocator(
    device, tmp_path: Path, profile_memory: bool
) -> None:
    prof, path, start, changes = _capture(device, tmp_path, profile_memory)
    trace = load_trace(path)
    counters = _counters(trace)
    assert set(counters) == {V.core_hbm_counter_name(0), V.core_hbm_counter_name(1)}
    core0 = counters[V.core_hbm_counter_name(0)]
    # every change of core 0's allocation is one sample, plus the state at start and at stop
    assert changes == 2 * CHANGES_PER_STEP
    assert len(core0) == changes + 2
    reserved = sum(RESERVED_TRN2.values())
    for _, _, args in core0 + counters[V.core_hbm_counter_name(1)]:
        assert list(args) == [V.HBM_TENSORS, *RESERVED_TRN2]
        assert {k: args[k] for k in RESERVED_TRN2} == RESERVED_TRN2
        # the device total: the allocator's bytes plus the modelled runtime memory
        assert sum(args.values()) == args[V.HBM_TENSORS] + reserved
    tensors = [args[V.HBM_TENSORS] for _, _, args in core0]
    assert tensors[0] == tensors[-1] == start  # w and x, and whatever earlier tests left
    assert max(tensors) == start - W_BYTES - X_BYTES + STEP_PEAK
    assert [ts for ts, _, _ in core0] == sorted(ts for ts, _, _ in core0)
    # on the core's own process, named as the trace names it
    pids = {pid for _, pid, _ in core0}
    assert len(pids) == 1 and trace.process_names[pids.pop()] == V.core_process_name(0)
    # labelled: which figures are counted and which modelled
    assert trace.metadata[V.META_HBM_SOURCES] == {
        V.HBM_TENSORS: V.HBM_FROM_ALLOCATOR,
        **dict.fromkeys(RESERVED_TRN2, V.HBM_FROM_MODEL),
    }
    assert V.META_HBM_DROPPED not in trace.metadata
    # counters stay out of torch's op table (Kineto's "hidden")
    assert not [e.key for e in prof.key_averages() if "HBM" in e.key]
    if profile_memory:  # torch's own [memory] events say the same, change by change
        raw = json.loads(path.read_text())["traceEvents"]
        device_type = int(torch._C._autograd.DeviceType.PrivateUse1)
        totals = [
            e["args"]["Total Allocated"]
            for e in sorted(raw, key=lambda e: float(e["ts"]))
            if e.get("name") == "[memory]" and e["args"]["Device Type"] == device_type
        ]
        assert totals == tensors[1:-1]


def test_counters_round_trip_through_chrome_and_show_as_perfetto_tracks(
    device, tmp_path: Path
) -> None:
    _, path, _, _ = _capture(device, tmp_path, profile_memory=False)
    trace = load_trace(path)
    expected = _counters(trace)
    again = tmp_path / "again.json"
    write_trace(trace, again)
    assert _counters(load_trace(again)) == expected
    pf = tmp_path / "trace.pftrace"
    write_trace(trace, pf)
    decoded = decode_and_check(pf)
    for name, samples in expected.items():
        by_category = {}
        for category in samples[0][2]:
            desc = decoded.track_named(f"{name} {category}")
            assert desc.HasField("counter")
            points = decoded.counters[desc.uuid]
            # the exporter writes a value where it changes: the series, deduplicated
            series = [(ts, float(args[category])) for ts, _, args in samples]
            assert [p for i, p in enumerate(series) if i == 0 or p[1] != series[i - 1][1]] == [
                p for i, p in enumerate(points) if i == 0 or p[1] != points[i - 1][1]
            ]
            by_category[category] = dict(points)
        # the tracks' values add up to the total at every sample
        for ts, _, args in samples:
            value_at = {c: pts[max(t for t in pts if t <= ts)] for c, pts in by_category.items()}
            assert sum(value_at.values()) == sum(args.values())


def test_samples_past_the_cap_are_counted(device, tmp_path: Path, monkeypatch) -> None:
    per_core = 3  # the cap is this per core: 6 samples, 2 of them each core's start
    monkeypatch.setenv("NEURON_RT_INSPECT_SYS_TRACE_MAX_EVENTS_PER_NC", str(per_core))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the runtime's own ring drops events too, and says so
        _, path, start, changes = _capture(device, tmp_path, profile_memory=False)
    trace = load_trace(path)
    kept = 2 * per_core - 2
    assert trace.metadata[V.META_HBM_DROPPED] == {DROPPED_OVER_CAP: changes - kept}
    core0 = _counters(trace)[V.core_hbm_counter_name(0)]
    assert len(core0) == 1 + kept + 1  # the end state is kept past the cap
    assert core0[-1][2][V.HBM_TENSORS] == start


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc not found: cannot build tests/fake_libnrt")
    out = tmp_path_factory.mktemp("fake_libnrt_memory") / "libnrt_fake.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(out), str(FAKE_SRC)], check=True)
    return out


def test_libnrt_counters_are_what_the_runtime_reported(fake_lib: Path, tmp_path: Path) -> None:
    ctl = ctypes.CDLL(str(fake_lib))
    ctl.fake_nrt_dma_mem.argtypes = [
        ctypes.c_uint32,
        ctypes.c_char_p,
        ctypes.c_int64,
        ctypes.c_uint64,
    ]
    ctl.fake_nrt_dma_mem.restype = ctypes.c_int64

    def mem(core: int, usage: str, nbytes: int) -> int:
        total = ctl.fake_nrt_dma_mem(core, usage.encode(), nbytes, time.time_ns())
        assert total >= 0
        return total

    # loaded before the capture: in the runtime's totals, never seen by usage type
    before = mem(0, "model_code", 96 * MIB)
    calls = [
        (0, "tensors", 4 * MIB),
        (0, "scratchpad", 32 * MIB),
        (1, "tensors", MIB),
        (0, "tensors", 2 * MIB),
        (0, "tensors", -4 * MIB),
        (0, "scratchpad", -32 * MIB),
    ]
    collectors.set_source(LibnrtSource(SysTrace.load(str(fake_lib))))
    try:
        with profile(activities=[ProfilerActivity.CPU, NEURON]) as prof:
            totals = [(core, mem(core, usage, nbytes)) for core, usage, nbytes in calls]
            torch.ones(4).sum()
    finally:
        collectors.set_source(None)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = load_trace(path)
    counters = _counters(trace)
    for core in (0, 1):
        samples = counters[V.core_hbm_counter_name(core)]
        # one sample per result, adding up to the total the runtime reported after the call
        assert [sum(a.values()) for _, _, a in samples] == [t for c, t in totals if c == core]
        for _, _, args in samples:
            assert list(args) == ["scratchpad", "tensors", UNATTRIBUTED]
    core0 = [a for _, _, a in counters[V.core_hbm_counter_name(0)]]
    assert [a["tensors"] for a in core0] == [4 * MIB, 4 * MIB, 6 * MIB, 2 * MIB, 2 * MIB]
    assert [a["scratchpad"] for a in core0] == [0, 32 * MIB, 32 * MIB, 32 * MIB, 0]
    assert {a[UNATTRIBUTED] for a in core0} == {before}  # what was there before the capture
    assert trace.metadata[V.META_HBM_SOURCES] == dict.fromkeys(
        ["scratchpad", "tensors", UNATTRIBUTED], V.HBM_FROM_RUNTIME
    )
    assert trace.metadata[V.META_SOURCE] == "libnrt"
