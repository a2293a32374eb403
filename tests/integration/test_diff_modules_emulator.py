"""``neuron-prof diff --by module`` of one small nn model trained with torch.profiler's
``with_stack=True, with_modules=True``, on the CPU (A) and on the emulated neuron device (B):
the module rows are the model's leaf modules, named as torch names module instances
(``<Class>_<k>``, k counting that class's instances) and matched by path on both sides; the
backward ops (outside any forward call) keep their op rows; the invariant holds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from neuron_profiler.analysis.diff import COMPONENTS, MODULE, diff  # noqa: E402
from neuron_profiler.cli.main import main  # noqa: E402
from neuron_profiler.trace import load_trace  # noqa: E402

SCRIPT = r"""
import sys
import torch
device = sys.argv[2]
acts = [torch.profiler.ProfilerActivity.CPU]
if device == "neuron":
    from neuron_profiler import emulator
    emulator.enable(cores=1, chip="trn2", speed_factor=1.0)
    from neuron_profiler import NEURON
    acts.append(NEURON)
from torch.profiler import profile, schedule

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.act = torch.nn.Linear(32, 32), torch.nn.ReLU()
    def forward(self, x):
        return self.act(self.fc(x))

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(Block(), Block())
        self.head = torch.nn.Linear(32, 4)
    def forward(self, x):
        return self.head(self.layers(x))

torch.manual_seed(0)
dev = torch.device(device)
model = Net().to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with profile(activities=acts, with_stack=True, with_modules=True,
             schedule=schedule(wait=0, warmup=1, active=3),
             on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[1])) as p:
    for i in range(4):
        loss = model(torch.randn(8, 32).to(dev)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()
        p.step()
"""
# the leaf modules in forward order, as torch names them (by hand from Net above)
LEAVES = {
    "Net_0.Sequential_0.Block_0.Linear_0",
    "Net_0.Sequential_0.Block_0.ReLU_0",
    "Net_0.Sequential_0.Block_1.Linear_1",
    "Net_0.Sequential_0.Block_1.ReLU_1",
    "Net_0.Linear_2",
}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("diff_modules")
    paths = out / "cpu.json", out / "neuron.json"
    for path, device in zip(paths, ("cpu", "neuron"), strict=True):
        proc = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(path), device],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
    return paths


@pytest.fixture(scope="module")
def d(files):  # noqa: ANN001, ANN201
    return diff(load_trace(files[0]), load_trace(files[1]), group_by="module")


def test_module_rows_are_the_leaf_modules_matched_by_path(d) -> None:  # noqa: ANN001
    modules = {r.key: r for r in d.rows if r.kind == MODULE}
    assert set(modules) == LEAVES
    device = COMPONENTS.index("device")
    for key, row in modules.items():
        assert row.notes == () and row.a_ops >= 1 and row.b_ops >= 1, key
        assert row.a_ms > 0 and row.b_parts_ms[device] > 0, key  # B's device ran its work


def test_backward_keeps_op_rows_and_the_invariant_holds(d) -> None:  # noqa: ANN001
    kinds = {r.kind for r in d.rows}
    assert "op" in kinds and any(r.key.startswith("backward › ") for r in d.rows)
    assert not any(r.key.startswith("forward › aten::linear") for r in d.rows)
    assert abs(d.residual_ms) <= 0.01 * max(d.a.step_ms, d.b.step_ms)
    assert sum(r.delta_ms for r in d.rows) + d.residual_ms == pytest.approx(d.delta_ms)
    by_op = diff(load_trace(d.a.source), load_trace(d.b.source))
    assert by_op.delta_ms == d.delta_ms  # the same steps, grouped otherwise
    assert sum(r.delta_ms for r in d.rows) == pytest.approx(sum(r.delta_ms for r in by_op.rows))


def test_cli_by_module(files, d, capsys) -> None:  # noqa: ANN001
    assert main(["diff", "--by", "module", "--top", "50", "--json", *map(str, files)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["group_by"] == "module"
    shown = {r["key"] for r in doc["rows"] if r["kind"] == "module"}  # (small ones folded)
    assert shown and shown == {r.key for r in d.folded(top=50) if r.kind == MODULE} <= LEAVES
    # the terminal shows the module rows the JSON shows (the same fold: under DISPLAY_SHARE of
    # a step a row folds into "other" whatever --top says, so which leaves are shown depends on
    # the run's timings: Linear_2 folded in two CI runs)
    assert main(["diff", "--by", "module", "--top", "50", *map(str, files)]) == 0
    out = capsys.readouterr().out
    assert "rows by module" in out and all(key in out for key in shown), (shown, out)
