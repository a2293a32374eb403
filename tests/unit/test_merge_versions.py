"""``merge`` and the runtime format's ``data_version``: every device input is parsed as one
stream, so inputs stating different versions are refused in one line naming each file and its
versions; a version the parser was not written for is warned about and read; inputs that state
none agree with any. Device files are written by hand here (the runtime's documented envelope)."""

from __future__ import annotations

import itertools
import json
import warnings
from pathlib import Path

import pytest

from neuron_profiler.cli.main import main
from neuron_profiler.exporters.chrome import write_chrome_trace
from neuron_profiler.runtime_trace import format as F
from neuron_profiler.runtime_trace.merge import merge_files
from neuron_profiler.trace import schema as S
from neuron_profiler.trace.model import TraceBuilder

T0 = 1_800_000_000_000_000_000
TID = 777
_IDS = itertools.count(1)  # tracking ids: one start/stop pair each, across files


def _host(path: Path) -> Path:
    b = TraceBuilder("host.json")
    b.add(name="aten::mm", ts_ns=T0, dur_ns=1_000_000, kind=S.EventKind.CPU_OP, cat="cpu_op",
          pid=1, tid=TID, args={"External id": 1})  # fmt: skip
    write_chrome_trace(b.build(), path)
    return path


def _envelope(version: object, first: int = 0) -> dict[str, object]:
    t = T0 + 10_000 + first * 1_000
    events = [
        {"event_type": F.NC_EXEC_RUNNING, "phase": phase, "tracking_id": first, "nc_idx": 0,
         "thread_id": TID, "timestamp_ns": ts, "data": {}}
        for phase, ts in (("start", t), ("stop", t + 500))
    ]  # fmt: skip
    doc: dict[str, object] = {"events": events}
    if version is not None:
        doc["data_version"] = version
    return doc


def _device(path: Path, *versions: object) -> Path:
    """One envelope per version, written one after another (several fetches)."""
    path.write_text("".join(json.dumps(_envelope(v, next(_IDS))) for v in versions))
    return path


def test_inputs_of_one_version_merge_quietly(tmp_path: Path) -> None:
    host = _host(tmp_path / "host.json")
    a, b = _device(tmp_path / "a.json", 2), _device(tmp_path / "b.json", 2, 2.0)  # 2.0 is 2
    c = _device(tmp_path / "c.json", None)  # states none: agrees with any
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = merge_files(host, [a, b, c])
    assert result.activities == 4


@pytest.mark.parametrize(
    "files, listed",
    [
        ({"a.json": (2,), "b.json": (3,)}, "a.json: 2; {d}/b.json: 3"),
        ({"a.json": (2, 1)}, "a.json: 1, 2"),  # two fetches of one file
        ({"a.json": (2,), "b.json": ("3",), "c.json": (None,)}, "a.json: 2; {d}/b.json: 3"),
        ({"a.json": (2,), "b.json": ("two",)}, 'a.json: 2; {d}/b.json: "two"'),
        ({"a.json": (2,), "b.json": ({"a": 1},)}, 'a.json: 2; {d}/b.json: {{"a":1}}'),
        ({"a.json": ([2], 2)}, "a.json: 2, [2]"),
    ],
    ids=[
        "two-files",
        "within-one-file",
        "digit-string-and-unstated",
        "not-a-number",
        "an-object",
        "a-list",
    ],
)
def test_inputs_that_disagree_are_refused_in_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    files: dict[str, tuple[object, ...]],
    listed: str,
) -> None:
    host = _host(tmp_path / "host.json")
    paths = [str(_device(tmp_path / name, *v)) for name, v in files.items()]
    out = tmp_path / "out.json"
    assert main(["merge", str(host), *paths, "-o", str(out)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and not out.exists()
    assert err[0].startswith("neuron-prof: error: device event inputs disagree on data_version (")
    assert f"{tmp_path}/" + listed.format(d=tmp_path) in err[0]


def test_an_unknown_version_is_warned_and_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    host = _host(tmp_path / "host.json")
    dev = _device(tmp_path / "d.json", 3, 3)
    out = tmp_path / "out.json"
    assert main(["merge", str(host), str(dev), "-o", str(out)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"neuron-prof: warning: {dev}: data_version 3, but this parser reads version "
        f"{F.DATA_VERSION}: fields it does not know are kept in args, fields whose meaning "
        "changed may be misread"
    ]
    assert out.exists()
