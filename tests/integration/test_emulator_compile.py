"""torch.compile on the emulated device (issue 15): every built-in backend runs on neuron tensors
with eager's results and recorded device activity; ``backend="neuron"`` and the default backend
give one device execution per call of a compiled graph, whose modelled time is a roofline over
its ops with pointwise chains fused; the ops' shares add up to the execution's duration."""

from __future__ import annotations

import copy
import json

import pytest

torch = pytest.importorskip("torch")

import neuron_profiler.emulator as emu  # noqa: E402
from neuron_profiler.errors import EmulatorError  # noqa: E402

pytestmark = pytest.mark.torch
F = torch.nn.functional


@pytest.fixture(autouse=True)
def _device():
    emu.enable(cores=1)
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _rt():
    from neuron_profiler.emulator.runtime import get_runtime

    return get_runtime()


class _Capture:
    """The emulated runtime's events of the block (started and fetched here)."""

    def __enter__(self):
        rt = _rt()
        rt.sys_trace_start()
        self.events = []
        return self

    def __exit__(self, *exc):
        rt = _rt()
        rt.sys_trace_stop()
        self.events = json.loads(rt.sys_trace_fetch())["events"]

    def starts(self, event_type):
        return [e for e in self.events if e["event_type"] == event_type and e["phase"] == "start"]

    def executions(self):
        return self.starts("nc_exec_running")

    def graph_executions(self):
        return [e for e in self.executions() if "graph_id" in e["data"]["neuron_profiler"]]


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor", "neuron"])
def test_every_backend_runs_with_eager_results_and_device_activity(backend) -> None:
    model = _mlp().to("neuron")
    x = torch.randn(8, 16).to("neuron")
    ref = model(x).cpu()
    fast = torch.compile(model, backend=backend)
    fast(x)  # compile
    with _Capture() as cap:
        out = fast(x).cpu()
    torch.testing.assert_close(out, ref)
    assert cap.executions(), "no device activity recorded"
    if backend in ("eager", "aot_eager"):  # the graph's ops run one by one: one execution each
        assert [e["data"]["neuron_profiler"]["op"] for e in cap.executions()] == [
            "aten::addmm", "aten::relu", "aten::addmm"]
    else:  # one execution of the compiled (inference) graph
        assert len(cap.executions()) == 1 and len(cap.graph_executions()) == 1


def test_reduce_overhead_is_refused_with_a_clear_message() -> None:
    model = _mlp().to("neuron")
    with pytest.raises(Exception, match="reduce-overhead") as err:
        torch.compile(model, mode="reduce-overhead")(torch.randn(8, 16).to("neuron"))
    cause = err.value
    while cause is not None and not isinstance(cause, EmulatorError):
        cause = cause.__cause__ or cause.__context__
    assert isinstance(cause, EmulatorError)


@pytest.mark.parametrize("backend", ["neuron", None])
def test_one_execution_per_forward_and_backward_call(backend) -> None:
    model = _mlp().to("neuron")
    ref_model = copy.deepcopy(model)
    fast = torch.compile(model, **({} if backend is None else {"backend": backend}))
    x = torch.randn(8, 16).to("neuron")
    fast(x).sum().backward()  # compile forward and backward
    model.zero_grad()
    with _Capture() as cap:
        for _ in range(3):
            fast(x).sum().backward()
    graphs = cap.graph_executions()
    kinds = [e["data"]["neuron_profiler"]["op"].split(" ")[1] for e in graphs]
    assert kinds == ["(forward)", "(backward)"] * 3
    ids = {e["data"]["neuron_profiler"]["graph_id"] for e in graphs}
    assert len(ids) == 2
    # each execution is launched by one runtime call
    calls = [c for c in cap.starts("nrt_model_submit")
             if c["data"]["neuron_profiler"]["exec_id"] in {e["data"]["exec_id"] for e in graphs}]
    assert len(calls) == len(graphs)
    # gradients equal eager's
    ref_model(x).sum().backward()
    for p, q in zip(model.parameters(), ref_model.parameters(), strict=True):
        torch.testing.assert_close(p.grad.cpu(), 3 * q.grad.cpu())


def test_pointwise_chain_is_charged_one_read_and_one_write() -> None:
    n = 4096
    x = torch.randn(n, n).to("neuron")
    f = torch.compile(lambda t: t.sin().cos().exp(), backend="neuron")
    f(x)
    with _Capture() as cap:
        y = f(x)
    torch.testing.assert_close(y.cpu(), x.cpu().sin().cos().exp())
    (ex,) = cap.graph_executions()
    ext = ex["data"]["neuron_profiler"]
    assert ext["bytes"] == 2 * n * n * 4  # one fp32 read, one fp32 write
    assert [o["op"] for o in ext["graph_ops"]] == ["aten::sin", "aten::cos", "aten::exp"]
    # roofline of the fused chain: 1 + 1 + 4 flops per element (costs.py), one read, one write
    rt = _rt()
    hbm, vector = rt.chip.hbm_bytes_per_s(), rt.chip.vector_flops_per_s()
    assert ext["flops"] == 6 * n * n
    stop = next(e for e in cap.events if e["event_type"] == "nc_exec_running"
                and e["phase"] == "stop" and e["tracking_id"] == ex["tracking_id"])
    dur = stop["data"]["nc_timestamp_ns"] - ex["data"]["nc_timestamp_ns"]
    expected = max(6 * n * n / vector, 2 * n * n * 4 / hbm) * 1e9 + rt.chip.kernel_fixed_ns
    assert dur == pytest.approx(expected, abs=5)
    # eager pays a read and a write per op
    with _Capture() as cap:
        x.sin().cos().exp()
    assert sum(e["data"]["neuron_profiler"]["bytes"] for e in cap.executions()) == 6 * n * n * 4


def test_op_shares_add_up_exactly_to_the_execution() -> None:
    model = _mlp().to("neuron")
    fast = torch.compile(model, backend="neuron")
    x = torch.randn(64, 16).to("neuron")
    fast(x).sum().backward()
    with _Capture() as cap:
        fast(x).sum().backward()
    stops = {e["tracking_id"]: e for e in cap.events
             if e["event_type"] == "nc_exec_running" and e["phase"] == "stop"}
    for ex in cap.graph_executions():
        ops = ex["data"]["neuron_profiler"]["graph_ops"]
        dur = stops[ex["tracking_id"]]["data"]["nc_timestamp_ns"] - ex["data"]["nc_timestamp_ns"]
        assert ops and sum(o["duration_ns"] for o in ops) == dur
        offsets = [o["offset_ns"] for o in ops]
        assert offsets == sorted(offsets) and offsets[0] == 0
        assert {o["op"] for o in ops} >= ({"aten::mm"} if "backward" in
                                          ex["data"]["neuron_profiler"]["op"] else {"aten::addmm"})


def test_compile_time_is_host_time_not_device_time() -> None:
    model = _mlp().to("neuron")
    x = torch.randn(8, 16).to("neuron")
    fast = torch.compile(model, backend="neuron")
    with _Capture() as cap:
        fast(x)  # compiles (seconds of host time), then one execution
    (ex,) = cap.executions()
    stop = next(e for e in cap.events if e["event_type"] == "nc_exec_running"
                and e["phase"] == "stop")
    assert stop["data"]["nc_timestamp_ns"] - ex["data"]["nc_timestamp_ns"] < 100_000
