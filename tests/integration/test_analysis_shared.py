"""``neuron-prof analyze`` on every shared trace: one run over the directory, a JSON document
valid against the shipped schema, a report per trace (host-only ones say so), the terminal
report within the piped width (120 columns), and each trace's tb_profiler_breakdown equal to
the analysis'."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from conftest import all_shared_trace_files

from neuron_profiler.analysis.compat.tb_profiler import tb_profiler_breakdown
from neuron_profiler.cli.main import main
from neuron_profiler.reports.json_report import schema_text
from neuron_profiler.reports.terminal import PIPED_WIDTH
from neuron_profiler.trace import load_trace


def test_analyze_every_shared_trace(
    shared_traces: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", "--json", str(shared_traces)]) == 0
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, json.loads(schema_text()))
    files = all_shared_trace_files(shared_traces)
    assert sorted(t["source"] for t in doc["traces"]) == sorted(map(str, files))
    for t in doc["traces"]:
        assert t["has_device"] == bool(t["idle"]["devices"])
        assert (
            "no device events: host-only report (no device idle time or breakdown)" in t["notes"]
        ) == (not t["has_device"])
        rows = tb_profiler_breakdown(load_trace(t["source"])).rows()
        assert t["tb_profiler_breakdown"] == json.loads(json.dumps(rows))
    assert main(["analyze", str(shared_traces)]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= PIPED_WIDTH


def test_threaded_analysis_equals_the_serial_one(
    shared_traces: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Large traces get the compatibility breakdowns in a second thread: the same report."""
    from neuron_profiler.analysis import report as R
    from neuron_profiler.reports.json_report import to_document

    trace = load_trace(
        next(p for p in all_shared_trace_files(shared_traces) if p.name.startswith("nccl_data"))
    )
    monkeypatch.setattr(R, "THREADED_ROWS", len(trace) + 1)
    serial = to_document([R.analyze(trace)])
    monkeypatch.setattr(R, "THREADED_ROWS", 0)
    threaded = to_document([R.analyze(trace)])
    assert threaded == serial
    assert serial["traces"][0]["hta"]["idle"] and serial["traces"][0]["tb_profiler_breakdown"]
