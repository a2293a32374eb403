"""The Projection view in headless Chromium, the plugin served by werkzeug in this process: the
view's tables are the ``projection`` route's document (``neuron-prof project --json``, checked
against the CLI in tests/unit/test_tb_plugin_projection.py) at the displayed rounding, its
chart holds the per-class figures, the chip selector projects again, an op name that is HTML
stays text, and the page's script logs no error.

A missing Chromium/chromedriver/selenium fails under CI=true (scripts/test.sh installs them)
and skips elsewhere.
"""

from __future__ import annotations

import pytest

pytest.importorskip("tensorboard")

from html_checks import HOSTILE  # noqa: E402
from tb_plugin_client import ROUTE, headless_chrome, served_plugin  # noqa: E402
from test_tb_frontend_browser import _browser_parts, _cells, _wait  # noqa: E402
from trace_factory import mm_then_sync as _mm_then_sync  # noqa: E402

from neuron_profiler.exporters.chrome import write_chrome_trace  # noqa: E402


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """(page URL, the plugin's WSGI client) over one V100 trace: the synthetic mm + sync step
    with an op named as HTML that launches a kernel."""
    _browser_parts()

    b = _mm_then_sync()
    b.b.metadata["deviceProperties"] = [{"id": 0, "name": "Tesla V100-SXM2-32GB"}]
    b.host(HOSTILE, 600, 700, args={"Input Dims": [[64, 256]], "Input type": ["float"]})
    b.kernel(610, 650, launch_us=605, name="relu_kernel")
    logdir = tmp_path_factory.mktemp("tb_projection")
    (logdir / "mm").mkdir()
    write_chrome_trace(b.b.build(), logdir / "mm" / "w.1.pt.trace.json")
    (logdir / "second").mkdir()  # another run: "Recorded on" does not follow the user there
    other = _mm_then_sync()
    other.b.metadata["deviceProperties"] = [{"id": 0, "name": "Tesla V100-SXM2-32GB"}]
    write_chrome_trace(other.b.build(), logdir / "second" / "w.1.pt.trace.json")
    with served_plugin(logdir) as answer:
        yield answer


@pytest.fixture(scope="module")
def driver(served):  # noqa: ANN001, ANN201
    from test_tb_frontend_browser import CHROMEDRIVER, CHROMIUM, TIMEOUT_S

    with headless_chrome(CHROMIUM, CHROMEDRIVER, TIMEOUT_S) as d:
        d.get(served[0])
        _wait(d, "the report", "return document.getElementById('view').dataset.state === 'ready'")
        yield d


def _projection_shown(driver, chip: str) -> None:  # noqa: ANN001
    _wait(
        driver,
        f"the projection onto {chip}",
        "const v = document.getElementById('view');"
        "return v.dataset.state === 'ready' && v.dataset.view === 'Projection' && "
        f"document.getElementById('chip') && document.getElementById('chip').value === '{chip}' && "
        "v.querySelector(\"table[data-table='classes']\") && "
        "[...v.querySelectorAll('.chart')].every(c => c.querySelector('svg.main-svg g.trace'))",
    )


def _shown(v: float) -> str:
    """The page's number rule (app.js fmt): an integral number as an integer, else 3 digits."""
    return str(int(v)) if float(v).is_integer() else f"{v:.3f}"


def _route(served, chip: str, source: str = "") -> dict:  # noqa: ANN001
    client = served[1]
    runs = client.get(f"{ROUTE}/runs").get_json()["runs"]
    r = runs[0]
    w = r["workers"][0]
    q = {"run": r["id"], "worker": w["id"], "span": w["spans"][0]["id"], "chip": chip}
    return client.get(f"{ROUTE}/projection", query_string={**q, "source": source}).get_json()


def test_projection_view_is_the_routes_document(driver, served) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver.find_element(By.CSS_SELECTOR, "#tabs button[data-view='Projection']").click()
    _projection_shown(driver, "trn2")
    doc = _route(served, "trn2")
    assert _cells(driver, "classes", 0) == [c["class"] for c in doc["classes"]]
    assert _cells(driver, "classes", 2) == [_shown(c["target_ms"]) for c in doc["classes"]]
    step = _cells(driver, "projection-step", 2)
    assert step == [_shown(doc[k]["step_ms"]) for k in ("source", "replay", "target")]
    assert HOSTILE in _cells(driver, "projection-ops", 0)  # as text: no <img> in the page
    assert driver.execute_script("return document.querySelectorAll('#view img').length") == 0
    bars = driver.execute_script(
        "return [...document.querySelectorAll('#view .chart')][0].data.map(t => t.y)"
    )
    assert bars == [
        [c["source_ms"] for c in doc["classes"]],
        [c["target_ms"] for c in doc["classes"]],
    ]
    Select(driver.find_element(By.ID, "chip")).select_by_value("h100")
    _projection_shown(driver, "h100")
    assert _cells(driver, "projection-step", 1)[2] == "h100"
    assert _cells(driver, "projection-step", 2)[2] == _shown(
        _route(served, "h100")["target"]["step_ms"]
    )
    # "Recorded on" (--source-chip): the same trace read as an A100's, projected again
    Select(driver.find_element(By.ID, "source")).select_by_value("a100")
    _wait(
        driver,
        "the projection from a100",
        "const v = document.getElementById('view');"
        "const t = v.querySelector(\"table[data-table='projection-step']\");"
        "return v.dataset.state === 'ready' && t && t.rows[1].cells[1].textContent === 'a100'",
    )
    from_a100 = _route(served, "h100", "a100")
    assert from_a100["source"]["chip"] == "a100"
    assert _cells(driver, "projection-step", 2)[2] == _shown(from_a100["target"]["step_ms"])
    # another trace: its own chip again (the choice belonged to the trace it was made for)
    Select(driver.find_element(By.ID, "run")).select_by_visible_text("second")
    _wait(
        driver,
        "the second run's projection",
        "const v = document.getElementById('view');"
        "const t = v.querySelector(\"table[data-table='projection-step']\");"
        "return v.dataset.state === 'ready' && t && t.rows[1].cells[1].textContent === 'v100'"
        " && document.getElementById('source').value === ''",
    )
    errors = [
        e
        for e in driver.get_log("browser")
        if e["level"] == "SEVERE" and "favicon" not in e["message"]
    ]
    assert errors == []
