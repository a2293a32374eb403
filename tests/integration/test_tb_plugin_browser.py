"""The "Neuron Profiler" tab in a real browser: headless Chromium (Debian ``chromium`` +
``chromium-driver``) driven by Selenium against a real ``tensorboard --logdir`` process.

The logdir holds an emulator trace with injected findings (a CPU-fallback op and host syncs,
timing mode), a CUDA trace from ../shared/traces, a 2-rank run (HTA's sampled rank 0 and 1
traces), a 1-rank run (rank 0 alone), a cut copy of the emulator trace (load warnings) and a
trace whose op name is HTML, and a run of two synthetic traces of a model in nn.Module frames
(its Diff view by module). Each view must render charts/tables or its stated empty state;
every table row must equal ``neuron-prof analyze --json`` of the same file at the displayed
rounding (the Distributed view: of the run's files, its ``distributed`` section; elsewhere its
empty state must carry the analyzer's reason; the Diff view, once a baseline is chosen:
``neuron-prof diff --json`` of the baseline and the shown trace, its waterfall the document's
figures); the Idle timeline's bars must be as long as the
idle time the timeline route gives per bin; the plugin's frame must log no error; "Open in
Perfetto UI" must post the whole .pftrace (window.open stubbed).
Screenshots of every view go to $NEURON_PROF_BROWSER_ARTEFACTS when it is set (none are taken
otherwise: 55 of them cost ~3 s and nothing looks at them); the run's report always goes there,
else to the test's tmp dir.

A missing Chromium/chromedriver/selenium fails under CI=true (scripts/test.sh installs them)
and skips elsewhere.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("tensorboard")

from tb_plugin_client import cli_json, headless_chrome, make_emulator_trace  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTEFACTS_ENV = "NEURON_PROF_BROWSER_ARTEFACTS"
VIEWS = (
    "Overview",
    "Operators",
    "Kernels",
    "Fallbacks",
    "Idle",
    "Memory",
    "Distributed",
    "Diff",
    "Trace",
)
HOSTILE = "<img src=x onerror=alert(1)>"
TIMEOUT_S = 120
# between two looks at the page or the server: each wait ends up to one interval after what it
# waits for, and the page is looked at some 70 times (a look: one script, a few ms)
POLL_S = 0.05
DISTRIBUTED_EMPTY = "no cross-rank analysis: "
HANDLER_MS = 1_700_000_000_000  # 2023-11-14 22:13:20.000 UTC


def _browser_parts() -> None:
    """Skip (fail under CI=true) when Chromium, chromedriver or selenium is missing."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package")
    if missing:
        reason = (
            f"browser test needs {', '.join(missing)} (apt-get install chromium "
            "chromium-driver; pip install -e .[test])"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)


# --- the logdir ----------------------------------------------------------------------------


def _hostile_trace(path: Path) -> None:
    from neuron_profiler.exporters.chrome import write_chrome_trace
    from neuron_profiler.trace import EventKind, TraceBuilder
    from neuron_profiler.trace import vocabulary as V

    b = TraceBuilder()
    b.add(
        name="ProfilerStep#1",
        ts_ns=0,
        dur_ns=1_000_000,
        kind=EventKind.USER_ANNOTATION,
        cat="user_annotation",
        pid=9,
        tid=9,
    )
    for corr, lo in enumerate((0, 400_000), start=1):
        b.add(
            name=HOSTILE, ts_ns=lo, dur_ns=20_000, kind=EventKind.CPU_OP, cat="cpu_op", pid=9, tid=9
        )
        b.add(
            name="nrt launch",
            ts_ns=lo + 1000,
            dur_ns=5000,
            kind=EventKind.RUNTIME,
            cat=V.CAT_RUNTIME,
            pid=9,
            tid=9,
            args={V.ARG_CORRELATION: corr},
        )
        b.add(
            name=HOSTILE,
            ts_ns=lo + 30_000,
            dur_ns=200_000,
            kind=EventKind.KERNEL,
            cat=V.CAT_KERNEL,
            pid=0,
            tid=1,
            args={V.ARG_DEVICE: 0, V.ARG_STREAM: 1, V.ARG_CORRELATION: corr},
        )
    b.process_names[0] = V.core_process_name(0)
    b.thread_names[(0, 1)] = HOSTILE
    path.parent.mkdir(parents=True)
    write_chrome_trace(b.build(), path)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory, shared_traces: Path) -> Path:
    _browser_parts()
    if importlib.util.find_spec("torch") is None:  # (the emulator's process imports it, not this)
        pytest.skip("torch is not installed: no emulator trace")
    root = tmp_path_factory.mktemp("tb_logdir")
    emu = make_emulator_trace(root / "emulator")
    (root / "cuda").mkdir()
    shutil.copy(
        shared_traces
        / "kineto"
        / "tb_plugin"
        / "samples"
        / "resnet50_num_workers_0"
        / "worker0.1623143089861.pt.trace.json.gz",
        root / "cuda",
    )
    (root / "two_ranks").mkdir()
    for rank in (0, 1):
        shutil.copy(
            shared_traces
            / "hta"
            / "tests"
            / "data"
            / "trace_filter"
            / f"sampled_rank-{rank}.json.gz",
            # tensorboard_trace_handler names: {worker}.{time_ns}; here ms, as older torch wrote
            root / "two_ranks" / f"rank{rank}.{HANDLER_MS + rank}.pt.trace.json.gz",
        )
    (root / "one_rank").mkdir()
    shutil.copy(
        shared_traces / "hta" / "tests" / "data" / "trace_filter" / "sampled_rank-0.json.gz",
        root / "one_rank" / "rank0.1.pt.trace.json.gz",
    )
    (root / "damaged").mkdir()
    data = emu.read_bytes()
    (root / "damaged" / "cut.1.pt.trace.json").write_bytes(data[: len(data) * 2 // 3])
    _hostile_trace(root / "hostile" / "h.1.pt.trace.json")
    _module_pair(root / "modules")
    return root


def _module_pair(run: Path) -> None:
    """Workers "before" and "after" of the diff's synthetic model in nn.Module frames, the
    head's kernel 50 µs longer a step after (tests/diff_timeline.py)."""
    from diff_timeline import HEAD, MODEL, build, slower

    from neuron_profiler.exporters.chrome import write_chrome_trace

    run.mkdir()
    for worker, ops in (("before", MODEL), ("after", slower(MODEL, {HEAD: 50}))):
        write_chrome_trace(build(ops)[0], run / f"{worker}.{HANDLER_MS}.pt.trace.json")


# --- the server and the browser ------------------------------------------------------------


# ``tensorboard``'s own entry point (tensorboard.main.run_main: its flags, its plugins found by
# their entry points, ours included) less the PyTorch Profiler plugin (torch-tb-profiler, here
# for the tb-profiler comparison tests), which parses every trace of the logdir in spawned
# processes: ~15 s of CPU taken from the browser and this test, and exiting waited for it.
TENSORBOARD = r"""
from absl import app
from tensorboard import default, main_lib, program

main_lib.global_init()
plugins = [p for p in default.get_plugins() if not p.__module__.startswith("torch_tb_profiler")]
tensorboard = program.TensorBoard(plugins=plugins)
app.run(tensorboard.main, flags_parser=tensorboard.configure)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(logdir: Path, tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    port = _free_port()
    log = (tmp_path_factory.mktemp("tb_server") / "tensorboard.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-c", TENSORBOARD, "--logdir", str(logdir), "--host", "127.0.0.1"]
        + ["--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            assert proc.poll() is None, f"tensorboard exited with {proc.returncode}: {log.name}"
            try:
                with urllib.request.urlopen(f"{url}/data/plugins_listing", timeout=5) as r:
                    if json.load(r).get("neuron_profiler", {}).get("enabled"):
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"tensorboard not ready in {TIMEOUT_S} s"
            time.sleep(POLL_S)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def artefacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = os.environ.get(ARTEFACTS_ENV)
    path = Path(where) if where else tmp_path_factory.mktemp("tb_browser_artefacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


def screenshot(driver, path: Path) -> None:  # noqa: ANN001
    """The page as shown, into ``path``, when $NEURON_PROF_BROWSER_ARTEFACTS asks for them."""
    if os.environ.get(ARTEFACTS_ENV):
        driver.save_screenshot(str(path))


@pytest.fixture(scope="module")
def browser(server: str):  # noqa: ANN201
    with headless_chrome(CHROMIUM, CHROMEDRIVER, TIMEOUT_S) as driver:
        driver.get(f"{server}/#neuron_profiler")
        yield driver


def _wait(driver, what: str, condition, timeout: float = TIMEOUT_S):  # noqa: ANN001, ANN202
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=POLL_S).until(
        lambda d: condition(d), message=what
    )


def enter_plugin_frame(driver) -> None:  # noqa: ANN001
    """From anywhere: back to TensorBoard's page, then into the plugin's iframe."""
    from selenium.webdriver.common.by import By

    driver.switch_to.default_content()
    frame = _wait(
        driver,
        "the plugin's iframe",
        lambda d: d.find_elements(By.CSS_SELECTOR, "iframe[src*='neuron_profiler']"),
    )[0]
    driver.switch_to.frame(frame)
    _wait(
        driver,
        "index.html in the frame",
        lambda d: d.execute_script(
            "return location.pathname.endsWith('/neuron_profiler/index.html') && "
            "!!document.getElementById('run') && document.getElementById('run').options.length > 0"
        ),
    )


def choose(driver, run: str, worker: str | None = None) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element(By.ID, "run")).select_by_visible_text(run)
    if worker is not None:
        Select(driver.find_element(By.ID, "worker")).select_by_visible_text(worker)
    _wait(
        driver,
        f"the report of {run}",
        lambda d: d.execute_script(
            "const v = document.getElementById('view');"
            "return v.dataset.state === 'ready' || v.dataset.state === 'error';"
        ),
    )
    assert (
        driver.execute_script("return document.getElementById('view').dataset.state") == "ready"
    ), driver.find_element(By.ID, "view").text


def show(driver, view: str) -> dict:  # noqa: ANN001
    """Open a view, wait for its charts, and return what it shows: tables (data-table, th
    data-key/digits, cell texts), chart count, empty-state texts, warnings."""
    from selenium.webdriver.common.by import By

    driver.find_element(By.CSS_SELECTOR, f"#tabs button[data-view='{view}']").click()
    _wait(
        driver,
        f"view {view}",
        lambda d: d.execute_script(
            "const v = document.getElementById('view');"
            f"return v.dataset.state === 'ready' && v.dataset.view === '{view}' && "
            "[...v.querySelectorAll('.chart')].every(c => c.querySelector('svg.main-svg g.trace'))"
        ),
    )
    return driver.execute_script("""
        const v = document.getElementById('view');
        return {
          tables: [...v.querySelectorAll('table')].map(t => ({
            name: t.dataset.table || '',
            keys: [...t.tHead.rows[0].cells].map(c => c.dataset.key || ''),
            labels: [...t.tHead.rows[0].cells].map(c => c.textContent),
            digits: [...t.tHead.rows[0].cells].map(c => c.dataset.digits || ''),
            limits: [...t.tHead.rows[0].cells].map(c => c.dataset.limit || ''),
            rows: [...t.tBodies[0].rows].map(r => [...r.cells].map(c => c.textContent)),
          })),
          charts: v.querySelectorAll('.chart').length,
          bars: [...v.querySelectorAll('.chart')].map(c => (c.data || []).map(
            t => (t.orientation === 'h' ? t.x : t.y))),  // per chart, per trace: bar lengths
          straggler_rows: v.querySelectorAll('tr.straggler').length,
          traces: v.querySelectorAll('.chart g.trace').length,
          empty: [...v.querySelectorAll('.empty')].map(e => e.textContent),
          warnings: [...v.querySelectorAll('.warnings p')].map(e => e.textContent),
          notes: [...v.querySelectorAll('.note')].map(e => e.textContent),
          text: v.textContent,
        };""")


def _section(doc: dict, name: str) -> list[dict]:
    out: object = doc
    for part in name.split("."):
        out = out[int(part) if part.isdigit() else part]  # type: ignore[index]
    return out  # type: ignore[return-value]


def assert_tables_match(shown: dict, doc: dict) -> int:
    """Every cell of a plain-key column equals the document's value at the shown rounding (a
    text: shortened by ``reports.text.shorten`` to the column's limit, default the name
    limit); returns how many cells were compared."""
    from neuron_profiler.reports.text import NAME_LIMIT, shorten

    compared = 0
    for t in shown["tables"]:
        if not t["name"]:
            continue
        rows = _section(doc, t["name"])
        assert len(t["rows"]) == len(rows), t["name"]
        for cells, row in zip(t["rows"], rows, strict=True):
            columns = zip(t["keys"], t["digits"], t["limits"], cells, strict=True)
            for key, digits, limit, cell in columns:
                if not key:
                    continue
                value = row[key]
                if isinstance(value, list | dict | bool):
                    continue  # shapes and the like: shown as text, not figures
                compared += 1
                if value is None:
                    assert cell == "", (t["name"], key)
                elif isinstance(value, str):
                    assert cell == shorten(value, int(limit or NAME_LIMIT)), (t["name"], key)
                elif isinstance(value, int) or float(value).is_integer():
                    assert cell == str(int(value)), (t["name"], key, cell, value)
                else:
                    places = int(digits) if digits else 3
                    assert len(cell.split(".")[1]) == places, (t["name"], key, cell)
                    assert abs(float(cell) - value) <= 0.5 * 10**-places + 1e-9, (
                        t["name"],
                        key,
                        cell,
                        value,
                    )
    return compared


def plugin_errors(driver) -> list[dict]:  # noqa: ANN001
    """Browser log entries at SEVERE level coming from the plugin's frame or routes."""
    return [
        e
        for e in driver.get_log("browser")
        if e["level"] == "SEVERE"
        and ("neuron_profiler" in e["message"] or "app.js" in e["message"])
    ]


# --- the tests -----------------------------------------------------------------------------


@pytest.mark.slow
def _route(server: str, driver, route: str) -> dict:  # noqa: ANN001
    """A plugin route's JSON for the trace the page shows (its run/worker/span ids)."""
    query = driver.execute_script(
        "return new URLSearchParams({run: run.value, "
        "worker: worker.value, span: span.value}).toString()"
    )
    with urllib.request.urlopen(f"{server}/data/plugin/neuron_profiler/{route}?{query}") as r:
        return json.load(r)


def test_views_match_the_cli(
    browser,
    server: str,
    logdir: Path,  # noqa: ANN001
    artefacts: Path,
) -> None:
    from selenium.webdriver.common.by import By

    browser.switch_to.default_content()
    _wait(
        browser,
        "the Neuron Profiler tab",
        lambda d: "neuron profiler" in d.find_element(By.TAG_NAME, "body").text.lower(),
    )
    enter_plugin_frame(browser)
    browser.execute_script("window.__alerts = []; window.alert = (m) => window.__alerts.push(m);")
    runs = {
        "emulator": None,
        "cuda": None,
        "two_ranks": "rank0",
        "one_rank": None,
        "damaged": None,
        "hostile": None,
    }
    report, docs = {}, {}
    for run, worker in runs.items():
        choose(browser, run, worker)
        rel = next(
            p
            for p in logdir.joinpath(run).iterdir()
            if worker is None or p.name.startswith(worker + ".")
        )
        # the Distributed view against the CLI's cross-rank section of the run's files
        files = sorted(p.relative_to(logdir).as_posix() for p in logdir.joinpath(run).iterdir())
        if files == [rel.relative_to(logdir).as_posix()]:  # one file: one run gives both
            whole = cli_json(logdir, "analyze", "--json", files[0])
            doc, distributed = whole["traces"][0], whole["distributed"]
        else:
            doc = cli_json(logdir, "analyze", "--json", rel.relative_to(logdir).as_posix())
            doc = doc["traces"][0]
            # exit 2 (a file could not be analysed) still prints the cross-rank section
            distributed = cli_json(logdir, "analyze", "--json", *files, codes=(0, 2))
            distributed = distributed["distributed"]
        docs[run] = doc
        doc_all = dict(doc, distributed=distributed)
        compared = 0
        for view in VIEWS:
            shown = show(browser, view)
            screenshot(browser, artefacts / f"{run}-{view.lower()}.png")
            assert shown["tables"] or shown["charts"] or shown["empty"] or view == "Trace", (
                run,
                view,
                shown["text"][:300],
            )
            compared += assert_tables_match(shown, doc_all if view == "Distributed" else doc)
            # load warnings: shown on every view, exactly the document's
            assert shown["warnings"] == [f"load warning: {w}" for w in doc["load_warnings"]]
            if view == "Overview" and doc["has_device"]:
                assert shown["charts"] >= 2 and shown["traces"] > 0  # breakdown + utilisation
                assert any(t["name"] == "idle.devices" for t in shown["tables"])
            if view == "Fallbacks":
                if run == "emulator":  # injected: bincount runs on the host
                    assert [r[0] for r in shown["tables"][0]["rows"]] == [
                        f["op"] for f in doc["fallbacks"]
                    ] and doc["fallbacks"]
                elif run == "cuda":
                    assert shown["empty"] and not shown["tables"]
            if view == "Idle" and run in ("emulator", "cuda"):
                assert shown["charts"] == 2 and shown["notes"], shown["text"][:300]
                # each bar as long as the idle time in its segment (a bin: not the bin width)
                idle = _route(server, browser, "timeline")["idle"]
                assert shown["bars"][1] == [s["segments"]["busy_us"] for s in idle]
                if run == "cuda":  # resnet50: binned short gaps, far shorter than their bins
                    binned = [s for s in idle if not s["exact"]]
                    assert binned and sum(
                        sum(s["segments"]["busy_us"]) for s in binned
                    ) < 0.5 * sum(sum(s["segments"]["dur_us"]) for s in binned)
            if view == "Trace":
                assert browser.find_elements(By.ID, "open-perfetto")
                if doc["has_device"]:
                    assert shown["charts"] == 1 and shown["notes"]
            if view == "Distributed":
                cross = doc_all["distributed"]
                if run == "two_ranks":  # content: per rank, stragglers, collectives, waits
                    assert cross["available"]
                    span = cross["spans"][0]
                    assert {t["name"] for t in shown["tables"]} >= {
                        f"distributed.spans.0.{k}" for k in ("ranks_summary", "collectives")
                    }
                    assert shown["charts"] == 1 and shown["bars"][0][0] == [
                        r["wait_skew_ms_per_step"] for r in span["ranks_summary"]
                    ]
                    assert shown["straggler_rows"] == sum(
                        r["straggler"] for r in span["ranks_summary"]
                    ) + len(span["stragglers"])
                    # the clock and straggler columns say so for every rank
                    (per_rank,) = [
                        t
                        for t in shown["tables"]
                        if t["name"] == "distributed.spans.0.ranks_summary"
                    ]
                    clock = per_rank["labels"].index("clock")
                    straggler = per_rank["labels"].index("straggler")
                    assert [row[clock] for row in per_rank["rows"]] == [
                        "aligned" if r["clock_aligned"] else "not aligned"
                        for r in span["ranks_summary"]
                    ]
                    assert [row[straggler] for row in per_rank["rows"]] == [
                        "yes" if r["straggler"] else "no" for r in span["ranks_summary"]
                    ]
                    # the straggler (HTA's pair: rank 1), what it costs, what it was doing
                    assert [x["rank"] for x in span["stragglers"]] == [1]
                    assert {t["name"] for t in shown["tables"]} >= {
                        f"distributed.spans.0.stragglers{k}"
                        for k in ("", ".0.per_rank", ".0.before_arrival")
                    }
                    assert span["stragglers"][0]["doing"] in shown["text"]
                    # the Span selector: its place and when the file was written, not raw ns
                    labels = browser.execute_script(
                        "return [...span.options].map(o => o.textContent)"
                    )
                    assert labels == ["span 1 · 2023-11-14 22:13:20.000 UTC"], labels
                    report["distributed"] = sum(len(t["rows"]) for t in shown["tables"])
                else:  # the analyzer's reason, as an explicit empty state
                    assert not cross["available"] and not shown["tables"]
                    assert f"{DISTRIBUTED_EMPTY}{cross['reason']}" in shown["empty"], shown["text"]
        assert compared > 0 or not doc["has_device"], run
        report[run] = compared
    assert logdir.joinpath("damaged") and report["damaged"] >= 0
    damaged = docs["damaged"]  # the CLI's document of damaged/cut.1.pt.trace.json
    assert damaged["load_warnings"], "a cut file must have load warnings"
    assert browser.execute_script("return window.__alerts") == []
    assert browser.find_elements(By.CSS_SELECTOR, "img[src='x']") == []
    assert plugin_errors(browser) == []
    (artefacts / "browser_test.json").write_text(json.dumps(report, indent=1))


@pytest.mark.slow
def test_perfetto_button_posts_the_trace(browser, server: str) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    enter_plugin_frame(browser)
    choose(browser, "emulator")
    show(browser, "Trace")
    # window.open stubbed: a fake Perfetto window that answers PING with PONG and records posts
    browser.execute_script("""
        window.__posted = [];
        window.open = (url) => ({
          url,
          postMessage(msg, origin) {
            if (msg === 'PING') {
              window.dispatchEvent(new MessageEvent('message', {data: 'PONG', origin}));
              return;
            }
            window.__posted.push({origin, title: msg.perfetto.title,
                                  bytes: msg.perfetto.buffer.byteLength,
                                  head: Array.from(new Uint8Array(msg.perfetto.buffer, 0, 16))});
          },
        });""")
    browser.find_element(By.ID, "open-perfetto").click()
    posted = _wait(
        browser,
        "the trace posted to Perfetto",
        lambda d: d.execute_script("return window.__posted.length ? window.__posted : null"),
        timeout=60,
    )
    query = browser.execute_script(
        "return new URLSearchParams(Object.assign({run: run.value, worker: worker.value, "
        "span: span.value}, {format: 'pftrace'})).toString()"
    )
    with urllib.request.urlopen(f"{server}/data/plugin/neuron_profiler/trace?{query}") as r:
        body = r.read()
    assert len(posted) == 1 and posted[0]["origin"] == "https://ui.perfetto.dev"
    assert posted[0]["bytes"] == len(body) > 100
    assert posted[0]["head"] == list(body[:16])
    assert plugin_errors(browser) == []


@pytest.mark.slow
def test_page_shows_progress_while_analysing(browser) -> None:  # noqa: ANN001
    """An injected delay in the frame: the report route answers 202 three times (fetch
    stubbed); the page shows the phase and asks again until the report comes."""
    enter_plugin_frame(browser)
    browser.execute_script("""
        window.__statuses = [];
        window.__asked = 0;
        new MutationObserver(() => window.__statuses.push(
            document.getElementById('status').textContent)).observe(
            document.getElementById('status'), {childList: true, characterData: true, subtree: true});
        const real = window.fetch;
        window.fetch = (url, ...rest) => {
          if (String(url).startsWith('report') && window.__asked++ < 3) {
            return Promise.resolve(new Response(JSON.stringify(
              {status: 'analysing', phase: 'loading 1.0 MB', elapsed_s: window.__asked}),
              {status: 202, headers: {'Content-Type': 'application/json'}}));
          }
          return real(url, ...rest);
        };""")
    current = browser.execute_script("return run.selectedOptions[0].textContent")
    choose(browser, "emulator" if current == "cuda" else "cuda")  # a change: a new analysis
    statuses = browser.execute_script("return window.__statuses")
    assert browser.execute_script("return window.__asked") >= 4
    assert "analysing… (loading 1.0 MB, 1 s)" in statuses
    assert "analysing… (loading 1.0 MB, 3 s)" in statuses
    assert browser.execute_script("return document.getElementById('status').textContent") == ""
    assert plugin_errors(browser) == []


@pytest.mark.slow
def test_diff_view_matches_the_cli(browser, logdir: Path, artefacts: Path) -> None:  # noqa: ANN001
    """B: rank 1 of the two-rank run (shown); A: rank 0, picked in the Diff view."""
    from selenium.webdriver.common.by import By

    enter_plugin_frame(browser)
    choose(browser, "two_ranks", "rank1")
    before = show(browser, "Diff")
    assert before["empty"] == ["choose a baseline (A) to compare the shown trace (B) with"]
    browser.execute_script("""
        const pick = document.getElementById('diff-base');
        pick.value = [...pick.options].find(o => o.textContent.startsWith('two_ranks / rank0')).value;
        pick.dispatchEvent(new Event('change'));""")
    _diff_shown(browser, "residual")  # (show's tab click meets no re-render mid-way)
    shown = show(browser, "Diff")
    screenshot(browser, artefacts / "two_ranks-diff.png")
    files = sorted(p.name for p in logdir.joinpath("two_ranks").iterdir())
    doc = cli_json(logdir, "diff", "--json", f"two_ranks/{files[0]}", f"two_ranks/{files[1]}")
    assert {t["name"] for t in shown["tables"]} == {"rows", "idle_by_cause", "mappings"}
    assert assert_tables_match(shown, doc) > 3 * len(doc["rows"])
    assert shown["charts"] == 1
    assert shown["bars"][0][0] == [
        doc["a"]["step_ms"],
        *(r["delta_ms"] for r in doc["rows"]),
        doc["residual_ms"],
        doc["b"]["step_ms"],
    ]
    assert f"A {doc['a']['source']} · B {doc['b']['source']}" in shown["text"]
    assert browser.find_elements(By.CSS_SELECTOR, "img[src='x']") == []
    assert plugin_errors(browser) == []


@pytest.mark.slow
def test_diff_view_by_module_matches_the_cli(browser, logdir: Path) -> None:  # noqa: ANN001
    """B: the synthetic model with its head slower (shown); A: the same before; rows by module
    (chosen in the Diff view): ``neuron-prof diff --json --by module``'s, the head on top."""
    from diff_timeline import HEAD

    enter_plugin_frame(browser)
    choose(browser, "modules", "after")
    show(browser, "Diff")  # no baseline yet: the grouping is chosen first, then the baseline
    browser.execute_script("""
        const by = document.getElementById('diff-by');
        by.value = 'module';
        by.dispatchEvent(new Event('change'));
        const pick = document.getElementById('diff-base');
        pick.value = [...pick.options].find(o => o.textContent.startsWith('modules / before')).value;
        pick.dispatchEvent(new Event('change'));""")
    _diff_shown(browser, "rows by module")
    shown = show(browser, "Diff")
    files = {p.name.split(".")[0]: p.name for p in logdir.joinpath("modules").iterdir()}
    before, after = f"modules/{files['before']}", f"modules/{files['after']}"
    doc = cli_json(logdir, "diff", "--json", "--by", "module", before, after)
    assert (doc["rows"][0]["key"], doc["rows"][0]["kind"]) == (HEAD, "module")
    assert assert_tables_match(shown, doc) > 3 * len(doc["rows"])
    assert shown["bars"][0][0][1] == doc["rows"][0]["delta_ms"]
    assert "rows by module" in shown["text"]
    assert plugin_errors(browser) == []


def _diff_shown(browser, text: str) -> None:  # noqa: ANN001
    """Wait until the Diff view shows its document (``text`` in it): the polls that re-render
    the page while the diff runs are over."""
    _wait(
        browser,
        f"the diff ({text})",
        lambda d: d.execute_script(
            "const v = document.getElementById('view');"
            f"return v.dataset.state === 'ready' && v.textContent.includes({text!r});"
        ),
    )
