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
