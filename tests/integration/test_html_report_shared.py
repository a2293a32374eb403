"""``analyze --html`` on a real CUDA trace (torch-tb-profiler's ResNet-50 sample, shared): the
charts hold the report's numbers, the fallback chart says there is none, the page is offline."""

from __future__ import annotations

from pathlib import Path

from html_checks import assert_matches_report, assert_offline, parse

from neuron_profiler.analysis import analyze
from neuron_profiler.cli.main import main
from neuron_profiler.trace import load_trace

SAMPLE = "kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"


def test_cuda_trace_page(shared_traces: Path, tmp_path: Path) -> None:
    trace = shared_traces / SAMPLE
    out = tmp_path / "report.html"
    assert main(["analyze", str(trace), "--html", str(out)]) == 0
    page = parse(out.read_text(encoding="utf-8"))
    report = analyze(load_trace(trace))
    assert_offline(page)
    assert_matches_report(page, report)
    text = " ".join(page.text)
    assert "No CPU fallbacks in this trace: nothing to chart." in text
    assert report.idle.gap_cause.size > 2000 and "drawn by bins of" in text  # 7052 short gaps
    # a CUDA trace: no modelled-timings note; one device, "device 0", one bar per step
    assert "modelled by the emulator" not in text
    figures = page.figures()
    assert figures["chart-0-breakdown"]["data"][0]["x"] == list(report.steps.names)
    assert {y for t in figures["chart-0-timeline"]["data"] for y in t["y"]} == {"device 0"}
