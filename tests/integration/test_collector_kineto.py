"""torch.profiler(activities=[CPU, NEURON]) end to end with a fake device source.

The fake device is a TorchDispatchMode on CPU tensors: every aten op it sees becomes a host runtime
call plus device work in the system-trace format, stamped with the correlation id read from the
C++ bridge at launch (as the emulator does). It remembers everything it emitted, so the tests
compare the exported traces with what the source produced (counts in vs out).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch.profiler import ProfilerActivity, profile, schedule  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from neuron_profiler import collectors, emulator  # noqa: E402
from neuron_profiler.trace import vocabulary as L  # noqa: E402

# In one pytest process the emulator must name PrivateUse1 before NEURON would: its tests
# enable it in-process, and enable() refuses once the backend is named.
emulator.enable(cores=2)
try:
    collectors.require()  # NEURON itself no longer raises when the bridge is missing
    NEURON = collectors.NEURON
except Exception as err:  # noqa: BLE001 - the reason is shown in the skip
    pytest.skip(f"collector unavailable: {err}", allow_module_level=True)

KERNEL_NS, LAUNCH_NS = 2_000, 1_000


class FakeDevice:
    """A Source (sources.Source protocol) fed by FakeMode; ``always`` ignores start/stop."""

    name = "fake"
    links_by_correlation = True

    def __init__(self, always: bool = False) -> None:
        self.always, self.on, self.correlation = always, False, None
        self.pending: list[dict] = []
        self.emitted: list[dict] = []  # one entry per device activity: exec_id, op, step, kind
        self.fallbacks: list[int] = []  # step of each fallback host span
        self.exec_id, self.tracking, self.step, self.starts = 0, 0, -1, 0
        self.queue_free = {0: 0, 1: 0, 2: 0}

    # Source protocol
    def start(self, max_events_per_nc: int, correlation) -> None:
        self.on, self.correlation = True, correlation
        self.starts += 1

    def stop(self) -> bytes:
        self.on = False
        out, self.pending = self.pending, []
        return json.dumps(
            {"events": out, "data_version": 2, "neuron_profiler": {"dropped_events": {"0": 0}}}
        ).encode()

    def device_properties(self) -> list[dict]:
        return [
            {
                "id": 0,
                "name": "NeuronCore 0",
                "chip": "fake",
                "hbm_bytes": 1 << 30,
                "peak_bf16_tflops": 1.0,
                "emulated": True,
            }
        ]

    # the fake device
    def _span(self, etype: str, start: int, stop: int, data: dict, tid: int) -> None:
        self.tracking += 1
        base = {"event_type": etype, "tracking_id": self.tracking, "nc_idx": 0, "thread_id": tid}
        self.pending += [
            {**base, "phase": "start", "timestamp_ns": start, "data": data},
            {**base, "phase": "stop", "timestamp_ns": stop, "data": {}},
        ]

    def _device(
        self, etype: str, queue: int, op: str, corr: int, t: int, tid: int, ext: dict
    ) -> None:
        self.exec_id += 1
        e = self.exec_id
        self._span(
            "nrt_model_submit",
            t,
            t + 200,
            {"exec_id": e, "neuron_profiler": {"op": op, "correlation_id": corr}},
            tid,
        )
        start = max(t + LAUNCH_NS, self.queue_free[queue])
        self.queue_free[queue] = start + KERNEL_NS
        self._span(
            etype,
            start,
            start + KERNEL_NS,
            {
                "exec_id": e,
                "neuron_profiler": {
                    **ext,
                    "op": op,
                    "correlation_id": corr,
                    "launch_ns": t,
                    "modelled": True,
                },
            },
            tid,
        )
        self.emitted.append({"exec_id": e, "op": op, "step": self.step, "type": etype, "tid": tid})

    def launch(self, op: str, numel: int) -> None:
        if not (self.on or self.always):
            return
        corr = self.correlation() if self.on else 0
        t, tid = time.time_ns(), threading.get_native_id()
        if op == "aten::cumsum":  # a CPU fallback with its two copies
            self._device(
                "dmem_buf_copyout", 1, op, corr, t, tid, {"bytes": numel * 4, "direction": "d2h"}
            )
            self._span(
                "neuron_profiler.cpu_fallback",
                t + 300,
                t + 800,
                {
                    "neuron_profiler": {
                        "op": op,
                        "reason": "not supported",
                        "correlation_id": corr,
                        "shapes": [[numel]],
                        "dtypes": ["torch.float32"],
                    }
                },
                tid,
            )
            self.fallbacks.append(self.step)
            self._device(
                "dmem_buf_copyin",
                1,
                op,
                corr,
                t + 900,
                tid,
                {"bytes": numel * 4, "direction": "h2d"},
            )
        elif op == "aten::sum":  # stands in for a collective
            self._device(
                "cc_running",
                2,
                op,
                corr,
                t,
                tid,
                {
                    "collective": "allreduce",
                    "bytes": numel * 4,
                    "ranks": [0, 1],
                    "algorithm": "ring",
                },
            )
        else:
            self._device(
                "nc_exec_running", 0, op, corr, t, tid, {"flops": 2 * numel, "bytes": 8 * numel}
            )


class FakeMode(TorchDispatchMode):
    def __init__(self, dev: FakeDevice) -> None:
        super().__init__()
        self.dev = dev

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func._schema.name.startswith("aten::") and isinstance(out, torch.Tensor):
            self.dev.launch(func._schema.name, out.numel())
        return out


@pytest.fixture()
def dev():
    d = FakeDevice()
    collectors.set_source(d)
    yield d
    collectors.set_source(None)


def _work(x: torch.Tensor) -> None:
    y = torch.mm(x, x).relu()
    y.cumsum(0)
    y.sum()


def _in_mode(dev: FakeDevice, x: torch.Tensor) -> None:
    with FakeMode(dev):  # dispatch modes are per thread
        torch.mm(x, x)


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def _events(trace: dict, cat: str) -> list[dict]:
    return [e for e in trace["traceEvents"] if e.get("cat") == cat and e.get("ph") == "X"]


@pytest.fixture()
def traced(dev: FakeDevice, tmp_path: Path):
    x = torch.randn(16, 16)
    with profile(activities=[ProfilerActivity.CPU, NEURON]) as prof:
        with FakeMode(dev):
            for _ in range(2):
                _work(x)
            worker = threading.Thread(target=_in_mode, args=(dev, x))
            worker.start()
            worker.join()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return prof, _load(path), dev


def test_processes_and_threads_named_and_ordered(traced) -> None:
    _, trace, _ = traced
    meta = [e for e in trace["traceEvents"] if e.get("ph") == "M"]
    pname = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    psort = {e["pid"]: e["args"]["sort_index"] for e in meta if e["name"] == "process_sort_index"}
    assert pname[0] == "NeuronCore 0"
    assert psort[0] > psort[os.getpid()]  # after the host
    tname = {
        e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name" and e["pid"] == 0
    }
    assert [tname[L.queue_stream(0, q)] for q in (0, 1, 2)] == ["compute", "DMA", "collectives"]


def test_every_emitted_activity_appears_once_with_args(traced) -> None:
    _, trace, dev = traced
    device = _events(trace, "kernel") + _events(trace, "gpu_memcpy")
    got = Counter(e["args"]["exec_id"] for e in device)
    assert sorted(got) == [d["exec_id"] for d in dev.emitted] and set(got.values()) == {1}
    for e in device:  # CUDA's shape: device, stream (= tid), correlation shared with the call
        assert e["tid"] == e["args"]["stream"] >= 1 and e["args"]["device"] == e["pid"]
        assert e["args"]["correlation"] >= 0
    for k in (e for e in _events(trace, "kernel") if e["tid"] == L.queue_stream(0, 0)):
        a = k["args"]
        assert (
            a["flops"] > 0
            and a["bytes"] > 0
            and L.kernel_name(a.get("engine"), a["op"]) == k["name"]
        )
        assert k["name"] != a["op"]  # never the aten op's own name
        assert a["achieved TFLOPS"] == pytest.approx(a["flops"] / (k["dur"] * 1e3) / 1e3, rel=1e-3)
        assert a["achieved GB/s"] == pytest.approx(a["bytes"] / (k["dur"] * 1e3), rel=1e-3)
    for d in _events(trace, "gpu_memcpy"):
        assert d["args"]["direction"] in ("d2h", "h2d") and d["tid"] == L.queue_stream(0, 1)
        assert d["name"] == L.MEMCPY_NAMES[d["args"]["direction"]]
        assert d["args"][L.ARG_BANDWIDTH] == pytest.approx(
            d["args"]["bytes"] / (d["dur"] * 1e3), rel=1e-3
        )
    cc = [e for e in _events(trace, "kernel") if e["tid"] == L.queue_stream(0, 2)]
    assert len(cc) == 2 and all(e["args"][L.ARG_COLLECTIVE] == "allreduce" for e in cc)
    assert all(
        e["args"][L.ARG_GROUP_RANKS] == [0, 1] and e["args"]["algorithm"] == "ring" for e in cc
    )


def test_device_work_linked_to_launching_aten_op(traced) -> None:
    """Every device activity launched on a profiled thread names its aten op (External id).
    The worker thread is not profiled by torch (no cpu_op, no correlation): left unlinked."""
    _, trace, dev = traced
    ops = {e["args"]["External id"]: e for e in _events(trace, "cpu_op")}
    device = _events(trace, "kernel") + _events(trace, "gpu_memcpy")
    op_of = {d["exec_id"]: d["op"] for d in dev.emitted}
    profiled = {e["tid"] for e in _events(trace, "cpu_op")}
    tid_of = {d["exec_id"]: d["tid"] for d in dev.emitted}
    assert [tid_of[e["args"]["exec_id"]] in profiled for e in device].count(False) == 1
    for e in device:
        if tid_of[e["args"]["exec_id"]] not in profiled:
            assert "External id" not in e["args"]
            continue
        launcher = ops[e["args"]["External id"]]
        assert launcher["name"] == op_of[e["args"]["exec_id"]]
        assert launcher["ts"] <= e["ts"]


def test_runtime_calls_on_launching_thread_with_flows(traced) -> None:
    _, trace, dev = traced
    calls = _events(trace, "privateuse1_runtime")
    assert {e["tid"] for e in _events(trace, "cpu_op")} == {threading.get_native_id()}
    assert {c["pid"] for c in calls} == {os.getpid()}
    assert {c["tid"] for c in calls} == {d["tid"] for d in dev.emitted}  # main + worker
    flows = [e for e in trace["traceEvents"] if e.get("cat") == "ac2g"]
    starts = {f["id"]: f for f in flows if f["ph"] == "s"}
    ends = {f["id"]: f for f in flows if f["ph"] == "f"}
    launches = [c for c in calls if c["name"].startswith(L.RUNTIME_PREFIX)]
    assert set(starts) == set(ends) and len(starts) == len(launches)
    assert all(ends[i]["pid"] == 0 and ends[i]["bp"] == "e" for i in ends)


def test_fallback_recognisable_with_its_copies(traced) -> None:
    _, trace, _ = traced
    fb = [
        e
        for e in _events(trace, "privateuse1_runtime")
        if e["name"] == L.FALLBACK_PREFIX + "aten::cumsum"
    ]
    assert len(fb) == 2 and all(e["args"]["fallback reason"] == "not supported" for e in fb)
    for f in fb:
        copies = [
            d
            for d in _events(trace, "gpu_memcpy")
            if d["args"]["External id"] == f["args"]["External id"]
        ]
        assert sorted(d["args"]["direction"] for d in copies) == ["d2h", "h2d"]


def test_trace_metadata_and_device_properties(traced) -> None:
    _, trace, _ = traced
    assert [p["name"] for p in trace["deviceProperties"]] == ["NeuronCore 0"]
    assert trace["deviceProperties"][0]["emulated"] is True
    assert trace[L.META_DROPPED] == {"0": 0} and trace[L.META_EXCLUDED] == 0
    assert trace[L.META_SOURCE] == "fake"


def test_key_averages_counts_device_time(traced) -> None:
    prof, trace, _ = traced
    table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=20)
    assert "NEURON" in table
    from torch.autograd import DeviceType

    (op,) = [
        e for e in prof.key_averages() if e.key == "aten::sum" and e.device_type == DeviceType.CPU
    ]
    kernel_us = sum(
        e["dur"] for e in _events(trace, "kernel") if e["args"].get("op") == "aten::sum"
    )
    assert kernel_us > 0 and op.device_time_total == pytest.approx(kernel_us, rel=0.01)
    assert op.self_cpu_time_total < op.cpu_time_total + kernel_us  # not counted as CPU time


def test_key_averages_one_row_per_name_kernels_hold_self_device_time(traced) -> None:
    """Kernels never share a name with their aten op: one row per op name and per kernel name,
    and Self NEURON % over the kernel rows adds up to 100%."""
    prof, trace, _ = traced
    averages = prof.key_averages()
    keys = [e.key for e in averages]
    assert len(keys) == len(set(keys))
    device_names = {e["name"] for cat in ("kernel", "gpu_memcpy") for e in _events(trace, cat)}
    kernel_rows = [e for e in averages if e.key in device_names]
    assert {e.key for e in kernel_rows} == device_names
    device_us = sum(e["dur"] for cat in ("kernel", "gpu_memcpy") for e in _events(trace, cat))
    assert device_us > 0
    assert sum(e.self_device_time_total for e in kernel_rows) == pytest.approx(device_us, rel=0.01)
    table = averages.table(sort_by="self_device_time_total", row_limit=-1)
    rows = [
        re.split(r"\s{2,}", line.strip())
        for line in table.splitlines()
        if line.strip() and not line.startswith("-")
    ]
    col = rows[0].index("Self NEURON %")
    percent = {r[0]: float(r[col].rstrip("%")) for r in rows[1:] if len(r) == len(rows[0])}
    shown = sum(percent[k] for k in device_names)
    assert shown == pytest.approx(100.0, abs=1.0)


def test_cpu_only_profile_unaffected(dev: FakeDevice, tmp_path: Path) -> None:
    x = torch.randn(8, 8)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with FakeMode(dev):
            _work(x)
    path = tmp_path / "cpu.json"
    prof.export_chrome_trace(str(path))
    trace = _load(path)
    assert dev.starts == 0
    assert not [e for e in trace["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy")]
    assert not any(k.startswith("neuron_") for k in trace)
    assert "NEURON" not in prof.key_averages().table()


def test_schedule_cycles_each_complete_nothing_lost_or_duplicated(tmp_path: Path) -> None:
    dev = FakeDevice(always=True)  # also emits outside the active window: must be excluded
    collectors.set_source(dev)
    traces: list[dict] = []

    def ready(p) -> None:
        path = tmp_path / f"cycle{len(traces)}.json"
        p.export_chrome_trace(str(path))
        traces.append(_load(path))

    x = torch.randn(8, 8)
    sched = schedule(wait=1, warmup=1, active=2, repeat=2)
    try:
        with profile(
            activities=[ProfilerActivity.CPU, NEURON], schedule=sched, on_trace_ready=ready
        ) as prof:
            with FakeMode(dev):
                for step in range(9):
                    dev.step = step
                    _work(x)
                    prof.step()
    finally:
        collectors.set_source(None)
    active = [{2, 3}, {6, 7}]  # wait=1, warmup=1, active=2 per cycle
    assert len(traces) == 2
    previous_fetch_end = -1
    for trace, steps in zip(traces, active, strict=True):
        device = _events(trace, "kernel") + _events(trace, "gpu_memcpy")
        got = Counter(e["args"]["exec_id"] for e in device)
        want = [d["exec_id"] for d in dev.emitted if d["step"] in steps]
        assert sorted(got) == sorted(want) and set(got.values()) == {1}
        # everything emitted since the previous fetch but outside the window was counted
        outside = [
            d
            for d in dev.emitted
            if previous_fetch_end < d["step"] <= max(steps) and d["step"] not in steps
        ]
        fallbacks = [
            s for s in dev.fallbacks if previous_fetch_end < s <= max(steps) and s not in steps
        ]
        # each device activity comes with its runtime call; fallbacks are one host span
        assert trace[L.META_EXCLUDED] == 2 * len(outside) + len(fallbacks) > 0
        assert {p["name"] for p in trace["deviceProperties"]} == {"NeuronCore 0"}
        previous_fetch_end = max(steps)


def test_tensorboard_handler_writes_same_structure(dev: FakeDevice, tmp_path: Path) -> None:
    from torch.profiler import tensorboard_trace_handler

    x = torch.randn(8, 8)
    with profile(
        activities=[ProfilerActivity.CPU, NEURON],
        on_trace_ready=tensorboard_trace_handler(str(tmp_path), worker_name="w0"),
    ):
        with FakeMode(dev):
            _work(x)
    files = list(tmp_path.glob("w0*.pt.trace.json*"))
    assert len(files) == 1
    trace = _load(files[0])
    got = Counter(
        e["args"]["exec_id"] for e in _events(trace, "kernel") + _events(trace, "gpu_memcpy")
    )
    assert sorted(got) == [d["exec_id"] for d in dev.emitted] and set(got.values()) == {1}


class _BrokenSource(FakeDevice):
    def stop(self) -> bytes:
        return b"{not json"


def test_broken_source_warns_and_trace_still_written(tmp_path: Path) -> None:
    collectors.set_source(_BrokenSource())
    try:
        with pytest.warns(UserWarning, match="neuron collector stop: .*broken|not a system-trace"):
            with profile(activities=[ProfilerActivity.CPU, NEURON]) as prof:
                torch.mm(torch.ones(4, 4), torch.ones(4, 4))
    finally:
        collectors.set_source(None)
    path = tmp_path / "t.json"
    prof.export_chrome_trace(str(path))
    trace = _load(path)
    assert "not a system-trace JSON envelope" in trace["neuron_collector_error"]
    assert [e for e in _events(trace, "cpu_op") if e["name"] == "aten::mm"]
