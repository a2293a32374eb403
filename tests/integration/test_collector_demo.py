"""``neuron-prof demo`` end to end: exit status, the trace it wrote, what it must show, the
analyzer's report it ends with, and the commands it names (run here)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from html_checks import assert_matches_report, assert_offline, parse

pytest.importorskip("torch")

from neuron_profiler.analysis import analyze  # noqa: E402
from neuron_profiler.trace import load_trace  # noqa: E402
from neuron_profiler.trace import vocabulary as V  # noqa: E402

CLI = [sys.executable, "-m", "neuron_profiler.cli.main"]
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _demo(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out_dir = tmp_path / "runs"
    proc = subprocess.run(
        [*CLI, "demo", "-o", str(out_dir), *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    traces = list(out_dir.glob("*.pt.trace.json*"))
    assert len(traces) == 1 and f"trace: {traces[0]}" in proc.stdout
    return proc, json.loads(traces[0].read_text())


def _busy(trace: dict[str, Any]) -> list[float]:
    """Per ProfilerStep: the union of device rows inside it over its duration."""
    x = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    steps = (e for e in x if e["name"].startswith("ProfilerStep#"))
    return [_busy_in(trace, s["ts"], s["ts"] + s["dur"]) for s in steps]


def _busy_in(trace: dict[str, Any], a: float, b: float) -> float:
    """The union of device rows inside [a, b) µs over its length."""
    x = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    device = sorted(
        (e["ts"], e["ts"] + e["dur"]) for e in x if e.get("cat") in ("kernel", "gpu_memcpy")
    )
    total, end = 0.0, a
    for lo, hi in device:
        lo, hi = max(lo, end), min(hi, b)
        if hi > lo:
            total, end = total + hi - lo, hi
    return total / (b - a)


@pytest.fixture(scope="module")
def two_steps(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str], dict[str, Any]]:
    """One ``demo --steps 2`` run (its directory, the process, the trace) that the two tests
    of the default demo read: running it once per test cost ~15 s for the same output."""
    where = tmp_path_factory.mktemp("demo_two_steps")
    return (where, *_demo(where, "--steps", "2"))


def test_demo_writes_a_trace_with_fallback_and_slow_data_step(
    two_steps: tuple[Path, subprocess.CompletedProcess[str], dict[str, Any]],
) -> None:
    _, proc, trace = two_steps
    # timing mode by default: a device-bound model, busy apart from the 20 ms data stall
    assert "mode: timing (results not computed; device timings modelled" in proc.stdout
    # its reads of uncomputed values are on purpose: no warning meant for users' programs
    assert "was not computed in timing mode" not in proc.stderr, proc.stderr[-2000:]
    # what the README shows: batch 32 x 512 tokens, so the fallback's input is 16384 tokens
    (trace_path,) = (two_steps[0] / "runs").glob("*.pt.trace.json*")
    titles = [f.title for f in analyze(load_trace(trace_path)).findings.findings]
    assert any(
        t.startswith("CPU fallback aten::bincount [[16384]] ['int64'] (2 calls") for t in titles
    )
    busy = _busy(trace)
    assert len(busy) == 2 and min(busy) >= 0.5, busy
    names = {
        e["args"]["name"]
        for e in trace["traceEvents"]
        if e.get("ph") == "M" and e["name"] == "process_name"
    }
    assert "NeuronCore 0" in names
    x = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    fallbacks = [e for e in x if e["name"] == "CPU fallback: aten::bincount"]
    assert len(fallbacks) == 2  # one per profiled step
    data = [e for e in x if e["name"] == LOADER]  # a real DataLoader, as torch names it
    assert len(data) == 2 and min(e["dur"] for e in data) >= 20_000  # the 20 ms host stall
    # the demo computes no figure of its own: before the analyzer's report, only what ran
    summary = proc.stdout[: proc.stdout.index("open it:")]
    assert not re.search(r"[0-9.]+ (ms|us|calls)", summary), summary
    # the data stall's figure is the analyzer's finding, per step (the mean of the two steps,
    # not their sum): at least the device idle inside each step's DataLoader span (the trace)
    report = analyze(load_trace(trace_path))
    (device,) = report.idle.devices
    per_step_ms = [s["data_loading"] / 1e6 for s in device.per_step_by_cause_ns]
    shown = re.search(r"device idle: data loading.*?│\s*([0-9.]+)\s*│", proc.stdout)
    assert shown is not None, proc.stdout
    assert float(shown.group(1)) == round(sum(per_step_ms) / 2, 3)
    steps = [e for e in x if e["name"].startswith("ProfilerStep#")]
    for step, ms in zip(sorted(steps, key=lambda e: e["ts"]), per_step_ms, strict=True):
        (loader,) = [e for e in data if step["ts"] <= e["ts"] < step["ts"] + step["dur"]]
        stall_ms = (1 - _busy_in(trace, loader["ts"], loader["ts"] + loader["dur"])) * (
            loader["dur"] / 1e3
        )
        assert stall_ms >= 20.0 and ms >= stall_ms - 0.01, (ms, stall_ms)


def test_demo_ends_with_the_analyzers_report_and_its_commands_work(
    two_steps: tuple[Path, subprocess.CompletedProcess[str], dict[str, Any]],
) -> None:
    tmp_path, proc, _ = two_steps
    (path,) = (tmp_path / "runs").glob("*.pt.trace.json*")
    alone = subprocess.run(
        [*CLI, "analyze", str(path)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert alone.returncode == 0 and "no rank · 2 steps" in alone.stdout
    assert proc.stdout.endswith(alone.stdout)  # exactly what `neuron-prof analyze` prints
    # the causes put there on purpose are findings: the DataLoader stall, the fallback
    report = analyze(load_trace(path))
    kinds = [f.kind for f in report.findings.findings]
    assert kinds[0] == "idle:data_loading" and "cpu_fallback:aten::bincount" in kinds, kinds
    (device,) = report.idle.devices
    assert all(s["data_loading"] >= 0.8 * 20e6 for s in device.per_step_by_cause_ns)
    assert "device idle: data loading" in alone.stdout
    assert "CPU fallback" in alone.stdout and "aten::bincount" in alone.stdout
    assert "modelled by the emulator" in alone.stdout
    # every command it names runs as printed
    commands = [
        shlex.split(line) for line in proc.stdout.splitlines() if line.startswith("  neuron-prof ")
    ]
    assert [c[1] for c in commands] == ["analyze", "export"], commands
    for command in commands:
        ran = subprocess.run(
            [*CLI, *command[1:]], capture_output=True, text=True, timeout=300, cwd=tmp_path
        )
        assert ran.returncode == 0, ran.stderr[-2000:]
    html = Path(commands[0][commands[0].index("--html") + 1])
    page = parse(html.read_text(encoding="utf-8"))
    assert_offline(page)
    assert_matches_report(page, report)  # the emulator trace, with its fallback in the Pareto
    assert [g.op for g in report.fallback_pareto.groups] == ["aten::bincount"]
    assert V.META_MODELLED in " ".join(page.text)
    pftrace = Path(commands[1][commands[1].index("-o") + 1])
    assert pftrace.stat().st_size > 0


def test_demo_numerics_mode_says_so(tmp_path: Path) -> None:
    proc, trace = _demo(tmp_path, "--steps", "1", "--numerics")
    assert "mode: numerics (results computed on the host" in proc.stdout
    assert trace["neuron_numerics"] == "computed"


def test_demo_on_two_cores_puts_device_work_on_both(tmp_path: Path) -> None:
    proc, trace = _demo(tmp_path, "--steps", "1", "--cores", "2")
    assert "ran on 2 NeuronCores" in proc.stdout
    pids = {
        e["args"]["name"]: e["pid"]
        for e in trace["traceEvents"]
        if e.get("ph") == "M" and e["name"] == "process_name"
    }
    x = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    for core in ("NeuronCore 0", "NeuronCore 1"):
        on_core = [e for e in x if e["pid"] == pids[core]]
        kernels = {e["args"].get("op") for e in on_core if e.get("cat") == "kernel"}
        assert {"aten::mm", "aten::bmm"} <= kernels, (core, sorted(kernels)[:20])
        # gradients averaged across the cores: device-to-device copies land on both
        assert any(
            e.get("cat") == "gpu_memcpy" and e["args"].get("direction") == "d2d" for e in on_core
        ), core
