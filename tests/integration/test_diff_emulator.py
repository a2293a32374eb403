"""``neuron-prof diff`` of one training script run twice: on the CPU (A: no device, the host is
the device) and on the emulated neuron device (B). The fallback op (bincount, run on the host by
the device) is a mapped row marked as a fallback on B, the optimizer's ``_foreach_add_`` on
neuron matches the CPU's per-parameter ``add_`` loop, every busy ms of B is in the rows and
the invariant holds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from neuron_profiler.analysis import analyze  # noqa: E402
from neuron_profiler.analysis.diff import COMPONENTS, diff  # noqa: E402
from neuron_profiler.cli.main import main  # noqa: E402
from neuron_profiler.trace import load_trace  # noqa: E402

PARAMETERS = 4  # two Linear layers: weight and bias each
SCRIPT = r"""
import sys
import torch


def run(path, device):
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device == "neuron":
        from neuron_profiler import emulator
        emulator.enable(cores=1, chip="trn2", speed_factor=1.0)
        from neuron_profiler import NEURON
        acts.append(NEURON)
    from torch.profiler import profile, schedule
    torch.manual_seed(0)
    dev = torch.device(device)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    idx = torch.randint(0, 64, (4096,)).to(dev)
    with profile(activities=acts, schedule=schedule(wait=0, warmup=1, active=3),
                 on_trace_ready=lambda p: p.export_chrome_trace(path)) as p:
        for i in range(4):
            x = torch.randn(32, 64).to(dev)
            y = torch.randint(0, 10, (32,)).to(dev)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            counts = torch.bincount(idx)  # a CPU fallback on neuron
            loss.item()
            p.step()


# both runs in one process (a torch start-up each cost ~3 s), each profile a session of its
# own; the neuron one first: the emulator must be enabled before autograd's first backward
run(sys.argv[2], "neuron")
run(sys.argv[1], "cpu")
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("diff")
    paths = out / "cpu.json", out / "neuron.json"
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return paths


@pytest.fixture(scope="module")
def d(files):  # noqa: ANN001, ANN201
    return diff(load_trace(files[0]), load_trace(files[1]))


def test_the_fallback_is_a_mapped_row_marked_on_its_side(d) -> None:  # noqa: ANN001
    row = next(r for r in d.rows if r.key.endswith("› aten::bincount"))
    assert row.kind == "op" and row.notes == ("B: CPU fallback (1 per step)",)
    assert row.a_parts_ms[COMPONENTS.index("host")] > 0  # the CPU ran it as its own op
    # on neuron its device time is its copies to and from the host; the device waits for it
    gating = row.b_parts_ms[COMPONENTS.index("gating")]
    assert 0 < row.b_parts_ms[COMPONENTS.index("device")] < gating
    used = {(m.rule, m.side, m.raw) for m in d.mappings}
    assert ("cpu_fallback", "B", "CPU fallback: aten::bincount") in used


def test_foreach_on_neuron_matches_the_cpu_loop(d) -> None:  # noqa: ANN001
    row = next(r for r in d.rows if r.key == "Optimizer.step#SGD.step › aten::add_")
    assert (row.a_ops, row.b_ops) == (PARAMETERS, 1)
    assert ("foreach", "B", "aten::_foreach_add_") in {(m.rule, m.side, m.raw) for m in d.mappings}


def test_device_time_and_invariant(d, files) -> None:  # noqa: ANN001
    assert d.a.devices == 0 and d.b.devices == 1 and d.b.modelled
    assert any("no device work" in n for n in d.notes) and any("modelled" in n for n in d.notes)
    busy = analyze(load_trace(files[1])).breakdown.busy_ns.mean() / 1e6
    device, coll = COMPONENTS.index("device"), COMPONENTS.index("collective")
    assert sum(r.b_parts_ms[device] + r.b_parts_ms[coll] for r in d.rows) == pytest.approx(busy)
    assert abs(d.residual_ms) <= 0.01 * max(d.a.step_ms, d.b.step_ms)
    assert sum(r.delta_ms for r in d.rows) + d.residual_ms == pytest.approx(d.delta_ms)


def test_cli_on_the_pair(files, capsys) -> None:  # noqa: ANN001
    assert main(["diff", *map(str, files)]) == 0
    out = capsys.readouterr().out
    assert "cpu_fallback" in out and "foreach" in out
