"""A trace without a ``distributedInfo`` rank is "no rank" in every per-trace view (terminal and
HTML headers, ``--json`` ``rank: null``, the capture summary's line), never a made-up rank 0;
a trace that carries rank 0 still shows rank 0. Traces written by hand here, and the shared
trace HTA keeps for this case (``distributed_info_not_found``)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from neuron_profiler.cli.main import main
from neuron_profiler.reports.json_report import schema_text


def _trace(path: Path, rank: float | None) -> Path:
    doc: dict[str, object] = {
        "traceEvents": [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
             "ts": 0, "dur": 100},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10,
             "dur": 50},
        ]
    }  # fmt: skip
    if rank is not None:
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
    path.write_text(json.dumps(doc))
    return path


def _analyze(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["analyze", *args]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(
    "rank, shown", [(None, "no rank"), (0, "rank 0"), (1, "rank 1"), (1.0, "rank 1")]
)  # (1.0: a pandas round trip's integral float)
def test_every_view_says_no_rank_or_the_real_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rank: float | None, shown: str
) -> None:
    path = _trace(tmp_path / "t.json", rank)
    doc = json.loads(_analyze(capsys, "--json", str(path)))
    jsonschema.validate(doc, json.loads(schema_text()))
    assert doc["traces"][0]["rank"] == rank
    text = _analyze(capsys, str(path))
    assert f"\n{shown} · 1 step · " in text
    if rank is None:
        assert "rank 0" not in text
    html = tmp_path / "r.html"
    _analyze(capsys, "--html", str(html), str(path))
    page = html.read_text()
    assert f"<p>{shown} · 1 step · " in page
    assert f"({shown})</a>" in page and "(rank None)" not in page  # (the contents too)


def test_a_real_trace_without_distributed_info(
    shared_traces: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = (
        shared_traces
        / "hta/tests/data/distributed_info_unavailable/distributed_info_not_found.json.gz"
    )
    doc = json.loads(_analyze(capsys, "--json", str(path)))
    assert doc["traces"][0]["rank"] is None
    assert "no rank · " in _analyze(capsys, str(path))
