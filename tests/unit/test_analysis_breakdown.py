"""The step breakdown's wall - busy is ``not_busy``, not idle: on an emulated device it holds the
emulator's own host work, which the idle analysis (idle by cause) leaves out. The breakdown says
how much of it is emulator overhead, and the renderers label it from that, never from the idle
result."""

from __future__ import annotations

import dataclasses
import io
import json

import jsonschema
import numpy as np
from html_checks import parse
from rich.console import Console
from trace_factory import US, Build

from neuron_profiler.analysis.report import Report
from neuron_profiler.reports.html_report import render_html
from neuron_profiler.reports.json_report import to_document
from neuron_profiler.reports.terminal import render_terminal
from neuron_profiler.trace import EventKind
from neuron_profiler.trace import vocabulary as V


def emulated() -> Build:
    """Step 1 (0-1000 µs): compute 0-100 and 900-1000, the emulator's own host work 110-890, a
    collective wait 850-900 (a wait is the device's idle, never discounted). Step 2
    (1000-2000): compute 1000-1500 and 1700-2000, no emulator work.

    By hand: busy 200 / 800 µs, not busy 800 / 200; emulator overhead 110-850 = 740 / 0 (its
    850-890 lies under the wait); idle 100-110 + 850-900 = 60 / 1500-1700 = 200."""
    b = Build().step(1, 0, 1000).step(2, 1000, 2000)
    b.kernel(0, 100, launch_us=0)
    b.host(V.OVERHEAD_PREFIX + "numerics", 110, 890, kind=EventKind.OTHER, cat=V.CAT_OVERHEAD)
    b.kernel(850, 900, launch_us=0, name=V.COLLECTIVE_WAIT_NAME, stream=3)
    b.kernel(900, 1000, launch_us=0)
    b.kernel(1000, 1500, launch_us=990)
    b.kernel(1700, 2000, launch_us=1690)
    return b


def test_not_busy_is_idle_plus_the_emulator_overhead() -> None:
    r = emulated().report()
    (d,) = r.breakdown.devices
    (idle,) = r.idle.devices
    assert d.not_busy_ns.tolist() == [800 * US, 200 * US]
    assert d.emulator_overhead_ns.tolist() == [740 * US, 0]
    assert d.collective_wait_ns.tolist() == [50 * US, 0]
    per_step_idle = [sum(s.values()) for s in idle.per_step_by_cause_ns]
    assert per_step_idle == [60 * US, 200 * US]
    # the two figures differ by exactly the emulator overhead, under their own names
    assert (d.not_busy_ns - d.emulator_overhead_ns).tolist() == per_step_idle
    assert idle.idle_ns == int(d.not_busy_ns.sum() - d.emulator_overhead_ns.sum()) == 260 * US
    assert not hasattr(d, "idle_ns") and r.breakdown.has_emulator_overhead
    doc = to_document([r])
    jsonschema.validate(doc, json.loads(_schema()))
    assert doc["schema_version"] == "6"
    t = doc["traces"][0]
    (row,) = t["step_breakdown"]["devices"]
    assert row["not_busy_ms"] == [0.8, 0.2] and row["not_busy_pct"] == [80.0, 20.0]
    assert row["emulator_overhead_ms"] == [0.74, 0.0]
    assert "idle_ms" not in row and "idle_pct" not in row
    assert t["step_breakdown"]["has_emulator_overhead"] is True
    assert t["idle"]["devices"][0]["idle_ms"] == 0.26


def _schema() -> str:
    from neuron_profiler.reports.json_report import schema_text

    return schema_text()


def _terminal(report: Report) -> str:
    console = Console(file=io.StringIO(), width=160)
    render_terminal([report], console=console)
    return console.file.getvalue()


def _step_header(text: str) -> list[str]:
    header = next(ln for ln in text.splitlines() if ln.startswith("┃step"))
    return [c.strip() for c in header.strip("┃").split("┃")]


def _with_overhead(report: Report, ns: np.ndarray) -> Report:
    """``report`` with its breakdown's emulator overhead replaced (the idle result kept)."""
    b = dataclasses.replace(report.breakdown, emulator_overhead_ns=ns)
    return dataclasses.replace(report, breakdown=b)


def test_renderers_label_not_busy_from_the_breakdown() -> None:
    """Injected: the breakdown alone says whether (and how much) emulator overhead lies in
    not busy; the terminal's emu. column, the HTML report's bar and caption and the JSON flag
    follow it, whatever the idle result says."""
    real = Build().step(1, 0, 1000)
    real.kernel(0, 100, launch_us=0).kernel(300, 1000, launch_us=290)
    plain = real.report()
    assert not plain.breakdown.has_emulator_overhead and not plain.idle.emulator_overhead_ns
    injected = _with_overhead(plain, np.array([[123 * US]], np.int64))
    text = _terminal(injected)
    assert _step_header(text)[-3:] == ["not busy", "not busy %", "emu."]
    assert "0.123" in text and "emulator's own host work" in text
    page = parse(render_html([injected]))
    bars = {t["meta"]: t for t in page.figures()["chart-0-breakdown"]["data"]}
    assert bars["emulator_overhead"]["y"] == [0.123]
    assert "then the emulator overhead" in " ".join(page.text)
    assert to_document([injected])["traces"][0]["step_breakdown"]["has_emulator_overhead"]
    # and the other way: the idle result has emulator overhead, the breakdown (zeroed) none
    emu = emulated().report()
    hidden = _with_overhead(emu, np.zeros_like(emu.breakdown.emulator_overhead_ns))
    assert emu.idle.emulator_overhead_ns
    text = _terminal(hidden)
    assert _step_header(text)[-2:] == ["not busy", "not busy %"]
    assert "the idle time of the idle-by-cause table" in text
    page = parse(render_html([hidden]))
    assert "emulator_overhead" not in {
        t["meta"] for t in page.figures()["chart-0-breakdown"]["data"]
    }
