"""CPU fallback: results equal CPU (in-place, out=, views), copies recorded as DMA, the fallback
recorded with op, shapes, dtypes and reason; the set is extendable by API and env var."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import neuron_profiler.emulator as emu  # noqa: E402
from neuron_profiler.emulator import fallback  # noqa: E402
from neuron_profiler.emulator.runtime import get_runtime  # noqa: E402
from neuron_profiler.runtime_trace import format as F  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.fixture(autouse=True)
def _device():
    emu.enable(cores=2)
    yield
    rt = get_runtime()
    if rt.capturing:
        rt.sys_trace_stop()
    emu.reset_fallback_ops()


def _capture(fn):
    rt = get_runtime()
    rt.sys_trace_start()
    try:
        result = fn()
    finally:
        rt.sys_trace_stop()
    events = [e for e in json.loads(rt.sys_trace_fetch())["events"] if e["phase"] != F.STOP]
    return result, events


def _of(events: list[dict], event_type: str) -> list[dict]:
    return [e["data"].get(F.EXT_KEY, e["data"]) for e in events if e["event_type"] == event_type]


def test_default_set_has_a_dynamic_shape_op_and_records_everything() -> None:
    assert "aten::nonzero" in emu.fallback_ops()
    x = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, 3.0]])
    d = x.to("neuron")
    out, events = _capture(lambda: torch.nonzero(d))
    assert out.device.type == "neuron" and torch.equal(out.cpu(), torch.nonzero(x))
    (fb,) = _of(events, F.EXT_FALLBACK)
    assert fb[F.X_OP] == "aten::nonzero" and fb[F.X_REASON] == fallback.REASON_UNSUPPORTED
    assert fb[F.X_SHAPES] == [[2, 3]] and fb[F.X_DTYPES] == ["float32"]
    (d2h,) = _of(events, F.DMEM_BUF_COPYOUT)
    (h2d,) = _of(events, F.DMEM_BUF_COPYIN)
    assert d2h[F.X_BYTES] == x.numel() * 4 and d2h[F.X_DIRECTION] == F.D2H
    assert h2d[F.X_BYTES] == torch.nonzero(x).numel() * 8 and h2d[F.X_DIRECTION] == F.H2D
    assert [s[F.X_SYNC_REASON] for s in _of(events, F.EXT_HOST_SYNC)] == ["fallback"]
    assert "aten::nonzero" in emu.get_fallback_ops()
    assert not _of(events, F.NC_EXEC_RUNNING)  # it did not also run on the device


def test_float64_falls_back_with_dtype_reason() -> None:
    x = torch.randn(5, dtype=torch.float64)
    d = x.to("neuron")
    out, events = _capture(lambda: (d * 3).sin())
    assert out.dtype == torch.float64 and torch.equal(out.cpu(), (x * 3).sin())
    reasons = {f[F.X_OP]: f[F.X_REASON] for f in _of(events, F.EXT_FALLBACK)}
    assert reasons == {"aten::mul": fallback.REASON_FLOAT64, "aten::sin": fallback.REASON_FLOAT64}


def test_in_place_out_and_view_writes_come_back() -> None:
    emu.add_fallback_ops("add", "aten::mul")  # short and qualified names
    a_cpu, b_cpu = torch.randn(3, 4), torch.randn(3, 4)
    a, b = a_cpu.to("neuron"), b_cpu.to("neuron")
    ret, events = _capture(lambda: a.add_(b))
    assert ret is a and torch.equal(a.cpu(), a_cpu + b_cpu)
    (h2d,) = _of(events, F.DMEM_BUF_COPYIN)  # the mutated input is written back, nothing else
    assert h2d[F.X_BYTES] == 48 and len(_of(events, F.DMEM_BUF_COPYOUT)) == 2
    out = torch.empty(0, device="neuron")  # wrong shape: out= resizes it
    ret = torch.mul(a, b, out=out)
    assert ret is out and out.shape == (3, 4) and torch.equal(out.cpu(), (a_cpu + b_cpu) * b_cpu)
    row = a[1]
    row.add_(b[1])  # in place on a view: the base sees it
    expected = a_cpu + b_cpu
    expected[1] += b_cpu[1]
    assert torch.equal(a.cpu(), expected)
    assert {"aten::add_", "aten::mul"} <= emu.get_fallback_ops()
    emu.remove_fallback_ops("add")
    _, events = _capture(lambda: a + b)
    assert not _of(events, F.EXT_FALLBACK) and len(_of(events, F.NC_EXEC_RUNNING)) == 1


def test_env_var_extends_the_set() -> None:
    code = (
        "import torch, neuron_profiler.emulator as emu\n"
        "emu.enable(cores=1)\n"
        "x = torch.arange(5.0, device='neuron').cumsum(0)\n"
        "print(sorted(emu.get_fallback_ops()), x.cpu().tolist())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != emu.ENV_EMULATE}
    env[fallback.ENV_VAR] = "cumsum, aten::flip"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=120,
    )
    assert out.stdout.strip() == "['aten::cumsum'] [0.0, 1.0, 3.0, 6.0, 10.0]"
