"""The Memory view in headless Chromium, the plugin served by werkzeug in this process: its
tables are the report route's ``memory`` section (``neuron-prof analyze --json``'s) at the
displayed rounding, its charts the section's timelines by category per device (allocated and
reserved of the allocator; the HBM usage categories), an op named as HTML stays text, a trace
without memory events shows the empty state, and the page's script logs no error.

A missing Chromium/chromedriver/selenium fails under CI=true (scripts/test.sh installs them)
and skips elsewhere.
"""

from __future__ import annotations

import pytest

pytest.importorskip("tensorboard")

from html_checks import HOSTILE  # noqa: E402
from tb_plugin_client import ROUTE, headless_chrome, served_plugin  # noqa: E402
from test_tb_frontend_browser import _browser_parts, _wait  # noqa: E402
from test_tb_plugin_browser import assert_tables_match, show  # noqa: E402

from neuron_profiler.exporters.chrome import write_chrome_trace  # noqa: E402
from neuron_profiler.trace import schema as S  # noqa: E402
from neuron_profiler.trace import vocabulary as V  # noqa: E402
from neuron_profiler.trace.model import Trace, TraceBuilder  # noqa: E402

US = 1000
MIB = 2**20
EMPTY = "no memory events in this trace"
CAPACITY = 4 * MIB + MIB // 4  # the 4 MiB reserve is 94% of it: a near-capacity finding


def _memory_trace() -> Trace:
    """Two steps; on cuda:0 (4.25 MiB) an op named as HTML allocates 3 MiB (reserve 4 MiB) and
    frees it, another op 1 MiB kept; a NeuronCore's HBM usage counters in two categories."""
    b = TraceBuilder()
    b.metadata["deviceProperties"] = [{"id": 0, "name": "GPU", "totalGlobalMem": CAPACITY}]
    b.process_names = {900: "NeuronCore 3"}
    for k in range(2):
        b.add(
            name=f"ProfilerStep#{k}",
            ts_ns=k * 100 * US,
            dur_ns=100 * US,
            kind=S.EventKind.USER_ANNOTATION,
            cat="user_annotation",
            pid=1,
            tid=1,
        )
    for name, start in ((HOSTILE, 10), ("aten::mm", 110)):
        b.add(
            name=name,
            ts_ns=start * US,
            dur_ns=20 * US,
            kind=S.EventKind.CPU_OP,
            cat="cpu_op",
            pid=1,
            tid=1,
        )
    total = 0
    for t, addr, nbytes in ((15, 1, 3 * MIB), (50, 1, -3 * MIB), (115, 2, MIB)):
        total += nbytes
        b.add(
            name="[memory]",
            ts_ns=t * US,
            ph=S.Phase.INSTANT,
            kind=S.EventKind.CPU_INSTANT,
            cat="cpu_instant_event",
            pid=1,
            tid=1,
            args={
                "Device Type": 1,
                "Device Id": 0,
                "Addr": addr,
                "Bytes": nbytes,
                "Total Allocated": total,
                "Total Reserved": 4 * MIB,
            },
        )
    for t, usage in ((0, {"tensors": 100, "model_code": 50}), (60, {"tensors": 900})):
        b.add(
            name="HBM 0 in use (bytes)",
            ts_ns=t * US,
            ph=S.Phase.COUNTER,
            cat=V.CAT_HBM_USAGE,
            pid=900,
            args=usage,
        )
    return b.build()


def _plain_trace() -> Trace:
    b = TraceBuilder()
    b.add(name="aten::mm", ts_ns=0, dur_ns=10 * US, kind=S.EventKind.CPU_OP, cat="cpu_op", pid=1)
    return b.build()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """(page URL, the plugin's WSGI client) over a run with memory and a run without."""
    _browser_parts()

    logdir = tmp_path_factory.mktemp("tb_memory")
    for run, trace in (("a_memory", _memory_trace()), ("b_plain", _plain_trace())):
        (logdir / run).mkdir()
        write_chrome_trace(trace, logdir / run / "w.1.pt.trace.json")
    with served_plugin(logdir) as answer:
        yield answer


@pytest.fixture(scope="module")
def driver(served):  # noqa: ANN001, ANN201
    from test_tb_frontend_browser import CHROMEDRIVER, CHROMIUM, TIMEOUT_S

    with headless_chrome(CHROMIUM, CHROMEDRIVER, TIMEOUT_S) as d:
        d.get(served[0])
        _wait(d, "the report", "return document.getElementById('view').dataset.state === 'ready'")
        yield d


def _document(served, run_name: str) -> dict:  # noqa: ANN001
    client = served[1]
    runs = client.get(f"{ROUTE}/runs").get_json()["runs"]
    r = next(r for r in runs if r["name"] == run_name)
    w = r["workers"][0]
    q = {"run": r["id"], "worker": w["id"], "span": w["spans"][0]["id"]}
    return client.get(f"{ROUTE}/report", query_string=q).get_json()["traces"][0]


def _choose_run(driver, served, run_name: str) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    runs = served[1].get(f"{ROUTE}/runs").get_json()["runs"]
    run_id = next(r["id"] for r in runs if r["name"] == run_name)
    Select(driver.find_element(By.ID, "run")).select_by_value(run_id)
    _wait(driver, "the report", "return document.getElementById('view').dataset.state === 'ready'")


def test_memory_view_is_the_reports_memory_section(driver, served) -> None:  # noqa: ANN001
    _choose_run(driver, served, "a_memory")
    doc = _document(served, "a_memory")
    mem = doc["memory"]
    shown = show(driver, "Memory")
    names = [t["name"] for t in shown["tables"]]
    assert names == [
        "memory.devices",
        "memory.findings",
        "memory.devices.0.by_op",
        "memory.devices.0.live_at_peak",
    ]
    assert assert_tables_match(shown, doc) > 0
    gpu, core = mem["devices"]
    assert (gpu["device"], gpu["peak_bytes"], gpu["capacity_bytes"]) == (
        "cuda:0",
        3 * MIB,
        CAPACITY,
    )
    assert (core["device"], core["peak_bytes"]) == ("NeuronCore 3", 900)
    assert [(f["kind"], f["device"]) for f in mem["findings"]] == [
        ("memory_near_capacity", "cuda:0")
    ]
    ops = [r[0] for r in shown["tables"][2]["rows"]]
    assert HOSTILE in ops  # as text: no <img> in the page
    assert driver.execute_script("return document.querySelectorAll('#view img').length") == 0
    # one chart per device, one line per category, in MiB over the trace's µs
    charts = driver.execute_script(
        "return [...document.querySelectorAll('#view .chart')]"
        ".map(c => c.data.map(t => ({name: t.name, x: t.x, y: t.y})))"
    )
    assert len(charts) == 2
    for chart, device in zip(charts, mem["devices"], strict=True):
        series = device["timeline"]["series"]
        assert [t["name"] for t in chart] == list(series)
        for t in chart:
            assert t["x"] == device["timeline"]["ts_us"]
            assert [round(v * MIB) for v in t["y"]] == series[t["name"]]
    assert list(charts[0][0]["y"]) == [3.0, 0.0, 1.0]  # allocated, MiB
    assert [t["name"] for t in charts[1]] == ["model_code", "tensors"]
    errors = [
        e
        for e in driver.get_log("browser")
        if e["level"] == "SEVERE" and "favicon" not in e["message"]
    ]
    assert errors == []


def test_a_trace_without_memory_events_shows_the_empty_state(driver, served) -> None:  # noqa: ANN001
    _choose_run(driver, served, "b_plain")
    assert "memory" not in _document(served, "b_plain")
    shown = show(driver, "Memory")
    assert shown["tables"] == [] and shown["charts"] == 0
    assert len(shown["empty"]) == 1 and shown["empty"][0].startswith(EMPTY)
