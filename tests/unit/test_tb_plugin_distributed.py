"""The plugin's ``distributed`` route: the cross-rank analysis of a run's worker traces (HTA's
sampled 2-rank pair from ../shared/traces under tensorboard_trace_handler names) equals
``neuron-prof analyze --json`` of the same files; a single-rank run gives the analyzer's reason;
a corrupt worker is listed as an error while the others are analysed; ids only; each trace is
analysed once (the rank summaries outlive the report bundles); 202 progress while analysing."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("tensorboard")

from tb_plugin_client import ROUTE, cli_distributed, ids, make_plugin  # noqa: E402

PAIR = ("hta", "tests", "data", "trace_filter")
NAMES = ("host_1.1700000000000.pt.trace.json.gz", "host_2.1700000000001.pt.trace.json.gz")


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory, shared_traces: Path) -> Path:
    root = tmp_path_factory.mktemp("tb_distributed")
    src = shared_traces.joinpath(*PAIR)
    for run, ranks in (("job", (0, 1)), ("single", (0,)), ("broken", (0, 1))):
        (root / run).mkdir()
        for rank in ranks:
            shutil.copy(src / f"sampled_rank-{rank}.json.gz", root / run / NAMES[rank])
    (root / "broken" / "host_3.1700000000002.pt.trace.json").write_text('{"traceEvents": [')
    return root


def _get(client, run: str, worker: str) -> tuple[int, dict]:  # noqa: ANN001
    i = ids(client, run, worker)
    r = client.get(f"{ROUTE}/distributed", query_string={"run": i["run"], "span": i["span"]})
    return r.status_code, r.get_json()


def test_two_ranks_equal_the_cli_from_either_worker(logdir: Path) -> None:
    plugin, client = make_plugin(logdir)
    rels = [f"job/{n}" for n in NAMES]
    expected = cli_distributed(logdir, *rels)
    assert expected["available"] and expected["spans"][0]["ranks"] == [0, 1]
    for worker in ("host_1", "host_2"):
        status, body = _get(client, "job", worker)
        assert status == 200, body
        assert body["sources"] == rels and body["errors"] == []
        assert body["run_traces"] == 2 and body["run_spans"] == 1
        assert body["distributed"] == expected
    # the report route reuses the same analyses: two traces, two analyses in all
    for worker in ("host_1", "host_2"):
        assert (
            client.get(f"{ROUTE}/report", query_string=ids(client, "job", worker)).status_code
            == 200
        )
    assert plugin.cache.misses == 2


def test_single_rank_run_gives_the_analyzers_reason(logdir: Path) -> None:
    _, client = make_plugin(logdir)
    status, body = _get(client, "single", "host_1")
    assert status == 200, body
    d = body["distributed"]
    assert not d["available"] and "only one rank (rank 0)" in d["reason"]
    assert d == cli_distributed(logdir, f"single/{NAMES[0]}")


def test_corrupt_worker_is_an_error_the_others_analysed(logdir: Path) -> None:
    _, client = make_plugin(logdir)
    status, body = _get(client, "broken", "host_1")
    assert status == 200, body
    assert [(e["worker"], e["source"]) for e in body["errors"]] == [
        ("host_3", "broken/host_3.1700000000002.pt.trace.json")
    ]
    assert body["errors"][0]["error"].startswith("broken/host_3.")
    assert body["run_traces"] == 3 and body["sources"] == [f"broken/{n}" for n in NAMES]
    assert body["distributed"]["available"]
    assert body["distributed"] == cli_distributed(
        logdir, *body["sources"], "broken/host_3.1700000000002.pt.trace.json"
    )
    status, body = _get(client, "broken", "host_3")  # the corrupt one chosen: its own error
    assert status == 422 and "host_3" in body["error"]


def test_ids_only(logdir: Path) -> None:
    _, client = make_plugin(logdir)
    job = ids(client, "job", "host_1")
    other = ids(client, "broken", "host_3")
    for query, status in (
        ({"run": "job", "span": job["span"]}, 400),
        ({"run": job["run"], "span": "../../etc/passwd"}, 400),
        ({"run": job["run"]}, 400),
        ({"run": "0" * 16, "span": job["span"]}, 404),
        ({"run": job["run"], "span": other["span"]}, 404),  # a span of another run
    ):
        r = client.get(f"{ROUTE}/distributed", query_string=query)
        assert r.status_code == status, (query, r.get_json())
        assert set(r.get_json()) == {"error"} and str(logdir) not in r.get_json()["error"]


def test_summaries_outlive_the_bounded_report_cache(logdir: Path) -> None:
    plugin, client = make_plugin(logdir)
    plugin.cache.entries = 1  # one report bundle kept: the other is evicted
    first = _get(client, "job", "host_1")
    again = _get(client, "job", "host_2")
    assert first[0] == again[0] == 200 and first[1]["distributed"] == again[1]["distributed"]
    assert plugin.cache.misses == 2 and len(plugin.cache._items) == 1


def test_progress_while_the_run_is_analysed(logdir: Path) -> None:
    plugin, client = make_plugin(logdir, wait_s=0.05)
    gate = threading.Event()
    compute = plugin.cache.compute

    def slow(span, progress):  # noqa: ANN001, ANN202
        progress("held by the test")
        gate.wait(60)
        return compute(span, progress)

    plugin.cache.compute = slow
    status, body = _get(client, "job", "host_1")
    assert status == 202, body
    assert body["phase"] == "0 of 2 traces of the run analysed; held by the test" or body[
        "phase"
    ].startswith("0 of 2 traces of the run analysed; queued")
    gate.set()
    deadline = time.monotonic() + 60
    while status == 202 and time.monotonic() < deadline:
        time.sleep(0.05)
        status, body = _get(client, "job", "host_1")
    assert status == 200 and body["distributed"]["available"]
    assert plugin.cache.misses == 2


def test_span_selector_labels_are_readable(logdir: Path) -> None:
    """The runs route labels each span by its place among the worker's spans and, from the
    ``{time}`` of a tensorboard_trace_handler name, when it was written (UTC), never raw ns;
    an error row of the distributed route names the span the same way."""
    _, client = make_plugin(logdir)
    runs = {r["name"]: r for r in client.get(f"{ROUTE}/runs").get_json()["runs"]}
    labels = {
        (run, w["name"]): [s["label"] for s in w["spans"]]
        for run in ("job", "broken")
        for w in runs[run]["workers"]
    }
    assert labels == {
        ("job", "host_1"): ["span 1 · 2023-11-14 22:13:20.000 UTC"],
        ("job", "host_2"): ["span 1 · 2023-11-14 22:13:20.001 UTC"],
        ("broken", "host_1"): ["span 1 · 2023-11-14 22:13:20.000 UTC"],
        ("broken", "host_2"): ["span 1 · 2023-11-14 22:13:20.001 UTC"],
        ("broken", "host_3"): ["span 1 · 2023-11-14 22:13:20.002 UTC"],
    }
    _, body = _get(client, "broken", "host_1")
    assert [e["span"] for e in body["errors"]] == ["span 1 · 2023-11-14 22:13:20.002 UTC"]


@pytest.mark.parametrize(
    ("index", "span", "label"),
    [
        (1, "1764883533123456789", "span 1 · 2025-12-04 21:25:33.123 UTC"),  # time_ns
        (2, "1764883533123456", "span 2 · 2025-12-04 21:25:33.123 UTC"),  # µs
        (1, "1764883533123", "span 1 · 2025-12-04 21:25:33.123 UTC"),  # ms (older torch)
        (3, "1764883533", "span 3 · 2025-12-04 21:25:33.000 UTC"),  # s
        (1, "", "span 1"),  # a file of one span
        (1, "1", "span 1"),
        (2, "7", "span 2 (7)"),  # a number that is no time: kept beside the place
    ],
)
def test_span_label(index: int, span: str, label: str) -> None:
    from neuron_profiler.tensorboard.discovery import span_label

    assert span_label(index, span) == label
