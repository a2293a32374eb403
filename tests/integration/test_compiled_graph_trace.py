"""A compiled graph in a torch.profiler trace: one device execution, its ops nested in it on the
compute stream with shares that add up to it, and key_averages giving the compiled region the
execution's device time without counting the nested ops a second time."""

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
from torch.profiler import ProfilerActivity, profile
out = Path(sys.argv[1])

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
"""


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("compiled")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(out)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


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
    assert region and max(rows[k][0] for k in region) >= graph["dur"] * 0.99
