"""``analyze --html``: the page's chart data equals the report's figures, its timeline accounts
for every gap (downsampled beyond the budget), it works offline, escapes trace text, shows an
explicit message for an empty chart, and is written atomically."""

from __future__ import annotations

import builtins
import errno
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from html_checks import (
    HOSTILE,
    HTML_OPTIONS,
    Page,
    assert_matches_report,
    assert_offline,
    html_report,
    parse,
    two_core_trace,
)
from trace_factory import US, Build

from neuron_profiler import output as _output
from neuron_profiler.analysis import Options, analyze
from neuron_profiler.analysis.causes import ALL_CAUSES
from neuron_profiler.analysis.report import NOTE_NO_STEPS
from neuron_profiler.cli.main import main
from neuron_profiler.errors import OutputError
from neuron_profiler.exporters.chrome import write_chrome_trace
from neuron_profiler.reports.html_report import render_html, write_html
from neuron_profiler.reports.palette import CAUSE_COLOURS, EMULATOR_OVERHEAD_COLOUR
from neuron_profiler.trace import EventKind, TraceBuilder
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V


@pytest.fixture(scope="module")
def two_core() -> tuple[Any, Page]:
    report = html_report(two_core_trace())
    return report, parse(render_html([report]))


def _series(fig: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["meta"]: t for t in fig["data"]}


def test_breakdown_chart_is_the_reports_figures(two_core) -> None:  # noqa: ANN001
    report, page = two_core
    fig = page.figures()["chart-0-breakdown"]
    series = _series(fig)
    b, idle = report.breakdown, {d.device: d for d in report.idle.devices}
    core1 = "NeuronCore &lt;/script&gt;&lt;script&gt;alert(2)&lt;/script&gt;"
    assert fig["data"][0]["x"] == [["1", "2", "1", "2"], ["device 0", "device 0", core1, core1]]
    for key in ("compute_ns", "collective_only_ns", "dma_only_ns"):
        want = [int(v) for d in b.devices for v in getattr(d, key)]
        assert [round(v * 1e6) for v in series[key]["y"]] == want
    for cause in ALL_CAUSES:
        want = [s[cause] for d in b.devices for s in idle[d.device].per_step_by_cause_ns]
        got = series.get(f"idle:{cause}")
        assert (got is None and not any(want)) or [round(v * 1e6) for v in got["y"]] == want
    assert [round(v * 1e6) for v in series["host_ns"]["y"]] == [int(v) for v in b.host_ns] * 2
    # the stack is the wall time of each step on each device
    stack = np.sum([t["y"] for t in fig["data"] if t["type"] == "bar"], axis=0)
    assert np.allclose(stack * 1e6, np.tile(b.wall_ns, 2))
    # and the figures are the ones worked out by hand (ms): core 1, step 1 then step 2
    assert series["compute_ns"]["y"][2:] == [0.6, 0.0]
    assert series["collective_only_ns"]["y"][2:] == [0.2, 0.0]
    assert series["dma_only_ns"]["y"] == [0.04, 0.01, 0.1, 0.0]
    assert series["idle:other"]["y"][2:] == [0.1, 1.0]
    assert series["idle:cpu_fallback"]["y"][:2] == [0.26, 0.0]
    assert series["idle:data_loading"]["y"][:2] == [0.0, 0.39]


def test_timeline_draws_every_gap_by_cause(two_core) -> None:  # noqa: ANN001
    report, page = two_core
    traces = page.figures()["chart-0-timeline"]["data"]
    idle = report.idle
    for device in (0, 1):
        mine = idle.gap_device == device
        want = np.bincount(idle.gap_cause[mine], minlength=len(ALL_CAUSES))
        got = np.zeros(len(ALL_CAUSES), np.int64)
        for t in traces:
            if t["meta"]["device"] == device:
                got[ALL_CAUSES.index(t["meta"]["cause"])] += t["meta"]["gaps"]
                assert t["meta"]["exact"] and len(t["x"]) == t["meta"]["gaps"]  # all drawn
        assert got.tolist() == want.tolist()
    by_cause = {t["meta"]["cause"]: t for t in traces}
    gap = by_cause["cpu_fallback"]
    assert gap["base"] == [(120 * US - report.base_ns) / 1e3] and gap["x"] == [260.0]
    assert by_cause["data_loading"]["x"] == [390.0] and by_cause["other"]["x"] == [1100.0]
    assert "Every gap is drawn." in " ".join(page.text)


def test_pareto_is_the_fallback_groups_by_recoverable_time(two_core) -> None:  # noqa: ANN001
    report, page = two_core
    bars, line = page.figures()["chart-0-pareto"]["data"]
    groups = sorted(report.findings.fallbacks, key=lambda g: -g.recoverable_ns)
    assert [round(v * 1e6) for v in bars["y"]] == [g.recoverable_ns for g in groups]
    assert [round(v * 1e6) for v in bars["y"]] == [300 * US, 10 * US]  # idle + copies, no peaks
    total = sum(g.recoverable_ns for g in groups)
    assert line["y"] == pytest.approx([100 * 300 / 310, 100.0])
    assert line["y"][-1] == pytest.approx(100 * sum(g.recoverable_ns for g in groups) / total)
    assert bars["x"][0].startswith("&lt;img src=x onerror=alert(1)&gt;")


def test_findings_table_lists_every_finding(two_core) -> None:  # noqa: ANN001
    report, page = two_core
    rows = page.table_after(("#", "finding", "ms/step", "% step", "longest at", "what to do"))
    assert [r[1].split(" (")[0] for r in rows] == [
        f.title.split(" (")[0] for f in report.findings.findings
    ]
    assert any(HOSTILE in r[1] for r in rows)  # shown as text, the markup escaped


def test_findings_say_where_as_step_and_offset() -> None:
    """Issue 23, 7: the longest occurrence is "step N +x ms", not the trace's absolute µs.
    Steps at 5,552,829,762 µs (a host clock); core 0 idles from step 2 +0.27 ms."""
    t = 5_552_829_762
    b = Build().step(1, t, t + 1000).step(2, t + 1000, t + 2000)
    b.kernel(t, t + 1270, launch_us=t).kernel(t + 1700, t + 2000, launch_us=t + 5)
    page = parse(render_html([html_report(b)]))
    (row,) = page.table_after(("#", "finding", "ms/step", "% step", "longest at", "what to do"))
    assert row[4] == "step 2 +0.3 ms"
    assert f"{t:,}"[:9] not in " ".join(page.text)


def test_emulator_overhead_is_its_own_bar() -> None:
    """Issue 23, 14: with the emulator's own host work in the trace, the step breakdown's bars
    still add up to the wall time: the emulator overhead is a series of its own (the report's
    per-step figure), never idle of a cause. One 1 ms step: compute 0-100 and 900-1000 µs,
    emulator work 110-890 µs, 20 µs idle."""
    b = Build().step(1, 0, 1000)
    b.kernel(0, 100, launch_us=0)
    b.host(V.OVERHEAD_PREFIX + "numerics", 110, 890, kind=EventKind.OTHER, cat=V.CAT_OVERHEAD)
    b.kernel(900, 1000, launch_us=0)
    report = html_report(b)
    page = parse(render_html([report]))
    assert_matches_report(page, report)  # the stack is the wall time
    series = _series(page.figures()["chart-0-breakdown"])
    assert series["emulator_overhead"]["y"] == [0.78]
    assert series["emulator_overhead"]["marker"]["color"] == EMULATOR_OVERHEAD_COLOUR
    assert sum(series[k]["y"][0] for k in series if k.startswith("idle:")) == pytest.approx(0.02)
    assert "then the emulator overhead" in " ".join(page.text)


def test_cause_colours_are_the_one_palette(two_core) -> None:  # noqa: ANN001
    """Issue 23, 14: every idle cause has one colour, the palette's (the TensorBoard page draws
    with the same one, served by its ``style`` route: tests/unit/test_tb_plugin.py), in the
    breakdown and in the timeline."""
    _, page = two_core
    assert set(CAUSE_COLOURS) == set(ALL_CAUSES)
    assert len(set(CAUSE_COLOURS.values())) == len(ALL_CAUSES)
    drawn = 0
    for fig in ("chart-0-breakdown", "chart-0-timeline"):
        for t in page.figures()[fig]["data"]:
            meta = t["meta"]
            name = meta["cause"] if isinstance(meta, dict) else meta.removeprefix("idle:")
            if name in ALL_CAUSES:
                assert t["marker"]["color"] == CAUSE_COLOURS[name], (fig, name)
                drawn += 1
    assert drawn >= 6  # 3 causes in each chart


def test_trace_text_is_escaped_everywhere(two_core) -> None:  # noqa: ANN001
    report, page = two_core
    text = render_html([report])
    assert HOSTILE not in text and "alert(2)</script>" not in text
    assert not [tag for tag, _ in page.tags if tag == "img"]
    # only the page's own scripts: plotly.js, one figure per chart, the boot script
    assert len(page.scripts) == 1 + 3 + 1
    assert "".join(page.text).count(HOSTILE) >= 2  # the findings and fallback tables


def test_the_shared_check_agrees(two_core) -> None:  # noqa: ANN001
    report, page = two_core
    assert_matches_report(page, report)


def test_page_is_offline(two_core) -> None:  # noqa: ANN001
    _, page = two_core
    assert_offline(page)
    plotly_js = page.scripts[0][1]
    assert "Plotly" in plotly_js and len(plotly_js) > 1_000_000  # inlined, not referenced


def test_empty_states_say_so() -> None:
    host_only = html_report(Build().step(1, 0, 100).host("aten::add", 10, 20))
    no_fallback = html_report(
        Build().step(1, 0, 100).kernel(0, 40, launch_us=0).kernel(60, 100, launch_us=60)
    )
    no_steps = html_report(Build().kernel(0, 40, launch_us=0))
    page = parse(render_html([host_only, no_fallback, no_steps]))
    text = " ".join(page.text)
    assert f"note: {NOTE_NO_STEPS}" in text
    assert "No device events in this trace: no step breakdown" in text
    assert "No device events in this trace: no idle timeline" in text
    assert text.count("No CPU fallbacks in this trace: nothing to chart.") == 3
    assert "note: no device events: host-only report" in text
    assert set(page.figures()) == {"chart-1-breakdown", "chart-1-timeline", "chart-2-breakdown"}
    assert "No device idle gaps inside the steps." in text  # no_steps: busy all along


def many_gaps_trace(n: int) -> TraceBuilder:
    """One core, n kernels of 10 µs with gaps of 1..997 µs between them (some shorter than the
    50 µs min gap): n - 1 gaps, all inside one step."""
    b = TraceBuilder("many")
    gaps = 1 + (np.arange(n) * 7919) % 997
    starts = np.concatenate([[0], np.cumsum(gaps[:-1] + 10)]) * US
    for s in starts.tolist():
        b.add(
            name="TensorE: mm",
            ts_ns=s,
            dur_ns=10 * US,
            kind=EventKind.KERNEL,
            cat="kernel",
            pid=0,
            tid=1,
        )
    b.add(
        name="ProfilerStep#1",
        ts_ns=0,
        dur_ns=int(starts[-1]) + 10 * US,
        kind=EventKind.USER_ANNOTATION,
        cat="user_annotation",
        pid=100,
        tid=100,
    )
    return b


def test_a_trace_with_100k_gaps_is_drawn_in_bins_and_counts_every_gap() -> None:
    report = analyze(
        many_gaps_trace(100_001).build(), Options(hta=False, tb=False, timeline_segments=2000)
    )
    idle = report.idle
    assert len(idle.gap_cause) == 100_000
    page = parse(render_html([report]))
    traces = page.figures()["chart-0-timeline"]["data"]
    rows = page.table_after(("device", "cause", "gaps", "idle ms", "drawn as"))
    want = np.bincount(idle.gap_cause, minlength=len(ALL_CAUSES))
    assert {t["meta"]["cause"] for t in traces} == {"other", "short_gaps"}
    for t in traces:
        cause = t["meta"]["cause"]
        (row,) = [r for r in rows if r[1] == cause]
        assert t["meta"]["gaps"] == int(row[2].replace(",", "")) == want[ALL_CAUSES.index(cause)]
        assert not t["meta"]["exact"] and len(t["x"]) <= 2000 and row[4].endswith(" bins")
        idle_ns = idle.by_cause_ns[cause]  # each bin's idle adds up to the cause's total
        assert sum(t["x"]) * 1e3 == pytest.approx(idle_ns, abs=1)
        assert all(x <= n for x, (_, n) in zip(t["x"], t["customdata"], strict=True))
        assert float(row[3].replace(",", "")) == pytest.approx(idle_ns / 1e6, abs=1e-3)
    assert sum(len(t["x"]) for t in traces) <= 4000 < len(idle.gap_cause)
    assert (
        "2 of 2 series (device and cause) have more than 2,000 gaps: those are drawn by bins of"
    ) in " ".join(page.text)


def _write_trace(tmp_path: Path, name: str, b: Build) -> Path:
    path = tmp_path / name
    write_chrome_trace(b.b.build(), path)
    return path


def test_cli_writes_one_page_for_every_input(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    a = _write_trace(tmp_path, "a.json", two_core_trace())
    b = _write_trace(tmp_path, "b.json", Build().step(1, 0, 100).kernel(0, 40, launch_us=0))
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    out = tmp_path / "report.html"
    assert main(["analyze", str(a), str(b), str(bad), "--json", "--html", str(out)]) == 2
    captured = capsys.readouterr()
    assert len(json.loads(captured.out)["traces"]) == 2  # stdout stays the JSON document
    assert f"wrote the HTML report (2 traces) to {out}" in captured.err
    page = parse(out.read_text())
    assert set(page.figures()) >= {"chart-0-breakdown", "chart-1-breakdown", "chart-0-pareto"}
    (error,) = page.table_after(("input", "problem"))
    assert error[0] == str(bad)
    assert sorted(os.listdir(tmp_path)) == ["a.json", "b.json", "bad.json", "report.html"]


def test_cli_refuses_to_overwrite_an_input(tmp_path: Path) -> None:
    a = _write_trace(tmp_path, "a.json", two_core_trace())
    before = a.read_bytes()
    assert main(["analyze", str(a), "--html", str(a)]) == 2
    assert a.read_bytes() == before


class _FullDisk:
    def __init__(self, real: Any) -> None:
        self.real = real

    def write(self, data: Any) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def __enter__(self) -> _FullDisk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.real.close()


def test_a_failed_write_keeps_the_old_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "report.html"
    out.write_text("old page")
    monkeypatch.setattr(
        _output, "open", lambda fd, mode: _FullDisk(builtins.open(fd, mode)), raising=False
    )
    with pytest.raises(OutputError, match="disk full"):
        write_html([html_report(two_core_trace())], out)
    assert out.read_text() == "old page" and os.listdir(tmp_path) == ["report.html"]


@pytest.mark.parametrize(
    "content",
    [b"", b"\x00\xff garbage \x1f\x8b", b'{"lr": 0.1}'],
    ids=["empty", "garbage", "config"],
)
def test_no_analysable_input_leaves_the_old_page(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: bytes,  # noqa: ANN001
) -> None:
    """Issue 23, 12: an empty, garbage or non-trace file is an error (exit 2) and the page
    that was there stays; none is created where there was none."""
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    out = tmp_path / "r.html"
    out.write_text("a good report")
    assert main(["analyze", str(bad), "--html", str(out)]) == 2
    err = capsys.readouterr().err
    assert out.read_text() == "a good report"
    assert sorted(os.listdir(tmp_path)) == ["bad.json", "r.html"]  # no temp file left either
    assert f"{out} not written" in err and "wrote the HTML report" not in err
    out.unlink()
    assert main(["analyze", str(bad), "--html", str(out)]) == 2
    assert os.listdir(tmp_path) == ["bad.json"]


def test_a_directory_without_traces_writes_no_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its files that are not traces are skipped (exit 0, as before): still nothing to show."""
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "config.json").write_text('{"lr": 0.1}')
    out = tmp_path / "r.html"
    out.write_text("a good report")
    assert main(["analyze", str(tmp_path / "runs"), "--html", str(out)]) == 0
    assert out.read_text() == "a good report"
    assert f"{out} not written" in capsys.readouterr().err


def _one_allocation() -> TraceBuilder:
    """One step; cuda:0 allocates 1 KiB; no capacity given, so no memory finding."""
    b = TraceBuilder("mem")
    b.add(
        name="ProfilerStep#1",
        ts_ns=0,
        dur_ns=100 * US,
        kind=EventKind.USER_ANNOTATION,
        cat="user_annotation",
        pid=1,
        tid=1,
    )
    b.add(
        name=V.MEMORY_EVENT,
        ts_ns=10 * US,
        ph=S.Phase.INSTANT,
        kind=EventKind.CPU_INSTANT,
        cat="cpu_instant_event",
        pid=1,
        tid=1,
        args={
            V.ARG_MEM_DEVICE_TYPE: 1,
            V.ARG_MEM_DEVICE_ID: 0,
            V.ARG_MEM_ADDR: 1,
            V.ARG_MEM_BYTES: 1024,
            V.ARG_MEM_TOTAL_ALLOCATED: 1024,
        },
    )
    return b


def test_memory_empty_state_says_the_rules_margin(monkeypatch: pytest.MonkeyPatch) -> None:
    """The near-capacity margin comes from the analysis (its rule's), not the renderer: with the
    rule's margin at 25%, the page and the --json section say 25."""
    from neuron_profiler.analysis import causes as C
    from neuron_profiler.reports.json_report import memory_document

    default = analyze(_one_allocation().build(), HTML_OPTIONS)
    assert default.memory is not None and default.memory.findings == ()
    assert memory_document(default)["near_capacity_pct"] == pytest.approx(10.0)  # margin 0.10
    monkeypatch.setattr(C.MEMORY_NEAR_CAPACITY, "margin", 0.25)
    report = analyze(_one_allocation().build(), HTML_OPTIONS)
    assert memory_document(report)["near_capacity_pct"] == pytest.approx(25.0)
    text = " ".join(parse(render_html([report])).text)
    assert "no device within 25% of its capacity" in text
    assert "10%" not in text
