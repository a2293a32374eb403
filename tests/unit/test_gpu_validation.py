"""bench/gpu_validation.py, the one call issue 27's point 6(d) makes on a GPU machine, checked
here without one: two small workloads recorded on the CPU, analysed, replayed and projected
onto a named chip, the summary's steps matching the recorded traces' own ProfilerSteps."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

pytest.importorskip("torch")  # (the recorder needs it; analysis never does)

REPO = Path(__file__).resolve().parents[2]


def _profiler_steps_ms(doc: dict) -> float:
    """Mean duration of the ProfilerStep#N spans of a Chrome trace, read plainly."""
    steps = [
        e["dur"] / 1000
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
    ]
    assert steps
    return sum(steps) / len(steps)


def test_the_pipeline_records_projects_and_packs_without_a_gpu(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "gpu_validation.py"),
            "--out",
            str(out),
            "--scale",
            "tiny",
            "--steps",
            "2",
            "--chip",
            "h100",
            "--workloads",
            "tiny_ops,host_sync",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads((out / "summary.json").read_text())
    assert [r["workload"] for r in rows] == ["tiny_ops", "host_sync"]
    with tarfile.open(out / "traces.tar.gz") as tar:
        traces = {
            m.name: json.loads(gzip.decompress(tar.extractfile(m).read()))  # type: ignore[union-attr]
            for m in tar.getmembers()
        }
    for row in rows:
        cpu = row["cpu"]
        assert cpu["analyze_exit"] == 0 and cpu["replay"]["exit"] == 0
        recorded = _profiler_steps_ms(traces[f"{row['workload']}-cpu.pt.trace.json.gz"])
        assert cpu["replay"]["source"]["step_ms"] == pytest.approx(recorded, rel=0.02)
        target = row["projection"]["target"]
        assert target["chip"] == "h100"
        assert 0 < target["low_ms"] <= target["step_ms"] <= target["high_ms"]
        assert "cuda" not in row or "error" in row["cuda"]  # (no GPU here)
    assert "| tiny_ops |" in (out / "summary.md").read_text()


def test_the_gpu_side_projects_onto_the_chip_its_trace_names(
    tmp_path: Path, shared_traces: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CUDA half of a workload, without a GPU: a real V100 trace (ResNet-50, kineto's
    sample) stands in for the CUDA run. The CPU trace is projected onto the chip that trace
    names, and the error is taken against that trace's own mean ProfilerStep."""
    import argparse
    import shutil

    sys.path.insert(0, str(REPO / "bench"))
    import gpu_validation as G

    v100 = (
        shared_traces
        / "kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
    )
    real_child = G.run_child

    def child(name: str, device: str, args: argparse.Namespace, trace: Path) -> dict:
        if device == "cpu":
            return real_child(name, device, args, trace)
        shutil.copyfile(v100, trace)  # (gzip content under the .json name: the loader reads it)
        return {"wall_step_ms": 0.0, "device_name": "Tesla V100"}

    monkeypatch.setattr(G, "run_child", child)
    args = argparse.Namespace(
        devices=["cpu", "cuda"], scale="tiny", steps=2, chip=None, timeout=600.0
    )
    row = G.workload_row("tiny_ops", args, tmp_path)
    measured = _profiler_steps_ms(json.loads(gzip.decompress(v100.read_bytes())))
    assert row["cuda"]["replay"]["source"]["chip"] == "v100"
    assert row["cuda"]["replay"]["source"]["step_ms"] == pytest.approx(measured, rel=0.02)
    projection = row["projection"]
    assert projection["target"]["chip"] == "v100"
    assert projection["measured_step_ms"] == row["cuda"]["replay"]["source"]["step_ms"]
    error = 100 * (projection["target"]["step_ms"] / projection["measured_step_ms"] - 1)
    assert projection["error_pct"] == pytest.approx(error)
    assert row["diff_exit"] == 0 and row["cpu"]["analyze_exit"] == row["cuda"]["analyze_exit"] == 0
