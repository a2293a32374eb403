"""TensorBoard plugin: discovery naming rules, ids instead of paths (traversal rejected), a
corrupt trace isolated, the report route equal to ``neuron-prof analyze --json``, the cache,
downloads, static files, and CUDA traces from ../shared/traces in a temporary logdir. Driven
through TensorBoard's own WSGI app with werkzeug's test client (no live server)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import time
from pathlib import Path

import pytest

pytest.importorskip("tensorboard")

from tb_plugin_client import ROUTE, ids, make_plugin  # noqa: E402

from neuron_profiler.cli.main import main  # noqa: E402
from neuron_profiler.exporters.chrome import write_chrome_trace  # noqa: E402
from neuron_profiler.tensorboard import discovery  # noqa: E402
from neuron_profiler.tensorboard.plugin import PLUGIN_NAME, NeuronProfilerLoader  # noqa: E402
from neuron_profiler.trace import EventKind, TraceBuilder  # noqa: E402
from neuron_profiler.trace import vocabulary as V  # noqa: E402

US = 1000
HOSTILE = "<img src=x onerror=alert(1)>"


def small_trace(path: Path) -> Path:
    """Two steps, three device kernels, and an op whose name is HTML."""
    b = TraceBuilder()
    for n, (lo, hi) in enumerate(((0, 500), (500, 1000))):
        b.add(
            name=f"ProfilerStep#{n + 1}",
            ts_ns=lo * US,
            dur_ns=(hi - lo) * US,
            kind=EventKind.USER_ANNOTATION,
            cat="user_annotation",
            pid=9,
            tid=9,
        )
    for corr, (lo, hi) in enumerate(((0, 100), (300, 400), (800, 950)), start=1):
        b.add(
            name=HOSTILE,
            ts_ns=max(lo - 20, 0) * US,
            dur_ns=15 * US,
            kind=EventKind.CPU_OP,
            cat="cpu_op",
            pid=9,
            tid=9,
        )
        b.add(
            name="nrt launch: mm",
            ts_ns=max(lo - 10, 0) * US,
            dur_ns=5 * US,
            kind=EventKind.RUNTIME,
            cat=V.CAT_RUNTIME,
            pid=9,
            tid=9,
            args={V.ARG_CORRELATION: corr},
        )
        b.add(
            name="TensorE: mm",
            ts_ns=lo * US,
            dur_ns=(hi - lo) * US,
            kind=EventKind.KERNEL,
            cat=V.CAT_KERNEL,
            pid=0,
            tid=1,
            args={V.ARG_DEVICE: 0, V.ARG_STREAM: 1, V.ARG_CORRELATION: corr},
        )
    b.process_names[0] = V.core_process_name(0)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_chrome_trace(b.build(), path)
    return path


# --- discovery -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("worker0.1623143089861.pt.trace.json.gz", ("worker0", "1623143089861")),
        (
            "ip-10-0-0-1.ec2.internal_4242.1700000000123.pt.trace.json",
            ("ip-10-0-0-1.ec2.internal_4242", "1700000000123"),
        ),
        ("rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", ("rank-34.Jul_15_10_52_41", "1074")),
        ("host.a1b.pt.trace.json", ("host.a1b", "")),  # no numeric last part: a single span
        ("trace.pt.trace.json", ("trace", "")),
        ("trace.json", None),
        ("x.pt.trace.json.bak", None),
        (".pt.trace.json", None),
    ],
)
def test_split_name(name: str, expected: tuple[str, str] | None) -> None:
    assert discovery.split_name(name) == expected


def test_scan_groups_runs_workers_spans(tmp_path: Path) -> None:
    for rel in (
        "a/b/h.x_1.200.pt.trace.json",
        "a/b/h.x_1.1000.pt.trace.json",
        "a/b/h.x_2.300.pt.trace.json",
        "top.pt.trace.json",
        "a/notes.json",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("{}")
    runs = discovery.scan(tmp_path)
    assert [r.name for r in runs] == [".", "a/b"]
    b = runs[1]
    assert [w.name for w in b.workers] == ["h.x_1", "h.x_2"]
    assert [s.name for s in b.workers[0].spans] == ["200", "1000"]  # numeric order
    assert b.workers[0].spans[1].rel == "a/b/h.x_1.1000.pt.trace.json"


def test_new_traces_appear_and_is_active(tmp_path: Path) -> None:
    plugin, client = make_plugin(tmp_path)
    assert not plugin.is_active()
    assert client.get(f"{ROUTE}/runs").get_json() == {"runs": []}
    small_trace(tmp_path / "run1" / "w.1.pt.trace.json")
    assert [r["name"] for r in client.get(f"{ROUTE}/runs").get_json()["runs"]] == ["run1"]
    assert not plugin.is_active()  # remembered briefly: TensorBoard asks often
    plugin._active.ttl_s = 0
    assert plugin.is_active()


def test_is_active_stops_at_first_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(50):
        (tmp_path / f"r{i}").mkdir()
        (tmp_path / f"r{i}" / "w.1.pt.trace.json").write_text("{}")
    seen = []
    real = discovery._inside
    monkeypatch.setattr(discovery, "_inside", lambda p, r: seen.append(p) or real(p, r))
    assert discovery.ActiveCheck(tmp_path)()
    assert len(seen) == 1


# --- routes: ids, never paths ----------------------------------------------------------------


def test_plugin_is_listed_with_its_entry(tmp_path: Path) -> None:
    small_trace(tmp_path / "run1" / "w.1.pt.trace.json")
    _, client = make_plugin(tmp_path)
    listing = client.get("/data/plugins_listing").get_json()[PLUGIN_NAME]
    assert listing["enabled"] and listing["tab_name"] == "Neuron Profiler"
    assert listing["loading_mechanism"]["module_path"].endswith("/index.js")


def test_entry_point_registered() -> None:
    from importlib.metadata import entry_points

    eps = [e for e in entry_points(group="tensorboard_plugins") if e.name == PLUGIN_NAME]
    assert eps and eps[0].load() is NeuronProfilerLoader


@pytest.mark.parametrize(
    "query",
    [
        {"run": "../../etc", "worker": "x", "span": "y"},
        {"run": "/etc/passwd", "worker": "0" * 16, "span": "0" * 16},
        {"run": "run1", "worker": "w", "span": "1"},
        {},
    ],
)
def test_paths_and_names_are_rejected(tmp_path: Path, query: dict[str, str]) -> None:
    small_trace(tmp_path / "run1" / "w.1.pt.trace.json")
    _, client = make_plugin(tmp_path)
    for route in ("report", "timeline", "trace"):
        r = client.get(f"{ROUTE}/{route}", query_string={**query, "format": "pftrace"})
        assert r.status_code == 400 and "error" in r.get_json()


def test_unknown_ids_are_404(tmp_path: Path) -> None:
    small_trace(tmp_path / "run1" / "w.1.pt.trace.json")
    _, client = make_plugin(tmp_path)
    q = {**ids(client, "run1", "w"), "span": "0123456789abcdef"}
    assert client.get(f"{ROUTE}/report", query_string=q).status_code == 404


def test_symlinks_out_of_the_logdir_are_not_served(tmp_path: Path) -> None:
    outside = small_trace(tmp_path / "outside" / "secret.1.pt.trace.json")
    logdir = tmp_path / "logdir"
    small_trace(logdir / "run1" / "w.1.pt.trace.json")
    (logdir / "run1" / "leak.1.pt.trace.json").symlink_to(outside)
    (logdir / "linked_run").symlink_to(outside.parent, target_is_directory=True)
    (logdir / "run1" / "inside.1.pt.trace.json").symlink_to(logdir / "run1" / "w.1.pt.trace.json")
    _, client = make_plugin(logdir)
    runs = client.get(f"{ROUTE}/runs").get_json()["runs"]
    assert [r["name"] for r in runs] == ["run1"]
    assert [w["name"] for w in runs[0]["workers"]] == ["inside", "w"]
    # the id a link out would have had (ids are names' hashes): still not found
    q = {
        "run": discovery.make_id("run1"),
        "worker": discovery.make_id("leak"),
        "span": discovery.make_id("1", "leak.1.pt.trace.json"),
    }
    assert client.get(f"{ROUTE}/report", query_string=q).status_code == 404
    assert "secret" not in json.dumps(runs)


# --- report, cache, errors -----------------------------------------------------------------


def test_report_equals_cli_json_and_is_cached(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    small_trace(tmp_path / "run1" / "w.1.pt.trace.json")
    plugin, client = make_plugin(tmp_path)
    q = ids(client, "run1", "w")
    first = client.get(f"{ROUTE}/report", query_string=q)
    assert first.status_code == 200
    assert (plugin.cache.hits, plugin.cache.misses) == (0, 1)
    second = client.get(f"{ROUTE}/report", query_string=q)
    assert (plugin.cache.hits, plugin.cache.misses) == (1, 1)
    assert second.get_json() == first.get_json()
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(["analyze", "--json", "run1/w.1.pt.trace.json"]) == 0
    assert first.get_json() == json.loads(capsys.readouterr().out)
    doc = first.get_json()["traces"][0]
    assert doc["source"] == "run1/w.1.pt.trace.json"  # never the server's absolute path
    assert HOSTILE in [o["name"] for o in doc["ops"]]  # as data; the page sets textContent


def test_changed_file_is_analysed_again(tmp_path: Path) -> None:
    path = small_trace(tmp_path / "run1" / "w.1.pt.trace.json")
    plugin, client = make_plugin(tmp_path)
    q = ids(client, "run1", "w")
    client.get(f"{ROUTE}/report", query_string=q)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    client.get(f"{ROUTE}/report", query_string=q)
    assert plugin.cache.misses == 2


def test_corrupt_trace_is_isolated(tmp_path: Path) -> None:
    small_trace(tmp_path / "good" / "w.1.pt.trace.json")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "w.1.pt.trace.json").write_text("{not json at all")
    (tmp_path / "bad" / "z.1.pt.trace.json.gz").write_bytes(b"\x1f\x8b not gzip")
    _, client = make_plugin(tmp_path)
    for worker in ("w", "z"):
        r = client.get(f"{ROUTE}/report", query_string=ids(client, "bad", worker))
        assert 400 <= r.status_code < 600
        err = r.get_json()["error"]
        assert "\n" not in err and err.startswith("bad/")
        assert str(tmp_path) not in err
    r = client.get(f"{ROUTE}/trace", query_string={**ids(client, "bad", "w"), "format": "pftrace"})
    assert 400 <= r.status_code < 600 and "error" in r.get_json()
    good = client.get(f"{ROUTE}/report", query_string=ids(client, "good", "w"))
    assert good.status_code == 200 and good.get_json()["traces"][0]["has_device"]


def test_a_trace_with_nothing_usable_is_refused_as_by_the_cli(tmp_path: Path) -> None:
    """No event but metadata: every command refuses it (one line, exit 2); the plugin gives
    the same problem as a 422, never a report of nothing."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "w.1.pt.trace.json").write_text('{"traceEvents": []}')
    _, client = make_plugin(tmp_path)
    q = ids(client, "run", "w")
    r = client.get(f"{ROUTE}/report", query_string=q)
    assert r.status_code == 422
    assert r.get_json()["error"] == "run/w.1.pt.trace.json: no event (traceEvents is empty)"
    r = client.get(f"{ROUTE}/trace", query_string={**q, "format": "pftrace"})
    assert r.status_code == 422


# --- downloads and static files ------------------------------------------------------------


def test_downloads(tmp_path: Path) -> None:
    small_trace(tmp_path / "run1" / "h.x_7.42.pt.trace.json")
    _, client = make_plugin(tmp_path)
    q = ids(client, "run1", "h.x_7")
    gz = client.get(f"{ROUTE}/trace", query_string={**q, "format": "json.gz"})
    assert gz.status_code == 200
    assert 'filename="h.x_7.42.pt.trace.json.gz"' in gz.headers["Content-Disposition"]
    events = json.loads(gzip.decompress(gz.get_data()))["traceEvents"]
    assert any(e.get("name") == HOSTILE for e in events)
    pf = client.get(f"{ROUTE}/trace", query_string={**q, "format": "pftrace"})
    assert pf.status_code == 200 and len(pf.get_data()) > 100
    assert client.get(f"{ROUTE}/trace", query_string={**q, "format": "../x"}).status_code == 400


def test_static_files_no_inline_script(tmp_path: Path) -> None:
    _, client = make_plugin(tmp_path)
    html = client.get(f"{ROUTE}/index.html")
    assert html.status_code == 200 and "script-src" in html.headers["Content-Security-Policy"]
    text = html.get_data(as_text=True)
    assert "<script>" not in text and 'src="app.js"' in text and 'src="plotly.min.js"' in text
    assert "http" not in text  # nothing from the network
    app = client.get(f"{ROUTE}/app.js").get_data(as_text=True)
    assert "innerHTML" not in app and "insertAdjacentHTML" not in app
    assert client.get(f"{ROUTE}/index.js").status_code == 200
    plotly = client.get(f"{ROUTE}/plotly.min.js")
    assert plotly.status_code == 200 and len(plotly.get_data()) > 1_000_000


# --- CUDA traces from ../shared/traces -----------------------------------------------------


def test_cuda_traces_in_a_logdir(tmp_path: Path, shared_traces: Path) -> None:
    samples = shared_traces / "kineto" / "tb_plugin" / "samples"
    for run in ("resnet50_num_workers_0", "resnet50_num_workers_4"):
        (tmp_path / run).mkdir()
        for f in (samples / run).glob("*.pt.trace.json.gz"):
            shutil.copy(f, tmp_path / run / f.name)
    (tmp_path / "resnet50_num_workers_0" / "corrupt.pt.trace.json.gz").write_bytes(b"\x00" * 64)
    plugin, client = make_plugin(tmp_path)
    assert plugin.is_active()
    t0 = time.monotonic()
    r = client.get(f"{ROUTE}/report", query_string=ids(client, "resnet50_num_workers_0", "worker0"))
    assert r.status_code == 200, r.get_json()
    doc = r.get_json()["traces"][0]
    assert doc["has_device"] and doc["kernels"] and doc["ops"] and doc["fallbacks"] == []
    assert len(doc["tb_profiler_breakdown"]) > 0
    bad = client.get(
        f"{ROUTE}/report", query_string=ids(client, "resnet50_num_workers_0", "corrupt")
    )
    assert 400 <= bad.status_code < 600
    r4 = client.get(
        f"{ROUTE}/report", query_string=ids(client, "resnet50_num_workers_4", "worker0")
    )
    assert r4.status_code == 200
    assert time.monotonic() - t0 < 120


# --- progress while a first analysis runs ----------------------------------------------------


def test_slow_analysis_answers_202_with_its_phase(tmp_path: Path) -> None:
    """An injected delay: the route answers 202 with the phase, then 200 with the report;
    a second request during the analysis joins it (one analysis, not two)."""
    import threading

    from neuron_profiler.tensorboard.plugin import analyze_span

    small_trace(tmp_path / "run1" / "w.1.pt.trace.json")
    plugin, client = make_plugin(tmp_path, wait_s=0.05)
    release = threading.Event()
    calls = []

    def slow(span, progress):  # noqa: ANN001, ANN202
        calls.append(span.rel)
        progress("loading 0.0 MB")
        assert release.wait(30)
        return analyze_span(span, progress)

    plugin.cache.compute = slow
    q = ids(client, "run1", "w")
    first = client.get(f"{ROUTE}/report", query_string=q)
    assert first.status_code == 202
    body = first.get_json()
    assert body["status"] == "analysing" and body["phase"].startswith("loading")
    assert client.get(f"{ROUTE}/timeline", query_string=q).status_code == 202
    release.set()
    deadline = time.monotonic() + 60
    while (r := client.get(f"{ROUTE}/report", query_string=q)).status_code == 202:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert r.status_code == 200 and r.get_json()["traces"][0]["source"] == "run1/w.1.pt.trace.json"
    assert calls == ["run1/w.1.pt.trace.json"]
    assert client.get(f"{ROUTE}/timeline", query_string=q).status_code == 200


def test_page_polls_while_analysing() -> None:
    """The page asks again on 202 and shows the phase (app.js is what the browser test runs)."""
    from importlib import resources

    app = resources.files("neuron_profiler.tensorboard").joinpath("static", "app.js").read_text()
    assert "status !== 202" in app and "body.phase" in app and "POLL_MS" in app


# --- load warnings ---------------------------------------------------------------------------


def test_load_warnings_reach_the_report(tmp_path: Path) -> None:
    """A cut file: its report names what was lost, as the CLI warns (without server paths)."""
    path = small_trace(tmp_path / "run1" / "w.1.pt.trace.json")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 3 // 4])
    _, client = make_plugin(tmp_path)
    doc = client.get(f"{ROUTE}/report", query_string=ids(client, "run1", "w")).get_json()
    warnings = doc["traces"][0]["load_warnings"]
    assert len(warnings) == 1 and "truncated" in warnings[0] and str(tmp_path) not in warnings[0]
    clean = small_trace(tmp_path / "run2" / "w.1.pt.trace.json")
    assert clean.exists()
    doc = client.get(f"{ROUTE}/report", query_string=ids(client, "run2", "w")).get_json()
    assert doc["traces"][0]["load_warnings"] == []


# --- one palette and one text rule with the HTML report --------------------------------------


def test_style_route_serves_the_html_reports_palette(tmp_path: Path) -> None:
    """Issue 23, 14: the page colours idle causes with what the ``style`` route serves, which
    is the HTML report's palette, one colour per cause; app.js spells no cause colour of its
    own (the browser test checks the drawn colours: test_tb_frontend_browser.py)."""
    import re
    from importlib import resources

    from neuron_profiler.analysis.causes import ALL_CAUSES
    from neuron_profiler.reports import html_report
    from neuron_profiler.reports.text import ELLIPSIS, NAME_LIMIT, TEXT_LIMIT

    _, client = make_plugin(tmp_path)
    style = client.get(f"{ROUTE}/style").get_json()
    assert list(style["cause_colours"]) == list(ALL_CAUSES)
    for cause in ALL_CAUSES:
        assert style["cause_colours"][cause] == html_report.CAUSE_COLOURS[cause], cause
    assert (style["name_limit"], style["text_limit"], style["ellipsis"]) == (
        NAME_LIMIT,
        TEXT_LIMIT,
        ELLIPSIS,
    )
    app = resources.files("neuron_profiler.tensorboard").joinpath("static", "app.js").read_text()
    causes = "|".join(ALL_CAUSES)
    assert not re.search(rf"\b({causes})\s*:\s*\"#", app)  # no palette of its own
    assert 'api("style")' in app and "STYLE.cause_colours" in app


# --- the diff route ------------------------------------------------------------------------


def _diff_query(client, a: tuple[str, str], b: tuple[str, str]) -> dict[str, str]:  # noqa: ANN001
    base = {f"a_{k}": v for k, v in ids(client, *a).items()}
    return {**base, **ids(client, *b)}


def test_diff_route_equals_cli_diff_json_and_is_cached(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs of the diff's synthetic script, one op 50 µs slower a step in B: the route's
    document is ``neuron-prof diff --json A B``'s (paths relative to the logdir), the change
    on top."""
    from diff_timeline import BASE, Op, build

    slow = [*BASE[:2], Op("aten::linear", 10, 150), *BASE[3:]]
    (tmp_path / "before").mkdir()
    (tmp_path / "after").mkdir()
    write_chrome_trace(build(BASE)[0], tmp_path / "before" / "w.1.pt.trace.json")
    write_chrome_trace(build(slow)[0], tmp_path / "after" / "w.1.pt.trace.json")
    plugin, client = make_plugin(tmp_path)
    q = _diff_query(client, ("before", "w"), ("after", "w"))
    first = client.get(f"{ROUTE}/diff", query_string=q)
    assert first.status_code == 200, first.get_json()
    assert (plugin.diffs.hits, plugin.diffs.misses) == (0, 1)
    assert client.get(f"{ROUTE}/diff", query_string=q).get_json() == first.get_json()
    assert (plugin.diffs.hits, plugin.diffs.misses) == (1, 1)
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(["diff", "--json", "before/w.1.pt.trace.json", "after/w.1.pt.trace.json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    doc = first.get_json()
    assert doc == cli
    assert doc["rows"][0]["key"] == "forward › aten::linear"
    assert doc["rows"][0]["delta_ms"] == pytest.approx(0.05, abs=1e-6)


def test_diff_route_by_module_equals_cli_and_is_cached_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The synthetic model in nn.Module frames, its head 50 µs slower a step in B: ``by=module``
    serves ``neuron-prof diff --json --by module A B``'s document, the head's module row on top;
    each grouping is its own cache entry; an unknown grouping is a 400."""
    from diff_timeline import HEAD, MODEL, build, slower

    for run, ops in (("before", MODEL), ("after", slower(MODEL, {HEAD: 50}))):
        (tmp_path / run).mkdir()
        write_chrome_trace(build(ops)[0], tmp_path / run / "w.1.pt.trace.json")
    plugin, client = make_plugin(tmp_path)
    q = _diff_query(client, ("before", "w"), ("after", "w"))
    by_op = client.get(f"{ROUTE}/diff", query_string=q).get_json()
    by_module = client.get(f"{ROUTE}/diff", query_string={**q, "by": "module"}).get_json()
    assert (plugin.diffs.hits, plugin.diffs.misses) == (0, 2)
    assert by_op["group_by"] == "op" and by_op["rows"][0]["key"] == "forward › aten::linear"
    assert by_module["group_by"] == "module"
    assert (by_module["rows"][0]["key"], by_module["rows"][0]["kind"]) == (HEAD, "module")
    assert by_module["rows"][0]["delta_ms"] == pytest.approx(0.05, abs=1e-6)
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    paths = ["before/w.1.pt.trace.json", "after/w.1.pt.trace.json"]
    assert main(["diff", "--json", "--by", "module", *paths]) == 0
    assert by_module == json.loads(capsys.readouterr().out)
    r = client.get(f"{ROUTE}/diff", query_string={**q, "by": "layer"})
    assert r.status_code == 400 and "by must be one of op, module" in r.get_json()["error"]


def test_diff_route_errors(tmp_path: Path) -> None:
    small_trace(tmp_path / "good" / "w.1.pt.trace.json")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "w.1.pt.trace.json").write_text("{not json at all")
    _, client = make_plugin(tmp_path)
    r = client.get(f"{ROUTE}/diff", query_string=_diff_query(client, ("good", "w"), ("bad", "w")))
    assert r.status_code == 422
    err = r.get_json()["error"]
    assert err.startswith("bad/w.1.pt.trace.json: ") and str(tmp_path) not in err
    q = {**ids(client, "good", "w"), "a_run": "../x", "a_worker": "w", "a_span": "s"}
    r = client.get(f"{ROUTE}/diff", query_string=q)
    assert r.status_code == 400 and "a_run" in r.get_json()["error"]
