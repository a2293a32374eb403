"""``neuron-prof project``: JSON valid against the shipped schema with the hand-worked figures,
the terminal output, and bad input as one line naming the file (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from trace_factory import mm_then_sync as _mm_then_sync

from neuron_profiler.cli.main import main
from neuron_profiler.exporters.chrome import write_chrome_trace
from neuron_profiler.reports.projection_json import SCHEMA_VERSION, schema_text


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture()
def trace_file(tmp_path: Path) -> Path:
    path = tmp_path / "mm.json"
    write_chrome_trace(_mm_then_sync().b.build(), path)
    return path


def test_json_validates_and_gives_the_hand_worked_step(trace_file, capsys) -> None:  # noqa: ANN001
    code, out, _ = run(
        ["project", str(trace_file), "--chip", "a100", "--source-chip", "v100", "--json"], capsys
    )
    assert code == 0
    doc = json.loads(out)
    jsonschema.validate(doc, json.loads(schema_text()))
    assert doc["schema_version"] == SCHEMA_VERSION
    assert doc["source"] == {"chip": "v100", "step_ms": 1.0}
    # test_projection_synthetic: 15 + 500 x 15.7/19.5 + 5 + 475 µs
    assert doc["target"]["step_ms"] == pytest.approx(
        (15 + 500 * 15.7 / 19.5 + 5 + 475) / 1e3, abs=1e-4
    )
    assert doc["replay"] == {"step_ms": 1.0, "error_pct": 0.0}
    assert doc["what_if"] == []


def test_what_if_in_json_and_a_bad_edit_before_reading(trace_file, capsys) -> None:  # noqa: ANN001
    args = ["project", str(trace_file), "--chip", "a100", "--source-chip", "v100", "--json"]
    code, out, _ = run([*args, "--what-if", "batch x2"], capsys)
    assert code == 0
    doc = json.loads(out)
    jsonschema.validate(doc, json.loads(schema_text()))
    (row,) = doc["what_if"]
    assert row["edit"] == "batch x2"
    assert row["delta_ms"] == pytest.approx(500 * 15.7 / 19.5 / 1e3, abs=1e-4)
    code, out, err = run([*args, "--what-if", "overlap"], capsys)
    assert code == 2 and out == "" and "unknown" in err and "overlap-comm" in err


@pytest.mark.parametrize("factor", ["inf", "nan", "1e308", "0", "-1", "1e-320", "x"])
def test_a_batch_factor_out_of_range_is_refused(trace_file, capsys, factor: str) -> None:  # noqa: ANN001
    """N scales device time: a factor that is no number, not positive or absurd (inf, 1e308:
    times beyond int64) is one error line, not a projection of garbage."""
    args = ["project", str(trace_file), "--chip", "trn2", "--source-chip", "v100"]
    code, out, err = run([*args, "--what-if", f"batch x{factor}"], capsys)
    assert code == 2 and out == ""
    (line,) = err.splitlines()
    assert line.endswith("the batch factor must be a number from 0.001 to 10000")


def test_terminal_names_both_chips_and_the_assumptions(trace_file, capsys) -> None:  # noqa: ANN001
    code, out, _ = run(
        ["project", str(trace_file), "--chip", "trn2", "--source-chip", "v100"], capsys
    )
    assert code == 0
    assert "source v100" in out and "target trn2" in out
    assert "aten::mm" in out and "assumptions" in out


def test_unknown_source_chip_is_one_line_exit_2(trace_file, capsys) -> None:  # noqa: ANN001
    code, out, err = run(["project", str(trace_file), "--chip", "trn2"], capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert str(trace_file) in err and "--source-chip" in err


def test_corrupt_file_is_one_line_exit_2(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    bad = tmp_path / "cut.json"
    bad.write_text('{"traceEvents": [{"name": "x", "ph": "X", "ts": 1')
    code, out, err = run(["project", str(bad), "--chip", "same"], capsys)
    assert code == 2
    assert str(bad) in err


def test_html_page_holds_the_projection_offline_and_escaped(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    from html_checks import HOSTILE, assert_offline, parse

    from neuron_profiler.analysis.projection import project
    from neuron_profiler.trace import load_trace

    b = _mm_then_sync()
    b.host(HOSTILE, 600, 700, args={"Input Dims": [[64, 256]], "Input type": ["float"]})
    b.kernel(610, 650, launch_us=605, name="relu_kernel")
    trace_path, page_path = tmp_path / "t.json", tmp_path / "p.html"
    write_chrome_trace(b.b.build(), trace_path)
    args = ["project", str(trace_path), "--chip", "trn2", "--source-chip", "v100"]
    code, _, err = run([*args, "--html", str(page_path), "--what-if", "batch x2"], capsys)
    assert code == 0 and f"wrote the projection page to {page_path}" in err
    page = parse(page_path.read_text())
    assert_offline(page)
    expected = project(load_trace(trace_path), "trn2", source="v100", what_if=("batch x2",))
    fig = page.figures()["classes"]
    source, target = fig["data"]
    assert source["x"] == [c.cls for c in expected.classes]
    assert source["y"] == pytest.approx([c.source_ms for c in expected.classes])
    assert target["y"] == pytest.approx([c.target_ms for c in expected.classes])
    ops = page.table_after(("op", "class", "count", "source ms", "target ms"))
    assert HOSTILE in [row[0] for row in ops]  # shown as text, never as a tag
    assert not any(tag == "img" for tag, _ in page.tags)
    assert page.table_after(("edit", "step ms", "Δ ms"))[0][0] == "batch x2"


def test_html_never_overwrites_the_input(trace_file, capsys) -> None:  # noqa: ANN001
    before = trace_file.read_bytes()
    code, _, err = run(
        ["project", str(trace_file), "--chip", "same", "--html", str(trace_file)], capsys
    )
    assert code == 2 and str(trace_file) in err
    assert trace_file.read_bytes() == before


def test_no_fallback_of_an_op_the_target_does_not_move_says_so(trace_file, capsys) -> None:  # noqa: ANN001
    """A mistyped op printed Δ 0 without a word; the assumptions now say why nothing changed."""
    args = ["project", str(trace_file), "--chip", "trn2", "--source-chip", "v100", "--json"]
    code, out, _ = run([*args, "--what-if", "no-fallback:zzz_no_such_op"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["what_if"][0]["delta_ms"] == 0
    (note,) = [a for a in doc["assumptions"] if a.startswith("--what-if no-fallback:")]
    assert note.startswith("--what-if no-fallback:aten::zzz_no_such_op: no change")
    assert "no op on the host" in note  # the mm trace has no op trn2 runs on the host
