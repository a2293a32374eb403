"""The plugin's ``projection`` route: ``neuron-prof project --chip CHIP --json`` of the chosen
trace (the CLI run as a process, the independent side), cached per chip; the ``chips`` route;
bad chips and traces naming no chip as one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorboard")

from tb_plugin_client import ROUTE, ids, make_plugin  # noqa: E402
from trace_factory import mm_then_sync as _mm_then_sync  # noqa: E402

from neuron_profiler.analysis.projection import TARGETS  # noqa: E402
from neuron_profiler.cli.project import CHOICES  # noqa: E402
from neuron_profiler.costmodel.chips import CHIPS  # noqa: E402
from neuron_profiler.exporters.chrome import write_chrome_trace  # noqa: E402

V100 = {"deviceProperties": [{"id": 0, "name": "Tesla V100-SXM2-32GB"}]}


@pytest.fixture()
def logdir(tmp_path: Path) -> Path:
    (tmp_path / "mm").mkdir()
    b = _mm_then_sync()
    b.b.metadata.update(V100)
    write_chrome_trace(b.b.build(), tmp_path / "mm" / "w.1.pt.trace.json")
    (tmp_path / "nochip").mkdir()
    write_chrome_trace(_mm_then_sync().b.build(), tmp_path / "nochip" / "w.1.pt.trace.json")
    return tmp_path


def _cli(logdir: Path, rel: str, chip: str, *extra: str) -> dict:
    exe = Path(sys.executable).with_name("neuron-prof")
    proc = subprocess.run(
        [str(exe), "project", rel, "--chip", chip, "--json", *extra],
        cwd=logdir,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_projection_equals_the_cli_and_is_cached_per_chip(logdir: Path) -> None:
    plugin, client = make_plugin(logdir)
    q = ids(client, "mm", "w")
    for chip in ("trn2", "h100"):
        answer = client.get(f"{ROUTE}/projection", query_string={**q, "chip": chip})
        assert answer.status_code == 200
        assert answer.get_json() == _cli(logdir, "mm/w.1.pt.trace.json", chip)
    again = client.get(f"{ROUTE}/projection", query_string={**q, "chip": "trn2"})
    assert again.get_json()["target"]["chip"] == "trn2"
    cache = plugin.projections["trn2", ""]
    assert (cache.misses, cache.hits) == (1, 1)


def test_chips_route_and_bad_chip(logdir: Path) -> None:
    _, client = make_plugin(logdir)
    chips = client.get(f"{ROUTE}/chips").get_json()
    assert chips == {"chips": list(TARGETS), "sources": list(CHIPS)}
    assert list(CHOICES) == list(TARGETS)  # the CLI's choices are the library's
    q = ids(client, "mm", "w")
    bad = client.get(f"{ROUTE}/projection", query_string={**q, "chip": "../etc"})
    assert bad.status_code == 400 and "chip must be one of" in bad.get_json()["error"]
    bad = client.get(f"{ROUTE}/projection", query_string={**q, "chip": "trn2", "source": "same"})
    assert bad.status_code == 400 and "source must be one of" in bad.get_json()["error"]


def test_trace_naming_no_chip_is_a_one_line_error_without_server_paths(logdir: Path) -> None:
    _, client = make_plugin(logdir)
    q = ids(client, "nochip", "w")
    answer = client.get(f"{ROUTE}/projection", query_string={**q, "chip": "trn2"})
    assert answer.status_code == 422
    error = answer.get_json()["error"]
    assert "\n" not in error and "no known chip" in error
    assert "--source-chip" not in error and "'Recorded on'" in error  # the view has no flags
    assert str(logdir) not in error and "nochip/w.1.pt.trace.json" in error
    same = client.get(f"{ROUTE}/projection", query_string={**q, "chip": "same"})
    assert same.status_code == 200 and same.get_json()["replay"]["error_pct"] == 0.0
    # the view's choice is the CLI's flag: the same document
    named = client.get(f"{ROUTE}/projection", query_string={**q, "chip": "trn2", "source": "v100"})
    assert named.status_code == 200
    assert named.get_json() == _cli(
        logdir, "nochip/w.1.pt.trace.json", "trn2", "--source-chip", "v100"
    )
    assert named.get_json()["source"]["chip"] != named.get_json()["target"]["chip"]
