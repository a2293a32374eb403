"""``neuron-prof demo`` end to end: exit status, the trace it wrote, and what it must show."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")


def test_demo_writes_a_trace_with_fallback_and_slow_data_step(tmp_path: Path) -> None:
    out_dir = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-m", "neuron_profiler.cli.main", "demo", "-o",
                           str(out_dir), "--steps", "2"], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    traces = list(out_dir.glob("*.pt.trace.json*"))
    assert len(traces) == 1 and f"trace: {traces[0]}" in proc.stdout
    trace = json.loads(traces[0].read_text())
    names = {e["args"]["name"] for e in trace["traceEvents"]
             if e.get("ph") == "M" and e["name"] == "process_name"}
    assert "NeuronCore 0" in names
    x = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    fallbacks = [e for e in x if e["name"] == "CPU fallback: aten::bincount"]
    assert len(fallbacks) == 2  # one per profiled step
    data = [e for e in x if e["name"] == "data_step"]
    assert len(data) == 2 and min(e["dur"] for e in data) >= 20_000  # the 20 ms host stall
    assert "CPU fallbacks: 2" in proc.stdout and "top ops by device time:" in proc.stdout
