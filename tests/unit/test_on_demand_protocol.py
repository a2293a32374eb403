"""The on-demand capture protocol and the CLI's checks, without a training process: request
parsing, atomic files, the one-request-at-a-time rule, and that the requesting side never
imports torch."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from neuron_profiler.on_demand import client
from neuron_profiler.on_demand import protocol as P


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ({"steps": 3}, "request_id"),
        ({"request_id": "a", "steps": "three"}, "invalid literal"),
        ({"request_id": "a", "steps": 0}, "steps=0"),
        ({"request_id": "a", "steps": 2, "delay_steps": -1}, "delay=-1"),
    ],
)
def test_malformed_requests_are_refused(doc: dict, problem: str) -> None:
    with pytest.raises(ValueError, match="malformed capture request") as err:
        P.Request.from_json(doc)
    assert problem in str(err.value)


def test_a_request_survives_its_round_trip() -> None:
    req = P.Request("r1", steps=4, delay_steps=2, memory=True, stack=False, shapes=True)
    assert P.Request.from_json(asdict(req)) == req


def test_status_files_are_whole_and_leave_no_temporary(tmp_path: Path) -> None:
    status = P.Status("r1", P.RECORDING, steps_seen=2, steps_total=5)
    P.write_status(tmp_path, 123, status)
    assert P.read_status(tmp_path, 123) == status
    assert [p.name for p in tmp_path.iterdir()] == ["123.status.json"]
    (tmp_path / "124.status.json").write_text('{"request_id": "x", "sta')  # torn: not a status
    assert P.read_status(tmp_path, 124) is None


def test_send_refuses_a_second_request(tmp_path: Path) -> None:
    client.send(tmp_path, 77, P.Request("first", steps=1))
    with pytest.raises(client.CaptureError, match="pid 77: a capture is already in progress"):
        client.send(tmp_path, 77, P.Request("second", steps=1))
    assert P.read_json(P.request_path(tmp_path, 77))["request_id"] == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["77.request.json"]


def test_send_all_sends_to_all_or_none(tmp_path: Path) -> None:
    client.send(tmp_path, 9, P.Request("other", steps=1))  # another capture holds pid 9
    with pytest.raises(client.CaptureError, match="pid 9: a capture is already in progress"):
        client.send_all(tmp_path, [5, 7, 9], P.Request("mine", steps=1))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["9.request.json"]
    assert P.read_json(P.request_path(tmp_path, 9))["request_id"] == "other"


def test_armed_pids_reads_only_registrations(tmp_path: Path) -> None:
    for name in ("12.armed.json", "3.armed.json", "x.armed.json", "4.status.json"):
        (tmp_path / name).write_text("{}")
    assert P.armed_pids(tmp_path) == [3, 12]


def test_all_takes_only_this_users_live_armed_processes(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    me, other_user = os.getpid(), os.getppid()
    P.write_json_atomic(P.armed_path(tmp_path, me), {"pid": me, "uid": os.getuid()})
    P.write_json_atomic(P.armed_path(tmp_path, gone.pid), {"pid": gone.pid, "uid": os.getuid()})
    P.write_json_atomic(P.armed_path(tmp_path, other_user), {"uid": os.getuid() + 1})
    assert client.targets(tmp_path, (), every=True) == [me]


def test_the_requesting_side_never_imports_torch() -> None:
    code = (
        "import sys\n"
        "import neuron_profiler.on_demand, neuron_profiler.on_demand.client\n"
        "import neuron_profiler.cli.capture\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
