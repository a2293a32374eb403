"""The real-runtime path live: libnrt (tests/fake_libnrt) under torch.profiler, linked by the
C++ correlation stack's (thread, id, push, pop) intervals, since the runtime knows no torch ids."""

from __future__ import annotations

import ctypes
import json
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch.profiler import ProfilerActivity, profile  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from neuron_profiler import collectors, emulator  # noqa: E402
from neuron_profiler.collectors.libnrt import SysTrace  # noqa: E402
from neuron_profiler.collectors.sources import LibnrtSource  # noqa: E402

FAKE_SRC = Path(__file__).resolve().parents[1] / "fake_libnrt" / "fake_libnrt.c"

# In one pytest process the emulator must name PrivateUse1 before NEURON would: its tests
# enable it in-process, and enable() refuses once the backend is named.
emulator.enable(cores=2)
try:
    collectors.require()  # NEURON itself no longer raises when the bridge is missing
    NEURON = collectors.NEURON
except Exception as err:  # noqa: BLE001 - the reason is shown in the skip
    pytest.skip(f"collector unavailable: {err}", allow_module_level=True)


@pytest.fixture(scope="module")
def lib_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc not found: cannot build tests/fake_libnrt")
    out = tmp_path_factory.mktemp("fake_libnrt_live") / "libnrt_fake.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(out), str(FAKE_SRC)], check=True)
    return out


class RuntimeMode(TorchDispatchMode):
    """Each aten op calls the 'runtime' (nrt_execute on this thread, inside the op) which runs
    one kernel; the JSON carries exec ids only, as the real runtime's does."""

    def __init__(self, ctl: ctypes.CDLL) -> None:
        super().__init__()
        self.ctl, self.exec_id, self.ops = ctl, 0, {}

    def _rec(self, etype: str, phase: str, tracking: int, ts: int, data: dict) -> None:
        ev = {
            "event_type": etype,
            "phase": phase,
            "tracking_id": tracking,
            "nc_idx": 0,
            "thread_id": threading.get_native_id(),
            "timestamp_ns": ts,
            "data": data,
        }
        self.ctl.fake_nrt_record(0, etype.encode(), json.dumps(ev).encode())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.exec_id += 1
        e = self.exec_id
        self.ops[e] = func._schema.name
        t0 = time.time_ns()
        self._rec("nrt_execute", "start", 2 * e, t0, {"exec_id": e})
        self._rec("nrt_execute", "stop", 2 * e, time.time_ns(), {"exec_id": e})
        self._rec("nc_exec_running", "start", 2 * e + 1, t0 + 5_000, {"exec_id": e})
        self._rec("nc_exec_running", "stop", 2 * e + 1, t0 + 9_000, {"exec_id": e})
        return out


def test_device_work_linked_by_containment(lib_path: Path, tmp_path: Path) -> None:
    ctl = ctypes.CDLL(str(lib_path))
    ctl.fake_nrt_record.argtypes = [ctypes.c_uint32, ctypes.c_char_p, ctypes.c_char_p]
    collectors.set_source(LibnrtSource(SysTrace.load(str(lib_path))))
    mode = RuntimeMode(ctl)
    x = torch.randn(8, 8)
    try:
        with profile(activities=[ProfilerActivity.CPU, NEURON]) as prof:
            with mode:
                torch.mm(x, x).relu().sum()
    finally:
        collectors.set_source(None)
    path = tmp_path / "t.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    ops = {
        e["args"]["External id"]: e["name"]
        for e in trace["traceEvents"]
        if e.get("cat") == "cpu_op"
    }
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    calls = [e for e in trace["traceEvents"] if e.get("cat") == "privateuse1_runtime"]
    assert sorted(k["args"]["exec_id"] for k in kernels) == sorted(mode.ops)
    for k in kernels + calls:
        assert ops[k["args"]["External id"]] == mode.ops[k["args"]["exec_id"]]
    assert trace["neuron_source"] == "libnrt"
    assert [p["emulated"] for p in trace["deviceProperties"]] == [False]
