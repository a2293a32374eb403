"""The TensorBoard page's own display rules in headless Chromium (issue 23, 13 and 14), with the
plugin served by werkzeug in this process (no TensorBoard process, so it is quick): the page
draws every idle cause in the colour the ``style`` route serves, the HTML report's palette, and
shows names from the trace shortened exactly as ``reports.text.shorten`` does while the
documents it reads keep them whole.

A missing Chromium/chromedriver/selenium fails under CI=true (scripts/test.sh installs them)
and skips elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("tensorboard")

from html_checks import two_core_trace  # noqa: E402
from tb_plugin_client import headless_chrome, served_plugin  # noqa: E402

from neuron_profiler.analysis.causes import ALL_CAUSES  # noqa: E402
from neuron_profiler.exporters.chrome import write_chrome_trace  # noqa: E402
from neuron_profiler.reports.html_report import CAUSE_COLOURS  # noqa: E402
from neuron_profiler.reports.text import shorten  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
TIMEOUT_S = 120
POLL_S = 0.05  # between two looks at the page (a look: one script, a few ms)
LONG_OP = "aten::" + "long_op_" * 2000 + "end"  # 16 kB
LONG_KERNEL = "TensorE: " + "k" * 5000 + "\U0001f600 end"  # an astral character near the end
LONG_DEVICE = "NeuronCore " + "d" * 3000


def _browser_parts() -> None:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package")
    if missing:
        reason = f"browser test needs {', '.join(missing)} (scripts/browser.sh)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(scope="module")
def page_url(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """The plugin over a logdir with one trace: the HTML tests' two-core trace (cpu_fallback,
    data_loading and other idle), with a 16 kB op, a 5 kB kernel and a 3 kB device name."""
    _browser_parts()

    b = two_core_trace()
    b.b.process_names[0] = LONG_DEVICE
    b.host(LONG_OP, 1750, 1800)
    b.kernel(1810, 1820, launch_us=1805, name=LONG_KERNEL)
    logdir = tmp_path_factory.mktemp("tb_frontend")
    (logdir / "names").mkdir()
    write_chrome_trace(b.b.build(), logdir / "names" / "w.1.pt.trace.json")
    with served_plugin(logdir) as (url, _):
        yield url


@pytest.fixture(scope="module")
def driver(page_url: str):  # noqa: ANN201
    with headless_chrome(CHROMIUM, CHROMEDRIVER, TIMEOUT_S) as d:
        d.get(page_url)
        _wait(d, "the report", "return document.getElementById('view').dataset.state === 'ready'")
        yield d


def _wait(driver, what: str, script: str):  # noqa: ANN001, ANN202
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, TIMEOUT_S, poll_frequency=POLL_S).until(
        lambda d: d.execute_script(script), message=what
    )


def _show(driver, view: str) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    driver.find_element(By.CSS_SELECTOR, f"#tabs button[data-view='{view}']").click()
    _wait(
        driver,
        f"view {view}",
        "const v = document.getElementById('view');"
        f"return v.dataset.state === 'ready' && v.dataset.view === '{view}' && "
        "[...v.querySelectorAll('.chart')].every(c => c.querySelector('svg.main-svg g.trace'))",
    )


def _cells(driver, name: str, column: int) -> list[str]:  # noqa: ANN001
    return driver.execute_script(
        f"return [...document.querySelectorAll(\"table[data-table='{name}'] tbody tr\")]"
        f".map(r => r.cells[{column}].textContent)"
    )


def test_shorten_is_the_python_rule(driver) -> None:  # noqa: ANN001
    cases = [
        ("aten::add", 200),
        (LONG_OP, 200),
        (LONG_KERNEL, 200),
        (LONG_KERNEL, 5001),
        ("\U0001f600" * 9, 4),
        ("a\U0001f600b\U0001f600c\U0001f600d", 5),
        ("abcdef", 1),
        ("x" * 1000, 1000),
        ("x" * 1001, 1000),
    ]
    got = driver.execute_script(
        "return arguments[0].map(([s, n]) => shorten(s, n))", [list(c) for c in cases]
    )
    assert got == [shorten(s, n) for s, n in cases]


def test_names_are_shown_shortened(driver) -> None:  # noqa: ANN001
    _show(driver, "Operators")
    assert shorten(LONG_OP) in _cells(driver, "ops", 0)
    _show(driver, "Kernels")
    assert shorten(LONG_KERNEL) in _cells(driver, "kernels", 0)
    _show(driver, "Overview")
    labels = driver.execute_script(
        "return [...document.querySelectorAll('#view .chart')].flatMap(c => (c.data || [])"
        ".flatMap(t => [t.name, ...(Array.isArray(t.x) ? t.x : [])]))"
    )
    assert shorten(LONG_DEVICE) in labels and LONG_DEVICE not in labels
    assert max(len(str(x)) for x in labels) <= 200 + len(" DMA (no compute or collective)")


def test_not_busy_is_labelled_from_the_step_breakdown(driver) -> None:  # noqa: ANN001
    """The Overview's wall - busy bar is "not busy", the document's series; whether the
    emulator's own work lies in it is the step breakdown's flag (here injected into the shown
    document: its idle section still says no emulator overhead), never worked out by the page."""
    _show(driver, "Overview")
    got = driver.execute_script(
        "const c = document.querySelector('#view .chart');"
        "const bars = c.data.filter(t => t.name.endsWith(' not busy')).map(t => t.y);"
        "const notes = (doc) => views.Overview(doc).filter(e => e.classList"
        " && e.classList.contains('note')).map(e => e.textContent);"
        "const sb = state.doc.step_breakdown;"
        "const emu = {...state.doc, step_breakdown: {...sb, has_emulator_overhead: true}};"
        "return {bars, want: sb.devices.map(d => d.not_busy_ms), plain: notes(state.doc),"
        " emu: notes(emu), idle_emu: state.doc.idle.emulator_overhead_ms};"
    )
    assert got["bars"] == got["want"] and len(got["bars"]) == 2
    assert got["plain"] == ["not busy = wall − busy: the idle time of the Idle view"]
    assert got["idle_emu"] == 0 and len(got["emu"]) == 1
    assert got["emu"][0].startswith("not busy = wall − busy: idle time plus the emulator's own")


def test_overview_device_bars_stack_to_the_step_wall(driver) -> None:  # noqa: ANN001
    """Each device's stacked bars are disjoint parts of its step: compute, collectives without
    compute, copies without either, not busy. They stacked compute, DMA and collectives,
    which overlap, so a bar could be taller than its step."""
    _show(driver, "Overview")
    got = driver.execute_script(
        "const c = document.querySelector('#view .chart');"
        "const sb = state.doc.step_breakdown;"
        "return {walls: sb.steps.map(s => s.wall_ms), devices: sb.devices.length,"
        " bars: c.data.filter(t => t.offsetgroup).map(t => ({group: t.offsetgroup, y: t.y}))};"
    )
    assert got["devices"] == 2
    for group in ("1", "2"):  # one offset group per device (labels are hostile text here)
        mine = [b["y"] for b in got["bars"] if b["group"] == group]
        assert len(mine) == 4
        for step, wall in enumerate(got["walls"]):
            assert sum(y[step] for y in mine) == pytest.approx(wall, abs=1e-3)


def test_idle_causes_in_the_html_reports_colours(driver) -> None:  # noqa: ANN001
    _show(driver, "Idle")
    charts = driver.execute_script(
        "return [...document.querySelectorAll('#view .chart')].map(c => (c.data || [])"
        ".map(t => ({name: t.name, x: t.x, color: t.marker && t.marker.color})))"
    )
    by_cause, timeline = charts
    (bars,) = by_cause
    assert sorted(bars["x"]) == sorted(ALL_CAUSES)  # every cause, drawn or not
    for cause, colour in zip(bars["x"], bars["color"], strict=True):
        assert colour == CAUSE_COLOURS[cause], cause
    drawn = {t["name"].rsplit(" · ", 1)[1]: t["color"] for t in timeline}
    assert {"cpu_fallback", "data_loading", "other"} <= set(drawn)
    for cause, colour in drawn.items():
        assert colour == CAUSE_COLOURS[cause], cause
    swatches = driver.execute_script(
        "return [...document.querySelectorAll('#view .swatch')]"
        ".map(s => [s.textContent, getComputedStyle(s).borderTopColor])"
    )
    rgb = {
        c: "rgb({}, {}, {})".format(*(int(v[i : i + 2], 16) for i in (1, 3, 5)))
        for c, v in CAUSE_COLOURS.items()
    }
    assert dict(swatches) == rgb


def test_no_script_error(driver) -> None:  # noqa: ANN001
    """Every view rendered above without an error from the page's script."""
    for view in ("Overview", "Operators", "Kernels", "Fallbacks", "Idle", "Trace"):
        _show(driver, view)
    errors = [
        e
        for e in driver.get_log("browser")
        if e["level"] == "SEVERE" and "favicon" not in e["message"]
    ]
    assert errors == []


def test_signed_changes_never_show_a_negative_zero(driver) -> None:  # noqa: ANN001
    """The Projection view's replay error and the Diff view's changes are signed as the HTML
    pages sign them (reports/text.signed): a -0.001% replay error read "-0.00%"."""
    got = driver.execute_script(
        "return [signed(-0.001, 2), signed(0, 2), signed(36.5012, 3), signed(-1.24, 1),"
        " signed(-0.0000004, 6)];"
    )
    assert got == ["+0.00", "+0.00", "+36.501", "-1.2", "+0.000000"]
