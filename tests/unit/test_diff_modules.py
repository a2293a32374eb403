"""``diff(..., group_by="module")`` on synthetic pairs whose ops run inside ``nn.Module`` frames
(python_function rows, as torch.profiler writes them with ``with_stack`` and ``with_modules``),
each module's slowdown injected on purpose and checked against the microsecond walk of the
timeline (tests/diff_timeline.py), the op keyed by its module path."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest
from diff_timeline import BASE, HEAD, LINEAR, MODEL, NET, RELU, Op, build, expected, slower
from html_checks import parse
from test_diff import TOL_MS, check
from test_diff_html import HEADER

from neuron_profiler.analysis.diff import MODULE, diff
from neuron_profiler.cli.main import main
from neuron_profiler.errors import NeuronProfilerError
from neuron_profiler.exporters.chrome import write_chrome_trace
from neuron_profiler.reports.diff_json import schema_text
from neuron_profiler.trace import EventKind


@pytest.mark.parametrize(
    "frame",
    [
        (EventKind.PYTHON, "python_function"),  # torch 2.13, with_stack + with_modules
        (EventKind.CPU_OP, "cpu_op"),  # 2021 Kineto
        (EventKind.USER_ANNOTATION, "user_annotation"),  # a framework's record_function
    ],
)
def test_each_slowed_module_row_has_its_injected_delta_and_the_invariant_holds(frame) -> None:  # noqa: ANN001
    extra = {LINEAR: 30, RELU: 20, HEAD: 50}  # µs more device time per step
    a, ta = build(MODEL, by_module=True, frame=frame)
    b, tb = build(slower(MODEL, extra), by_module=True, frame=frame)
    d = diff(a, b, group_by="module")
    check(d, expected(ta), expected(tb))  # every row as the walk has it; Σ Δ + residual = Δ
    rows = {r.key: r for r in d.rows}
    for path, us in extra.items():
        assert rows[path].kind == MODULE
        assert rows[path].delta_ms == pytest.approx(us / 1e3, abs=TOL_MS), path
        assert rows[path].a_ops == rows[path].b_ops == 1 and rows[path].notes == ()
    assert rows[NET].delta_ms == pytest.approx(0, abs=TOL_MS) and rows[NET].a_ms > 0
    assert rows["forward › aten::bincount"].kind == "op"  # no module: its op row
    assert d.delta_ms == pytest.approx(0.100, abs=TOL_MS) and d.group_by == "module"
    assert not any(r.key.startswith("forward › aten::linear") for r in d.rows)


def test_rows_by_op_ignore_the_module_frames() -> None:
    """The default grouping of framed traces is the grouping of the same traces unframed."""
    slow = slower(MODEL, {HEAD: 50})
    framed = diff(build(MODEL)[0], build(slow)[0])
    plain = diff(
        build([replace(op, module="") for op in MODEL])[0],
        build([replace(op, module="") for op in slow])[0],
    )
    assert framed.group_by == "op" and framed.notes == plain.notes
    assert [(r.key, r.kind, r.a_parts_ms, r.b_parts_ms) for r in framed.rows] == [
        (r.key, r.kind, r.a_parts_ms, r.b_parts_ms) for r in plain.rows
    ]


def test_a_module_on_one_side_only_is_its_own_row_marked() -> None:
    renamed = [replace(op, module="Net_0.Head_1") if op.module == HEAD else op for op in MODEL]
    (a, ta), (b, tb) = build(MODEL, by_module=True), build(renamed, by_module=True)
    d = diff(a, b, group_by="module")
    check(d, expected(ta), expected(tb))
    rows = {r.key: r for r in d.rows}
    assert rows[HEAD].notes == ("only in A",) and rows[HEAD].b_ms == 0
    assert rows["Net_0.Head_1"].notes == ("only in B",) and rows["Net_0.Head_1"].a_ms == 0
    assert rows[HEAD].a_ms == pytest.approx(rows["Net_0.Head_1"].b_ms, abs=TOL_MS)


def test_traces_without_module_frames_give_the_op_rows_and_a_note() -> None:
    slow = [*BASE[:2], Op("aten::linear", 10, 150), *BASE[3:]]
    a, b = build(BASE)[0], build(slow)[0]
    by_op, by_module = diff(a, b), diff(a, b, group_by="module")
    assert not any(r.kind == MODULE for r in by_module.rows)
    assert by_module.rows == by_op.rows and by_module.residual_ms == by_op.residual_ms
    assert [n for n in by_module.notes if n not in by_op.notes] == [
        f"{side}: no module frames ('nn.Module: ...': torch.profiler writes them with "
        "with_stack=True and with_modules=True): its ops keep their op rows"
        for side in "AB"
    ]


def test_an_unknown_grouping_is_one_error() -> None:
    trace = build(BASE)[0]
    with pytest.raises(NeuronProfilerError, match="group_by 'layer'"):
        diff(trace, trace, group_by="layer")


def test_cli_by_module_json_terminal_and_page(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """``--by module``: the JSON validates against the shipped schema, its top row is the
    slowed head's module row with the injected Δ, the terminal and the page say the grouping
    and show the row; without ``--by`` the document says ``op``."""
    a, b, page = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "d.html"
    write_chrome_trace(build(MODEL)[0], a)
    write_chrome_trace(build(slower(MODEL, {HEAD: 50}))[0], b)
    assert main(["diff", "--by", "module", "--json", "--html", str(page), str(a), str(b)]) == 0
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, json.loads(schema_text()))
    top = doc["rows"][0]
    assert (doc["group_by"], top["key"], top["kind"]) == ("module", HEAD, "module")
    assert top["delta_ms"] == pytest.approx(0.050, abs=1e-6)
    rows = parse(page.read_text()).table_after(HEADER)
    assert rows[0][1:3] == [HEAD, "module"] and rows[0][5] == "+0.050"
    assert "Rows by module: " in page.read_text()
    assert main(["diff", "--by", "module", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "rows by module: " in out and HEAD in out
    assert main(["diff", "--json", str(a), str(b)]) == 0
    assert json.loads(capsys.readouterr().out)["group_by"] == "op"
    assert main(["diff", "--by", "layer", str(a), str(b)]) == 2
