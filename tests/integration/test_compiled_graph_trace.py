"""A compiled graph in a torch.profiler trace: one device execution, its ops nested in it on the
compute stream with shares that add up to it, and key_averages giving the compiled region the
execution's device time without counting the nested ops a second time (with the project's
backend and with the default Inductor one, forward and backward)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from neuron_profiler.trace import vocabulary as V  # noqa: E402

SCRIPT = r"""
import json, sys
from pathlib import Path
import torch
from neuron_profiler import emulator
emulator.enable(cores=1, numerics=False)
from neuron_profiler import NEURON
from torch.profiler import ProfilerActivity, profile, schedule
STEPS = int(sys.argv[2])


def graph(out):
    def f(x, w):
        return (x @ w).sin().cos().exp()

    fast = torch.compile(f, backend="neuron")
    x, w = torch.randn(512, 512).to("neuron"), torch.randn(512, 512).to("neuron")
    fast(x, w)  # compile outside the profile
    torch.neuron.synchronize()
    with profile(activities=[ProfilerActivity.CPU, NEURON]) as p:
        fast(x, w)
        torch.neuron.synchronize()
    p.export_chrome_trace(str(out / "trace.json"))
    rows = {e.key: [e.device_time_total, e.self_device_time_total, bool(e.is_user_annotation)]
            for e in p.key_averages()}
    (out / "averages.json").write_text(json.dumps(rows))


def train(out, backend):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)
    ).to("neuron")
    fast = torch.compile(model, **({} if backend == "inductor" else {"backend": backend}))
    x = torch.randn(128, 256).to("neuron")

    def step():
        fast(x).square().mean().backward()
        torch.neuron.synchronize()

    step()  # compile outside the profile

    def ready(p):
        p.export_chrome_trace(str(out / "trace.json"))
        rows = [
            {"key": e.key, "self": e.self_device_time_total,
             "op": e.device_type == torch.autograd.DeviceType.CPU,
             "annotation": bool(e.is_user_annotation)}
            for e in p.key_averages()
        ]
        (out / "averages.json").write_text(json.dumps(rows))

    with profile(
        activities=[ProfilerActivity.CPU, NEURON],
        schedule=schedule(wait=0, warmup=1, active=STEPS, repeat=1),
        on_trace_ready=ready,
    ) as p:
        for _ in range(1 + STEPS):
            step()
            p.step()


# one process for the three runs (each profile is a session of its own, each compiled function
# a graph of its own): a process per run cost a torch start-up each, ~4 s
out = Path(sys.argv[1])
graph(out / "graph")
for backend in BACKENDS:
    torch._dynamo.reset()
    train(out / backend, backend)
"""
STEPS = 2
BACKENDS = ("neuron", "inductor")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A compiled function profiled once (``graph/``), and two profiled training steps (forward
    and backward graphs) compiled with each backend (``neuron/``, ``inductor/``)."""
    out = tmp_path_factory.mktemp("compiled")
    for name in ("graph", *BACKENDS):
        (out / name).mkdir()
    script = SCRIPT.replace("BACKENDS", repr(BACKENDS))
    proc = subprocess.run(
        [sys.executable, "-c", script, str(out), str(STEPS)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture
def profiled(runs: Path) -> Path:
    return runs / "graph"


@pytest.fixture(params=BACKENDS)
def trained(request: pytest.FixtureRequest, runs: Path) -> Path:
    return runs / request.param


def test_graph_ops_are_nested_in_their_execution(profiled: Path) -> None:
    events = json.loads((profiled / "trace.json").read_text())["traceEvents"]
    graphs = [
        e
        for e in events
        if e.get("cat") == V.CAT_KERNEL
        and e.get("ph") == "X"
        and V.ARG_GRAPH_ID in e.get("args", {})
    ]
    assert len(graphs) == 1
    g = graphs[0]
    ops = [e for e in events if e.get("cat") == V.CAT_GRAPH_OP and e.get("ph") == "X"]
    assert [o["args"][V.ARG_OP] for o in ops] == ["aten::mm", "aten::sin", "aten::cos", "aten::exp"]
    for o in ops:
        assert (o["pid"], o["tid"]) == (g["pid"], g["tid"])
        assert o["args"][V.ARG_GRAPH_ID] == g["args"][V.ARG_GRAPH_ID]
        assert V.ARG_STREAM not in o["args"]  # not device work of its own
        # Kineto widens each nested range by 1 ns a side; ts near 5e12 µs carry float error
        assert g["ts"] - 3e-3 <= o["ts"] and o["ts"] + o["dur"] <= g["ts"] + g["dur"] + 3e-3
    # the shares fill the execution (Kineto widens each gpu_user_annotation by 1 ns a side)
    assert sum(o["dur"] for o in ops) == pytest.approx(g["dur"], abs=3e-3 * len(ops))


def test_key_averages_counts_the_execution_once(profiled: Path) -> None:
    rows = json.loads((profiled / "averages.json").read_text())
    events = json.loads((profiled / "trace.json").read_text())["traceEvents"]
    graph = next(
        e for e in events if e.get("cat") == V.CAT_KERNEL and V.ARG_GRAPH_ID in e.get("args", {})
    )
    total, self_time, annotation = rows[graph["name"]]
    assert self_time == pytest.approx(graph["dur"], rel=0.01) and not annotation
    nested = [k for k, v in rows.items() if v[2]]  # the ops inside: user annotations
    assert len(nested) == 4
    region = [k for k in rows if "Compiled" in k and rows[k][0] > 0]
    assert region and max(rows[k][0] for k in region) == pytest.approx(graph["dur"], rel=0.01)


def test_self_device_time_counts_each_device_microsecond_once(trained: Path) -> None:
    """Summed over the ops, Self NEURON equals the device work in the trace, and each compiled
    function's equals its graph's executions (it was twice that with the nested ops linked)."""
    rows = json.loads((trained / "averages.json").read_text())
    events = json.loads((trained / "trace.json").read_text())["traceEvents"]
    work = [
        e for e in events if e.get("ph") == "X" and e.get("cat") in (V.CAT_KERNEL, V.CAT_MEMCPY)
    ]
    graphs = [e for e in work if V.ARG_GRAPH_ID in e["args"]]
    assert len(graphs) == 2 * STEPS  # a forward and a backward execution per step
    rounding = 1e-3 * len(work)  # the trace's durations are rounded to the ns
    per_step = sum(e["dur"] for e in work) / STEPS
    ops_self = sum(r["self"] for r in rows if r["op"]) / STEPS
    assert ops_self == pytest.approx(per_step, abs=rounding)
    device_self = sum(r["self"] for r in rows if not r["op"] and not r["annotation"]) / STEPS
    assert device_self == pytest.approx(per_step, abs=rounding)
    by_key = {r["key"]: r["self"] for r in rows}
    for kind, fn in (("(forward)", "CompiledFunction"), ("(backward)", "CompiledFunctionBackward")):
        truth = sum(e["dur"] for e in graphs if e["name"].endswith(kind))
        assert truth > 0 and by_key[fn] == pytest.approx(truth, abs=rounding)
