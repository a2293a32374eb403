"""``--what-if compiled`` per module: where a trace records ``nn.Module`` frames (torch's
python_function rows with ``with_stack`` + ``with_modules``, 2021 Kineto's cpu_op rows, a
framework's ``record_function``), a graph ends where the op's top-level module (the root's
child) changes; without frames, the whole step between graph breaks is one graph. Figures
worked by hand (times in µs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from trace_factory import Build

from neuron_profiler.analysis.projection import project
from neuron_profiler.cli.main import main
from neuron_profiler.exporters.chrome import write_chrome_trace
from neuron_profiler.trace import EventKind

FRAMES = [
    (EventKind.PYTHON, "python_function"),  # torch 2.x, with_stack + with_modules
    (EventKind.CPU_OP, "cpu_op"),  # 2021 Kineto
    (EventKind.USER_ANNOTATION, "user_annotation"),  # record_function("nn.Module: ...")
]
# Block_0: five 50 µs ops at 100..500 (100 apart); Block_1: three 40 µs ops at 600, 650, 700.
BLOCK_0 = [(100 + 100 * i, 50) for i in range(5)]
BLOCK_1 = [(600 + 50 * i, 40) for i in range(3)]
# Compiled per module: each block one graph, launched by its first op: (5 - 1) x 50 + (3 - 1)
# x 40 = 280 µs of host time saved. Without frames the 8 ops are one graph: 4 x 50 + 3 x 40.
PER_MODULE_US = (5 - 1) * 50 + (3 - 1) * 40
WHOLE_STEP_US = (5 - 1) * 50 + 3 * 40


def _blocks(frame: tuple[EventKind, str] | None, net_end_us: int = 950) -> Build:
    """A host-bound 1000 µs step: Net_0 (50-950) holds Block_0 (100-550) and Block_1 (600-740),
    each small op launching one 5 µs kernel 10 µs into it. Inside Block_0, its first two ops run
    in Linear_0 and the last three in ReLU_0 (innermost modules that must not cut a graph)."""
    b = Build().step(1, 0, 1000)
    for t, op_us in BLOCK_0 + BLOCK_1:
        b.host("aten::add", t, t + op_us, args={"Input Dims": [[8], [8]]})
        b.kernel(t + 20, t + 25, launch_us=t + 10, name="elementwise_kernel")
    if frame is not None:
        kind, cat = frame
        for name, s, e in [
            ("Net_0", 50, net_end_us),
            ("Block_0", 100, 550),
            ("Linear_0", 100, 250),
            ("ReLU_0", 300, 550),
            ("Block_1", 600, 740),
        ]:
            b.host(f"nn.Module: {name}", s, e, kind=kind, cat=cat)
    return b


@pytest.mark.parametrize("frame", FRAMES)
def test_compiled_per_module_saves_all_but_each_modules_first_launch(frame) -> None:  # noqa: ANN001
    p = project(_blocks(frame).b.build(), "same", source="v100", what_if=("compiled",))
    assert p.target.step_ms == pytest.approx(1.0, abs=1e-6)
    (row,) = p.what_if
    assert row.delta_ms == pytest.approx(-PER_MODULE_US / 1e3, abs=1e-6)
    (note,) = [a for a in p.assumptions if a.startswith("--what-if compiled")]
    assert "per module" in note and "2 modules" in note
    assert "6 launches a step saved in 2 graphs" in note


def test_without_module_frames_the_step_is_one_graph() -> None:
    p = project(_blocks(None).b.build(), "same", source="v100", what_if=("compiled",))
    (row,) = p.what_if
    assert row.delta_ms == pytest.approx(-WHOLE_STEP_US / 1e3, abs=1e-6)
    (note,) = [a for a in p.assumptions if a.startswith("--what-if compiled")]
    assert "no nn.Module frames" in note and "7 launches a step saved in 1 graphs" in note


def test_ops_outside_any_module_are_one_graph_between_breaks() -> None:
    """Two more 40 µs ops (800, 850) after Net_0's frame ends (a loss outside any module): a
    third graph launched by the first of them, the second's 40 µs saved."""
    b = _blocks(FRAMES[0], net_end_us=760)
    for t in (800, 850):
        b.host("aten::add", t, t + 40, args={"Input Dims": [[8], [8]]})
        b.kernel(t + 20, t + 25, launch_us=t + 10, name="elementwise_kernel")
    p = project(b.b.build(), "same", source="v100", what_if=("compiled",))
    (row,) = p.what_if
    assert row.delta_ms == pytest.approx(-(PER_MODULE_US + 40) / 1e3, abs=1e-6)


def test_cli_assumptions_name_the_granularity(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    for frame, words in [(FRAMES[0], "per module"), (None, "no nn.Module frames")]:
        path = tmp_path / f"{frame is None}.json"
        write_chrome_trace(_blocks(frame).b.build(), path)
        args = ["project", str(path), "--chip", "same", "--source-chip", "v100"]
        assert main([*args, "--what-if", "compiled", "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        (note,) = [a for a in doc["assumptions"] if a.startswith("--what-if compiled")]
        assert words in note
        us = PER_MODULE_US if frame else WHOLE_STEP_US
        assert doc["what_if"][0]["delta_ms"] == pytest.approx(-us / 1e3, abs=1e-6)
        assert main([*args, "--what-if", "compiled"]) == 0
        assert words in capsys.readouterr().out
