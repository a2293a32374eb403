"""``neuron-prof diff --html``: the page read back with Python's HTML parser (html_checks): its
waterfall holds the injected change (one op 50 µs slower a step: the hand-worked figure of
test_diff) and walks from A's mean step to B's, its table is the diff's rows, it works offline,
trace text stays text, and the CLI writes it atomically, never over an input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from diff_timeline import BASE, Op, build
from html_checks import HOSTILE, assert_offline, parse

from neuron_profiler.analysis.diff import diff
from neuron_profiler.cli.main import main
from neuron_profiler.exporters.chrome import write_chrome_trace
from neuron_profiler.reports.diff_html import RESIDUAL, render_diff_html

SLOWER_MS = 0.050  # aten::linear's second kernel: 100 -> 150 µs, once a step
HEADER = (
    "#",
    "row",
    "kind",
    "A ms",
    "B ms",
    "Δ ms",
    "Δ % of A",
    "Δ by part",
    "ops per step",
    "notes",
)


@pytest.fixture(scope="module")
def slower():  # noqa: ANN201
    slow = [*BASE[:2], Op("aten::linear", 10, 150), *BASE[3:]]
    return diff(build(BASE)[0], build(slow)[0])


def test_waterfall_walks_from_a_to_b_through_the_injected_change(slower) -> None:  # noqa: ANN001
    page = parse(render_diff_html([slower]))
    fig = page.figures()["chart-0-waterfall"]
    (bars,) = fig["data"]
    assert bars["type"] == "waterfall"
    assert bars["y"][0] == "A: mean step" and bars["y"][-1] == "B: mean step"
    assert bars["y"][1] == "1. forward › aten::linear"
    assert bars["x"][1] == pytest.approx(SLOWER_MS, abs=1e-9)
    assert bars["y"][-2] == RESIDUAL
    assert bars["measure"] == ["absolute"] + ["relative"] * (len(bars["x"]) - 2) + ["total"]
    start, *steps, end = bars["x"]
    assert start + sum(steps) == pytest.approx(end, abs=1e-9)  # the bars reach B's step
    assert end - start == pytest.approx(SLOWER_MS, abs=1e-9)
    assert_offline(page)


def test_table_is_the_diffs_rows(slower) -> None:  # noqa: ANN001
    page = parse(render_diff_html([slower], top=3))
    rows = page.table_after(HEADER)
    shown = slower.folded(top=3)
    assert [r[1] for r in rows] == [r.key for r in shown]
    assert rows[0][:6] == [
        "1",
        "forward › aten::linear",
        "op",
        f"{shown[0].a_ms:,.3f}",
        f"{shown[0].b_ms:,.3f}",
        "+0.050",
    ]
    assert rows[0][7] == "device +0.050"  # the kernel's own time: the change is on the device
    assert rows[0][8] == "2 → 2"  # two aten::linear a step on each side
    assert rows[-1][2] == "other"


def test_trace_text_stays_text(tmp_path: Path) -> None:
    named = [*BASE[:2], Op(HOSTILE, 10, 40), *BASE[2:]]
    d = diff(build(BASE)[0], build(named)[0])
    html = render_diff_html([d])
    page = parse(html)
    assert not [t for t, attrs in page.tags if t == "img" or "onerror" in attrs]
    assert any(HOSTILE in " ".join(r) for r in page.table_after(HEADER))  # shown, as text
    assert html.count("<script") == 3  # plotly.js, the figure, the boot script


def _files(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    slow = [*BASE[:2], Op("aten::linear", 10, 150), *BASE[3:]]
    write_chrome_trace(build(BASE)[0], a)
    write_chrome_trace(build(slow)[0], b)
    return a, b


def test_cli_writes_the_page_with_the_json(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    a, b = _files(tmp_path)
    page = tmp_path / "diff.html"
    assert main(["diff", str(a), str(b), "--json", "--html", str(page)]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    bars = parse(page.read_text()).figures()["chart-0-waterfall"]["data"][0]
    assert bars["x"][0] == pytest.approx(doc["a"]["step_ms"], abs=1e-6)
    assert bars["x"][-1] == pytest.approx(doc["b"]["step_ms"], abs=1e-6)
    assert f"wrote the diff page to {page}" in err


def test_cli_never_writes_the_page_over_an_input(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    a, b = _files(tmp_path)
    before = b.read_bytes()
    assert main(["diff", str(a), str(b), "--html", str(b)]) == 2
    err = capsys.readouterr().err
    assert str(b) in err and "input" in err
    assert b.read_bytes() == before
