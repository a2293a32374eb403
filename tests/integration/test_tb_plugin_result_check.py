"""torch-tb-profiler's hand-verified results, reproduced: kineto's
``tb_plugin/test/result_check_file.txt`` holds what the retired plugin showed for span 1 of each
sample run (the shared ``worker0`` files), checked by hand and then frozen as its end-to-end
test. ``tests/fixtures/tb_plugin_result_check.json`` keeps its numbers (source and licence in the
file). The analyzer's tb-profiler breakdown, operator summary and kernel summary must give the
same numbers at the plugin's rounding (whole µs): every step, every category, every operator
row (calls, device self/total, host self/total) and every kernel row (calls, total, mean, max,
min).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO_ROOT, shared_traces_dir

from neuron_profiler.analysis import analyze
from neuron_profiler.trace import EventKind, load_trace
from neuron_profiler.trace import schema as S

EXPECTED = json.loads(
    (REPO_ROOT / "tests" / "fixtures" / "tb_plugin_result_check.json").read_text()
)


def _us(ns: float) -> int:
    return round(ns / 1e3)


@pytest.fixture(scope="module", params=sorted(EXPECTED["runs"]))
def run(request: pytest.FixtureRequest) -> tuple[dict, object, object]:
    expected = EXPECTED["runs"][request.param]
    trace = load_trace(Path(shared_traces_dir()) / expected["trace"])
    return expected, trace, analyze(trace)


def test_step_breakdown_equals_the_plugins(run: tuple) -> None:
    expected, _, report = run
    rows = report.tb_breakdown.rows()
    assert [r["step"] for r in rows] == [s["step"] for s in expected["steps"]]
    for ours, theirs in zip(rows, expected["steps"], strict=True):
        assert {k: round(v) for k, v in ours.items() if k != "step"} == {
            k: v for k, v in theirs.items() if k != "step"
        }, theirs["step"]
    average = {k: round(sum(r[k] for r in rows) / len(rows)) for k in expected["average_step"]}
    assert average == expected["average_step"]


def test_operator_table_equals_the_plugins(run: tuple) -> None:
    expected, _, report = run
    ours = {
        o.name: (
            o.calls,
            _us(o.device_self_ns),
            _us(o.device_total_ns),
            _us(o.host_self_ns),
            _us(o.host_total_ns),
        )
        for o in report.summary.ops
    }
    theirs = {r[0]: tuple(r[1:]) for r in expected["operators"]["rows"]}
    assert set(ours) == set(theirs)
    assert {n: v for n, v in ours.items() if v != theirs[n]} == {}


def test_kernel_table_equals_the_plugins(run: tuple) -> None:
    expected, trace, report = run
    kernel_names = {
        trace.strings[i] for i in trace.col(S.NAME_ID)[trace.mask(kind=EventKind.KERNEL)].tolist()
    }
    ours = {
        k.name: (k.calls, _us(k.total_ns), _us(k.mean_ns), _us(k.max_ns), _us(k.min_ns))
        for k in report.summary.kernels
        if k.name in kernel_names
    }
    theirs = {r[0]: tuple(r[1:]) for r in expected["kernels"]["rows"]}
    assert set(ours) == set(theirs)
    assert {n: v for n, v in ours.items() if v != theirs[n]} == {}
    # the rows left out are copies and memsets: the plugin's kernel table has kernels only
    assert all(
        k.name.startswith(("Memcpy", "Memset"))
        for k in report.summary.kernels
        if k.name not in kernel_names
    )
