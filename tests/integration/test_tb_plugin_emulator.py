"""The plugin's routes on a trace of the emulated device with findings injected on purpose
(timing mode; a CPU-fallback op and host syncs each step): the report equals
``neuron-prof analyze --json``, the injected causes are there, and the timeline route draws the
NeuronCore's queues and its gaps by cause with totals kept, downsampled or not."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("tensorboard")

from tb_plugin_client import ROUTE, cli_document, ids, make_emulator_trace, make_plugin  # noqa: E402

from neuron_profiler.tensorboard import plugin as plugin_module  # noqa: E402

TOLERANCE_US = 1e-3  # a series' µs segments add up to its total within float rounding


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("emu_logdir")
    make_emulator_trace(root / "emulator")
    return root


def _timeline_checks(tl: dict, report: dict) -> None:
    for series in tl["queues"] + tl["idle"]:
        seg = series["segments"]
        assert len(seg["start_us"]) <= tl["max_segments"]
        total_ms = series.get("busy_ms", series.get("idle_ms"))
        assert abs(sum(seg["busy_us"]) - total_ms * 1e3) <= TOLERANCE_US
    for dev in report["idle"]["devices"]:
        mine = {s["cause"]: s["idle_ms"] for s in tl["idle"] if s["device"] == dev["device"]}
        assert sum(mine.values()) == pytest.approx(dev["idle_ms"], abs=1e-6)
        for cause, ms in dev["by_cause_ms"].items():
            assert mine.get(cause, 0.0) == pytest.approx(ms, abs=1e-6)


def test_emulator_report_and_timeline(logdir: Path) -> None:
    _, client = make_plugin(logdir)
    (path,) = (logdir / "emulator").glob("*.pt.trace.json")
    q = ids(client, "emulator", "emu")
    report = client.get(f"{ROUTE}/report", query_string=q)
    assert report.status_code == 200
    doc = report.get_json()["traces"][0]
    assert doc == cli_document(logdir, path.relative_to(logdir).as_posix())
    # the injected causes
    assert [f["op"] for f in doc["fallbacks"]] == ["aten::bincount"]
    assert doc["syncs"] and doc["load_warnings"] == []
    assert doc["idle"]["by_cause_ms"]["cpu_fallback"] > 0
    assert all(0 < d["busy_pct"] <= 100 for d in doc["idle"]["devices"])

    tl = client.get(f"{ROUTE}/timeline", query_string=q).get_json()
    assert {s["label"] for s in tl["queues"]} == {"NeuronCore 0"}
    assert len(tl["queues"]) >= 2  # compute and DMA queues at least
    assert "cpu_fallback" in {s["cause"] for s in tl["idle"]}
    _timeline_checks(tl, doc)


def test_emulator_timeline_downsampled(logdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bound lowered to 3 segments a series: every series with more intervals is binned, and
    its total is unchanged."""
    monkeypatch.setattr(plugin_module, "TIMELINE_SEGMENTS", 3)
    _, client = make_plugin(logdir)
    q = ids(client, "emulator", "emu")
    tl = client.get(f"{ROUTE}/timeline", query_string=q).get_json()
    doc = client.get(f"{ROUTE}/report", query_string=q).get_json()["traces"][0]
    assert tl["max_segments"] == 3 and tl["downsampled"]
    for series in tl["queues"] + tl["idle"]:
        assert series["exact"] == (series["intervals"] <= 3)
        assert len(series["segments"]["start_us"]) <= 3
    _timeline_checks(tl, doc)
