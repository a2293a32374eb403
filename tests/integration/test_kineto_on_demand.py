"""Kineto's own on-demand paths against a training process on the emulated device
(tests/kineto_on_demand_workload.py), with the torch in the venv (docs/collector.md, "Kineto's
on-demand paths"):

- SIGUSR2 (``ENABLE_SIGUSR2=YES`` in the libkineto config file): torch's libkineto has no
  such trigger any more, so the signal's default action ends the process and no trace is
  written.
- The daemon path (``KINETO_USE_DAEMON=1``, dynolog's IPC, played by tests/fake_dynolog.py):
  the capture Kineto writes holds the NEURON device events, linked to the CPU ops that
  launched them, in a process that never ran torch.profiler itself.

The independent truth is the workload itself: its ``train_step_<i>`` annotations and the aten
ops each step runs (every ``aten::addmm`` launches one ``TensorE: addmm`` kernel).
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_dynolog import FakeDynolog

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
WORKLOAD = REPO / "tests" / "kineto_on_demand_workload.py"
START_TIMEOUT_S = 180  # importing torch, loading the bridge, on 2 loaded cores
POLL_TIMEOUT_S = 60  # Kineto's config thread polls the daemon every second (base config below)
CAPTURE_TIMEOUT_S = 120  # request taken, warm-up, 0.5 s trace, written by Kineto's thread
KINETO_WARNING = 2  # libkineto's log levels: VERBOSE 0, INFO 1, WARNING 2, ERROR 3
_RUNTIME = "privateuse1_runtime"  # the runtime calls' category (docs/collector.md)
_UNLINKED = "neuron_unlinked_runtime_calls"
# Kineto's config file keys (libkineto/src/Config.cpp): poll the daemon every second, trace
# 0.5 s with no warm-up, starting as soon as the request is taken (a warm-up only waited: the
# test reads the whole steps inside the trace, not its edges).
BASE_CONFIG = "ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS=1\n"
REQUEST = (
    "PROFILE_START_TIME=0\nACTIVITIES_WARMUP_PERIOD_SECS=0\nACTIVITIES_DURATION_MSECS=500\n"
    "ACTIVITIES_LOG_FILE={log}\n"
)


def _start(directory: Path, extra_env: dict[str, str]) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), **extra_env}
    return subprocess.Popen(
        [sys.executable, str(WORKLOAD), str(directory)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def _wait_ready(proc: subprocess.Popen[str], seen: list[str] | None = None) -> int:
    """The pid the workload prints before its steps (fails with its output if it dies); the
    lines read on the way are added to ``seen``."""
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + START_TIMEOUT_S
    seen = [] if seen is None else seen
    while time.monotonic() < deadline:
        if sel.select(timeout=1.0):
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
            seen.append(line)
            if line.startswith("ready "):
                return int(line.split()[1])
    raise AssertionError(f"workload never got ready: {''.join(seen)[-3000:]}")


def _wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _finish(proc: subprocess.Popen[str], directory: Path) -> None:
    (directory / "stop").touch()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[FakeDynolog, dict[str, str]]]:
    """A fake dynolog and the environment that points Kineto at it. The sockets live in a
    short directory of their own: a unix socket's path has at most 107 bytes, and Kineto's
    client name alone takes 52 (pytest's tmp_path is too long)."""
    (tmp_path / "base.conf").write_text(BASE_CONFIG)
    with tempfile.TemporaryDirectory(prefix="kineto") as sockets:
        fake = FakeDynolog(Path(sockets))
        env = {
            "KINETO_USE_DAEMON": "1",
            "KINETO_IPC_SOCKET_DIR": sockets,
            "KINETO_CONFIG": str(tmp_path / "base.conf"),
            "KINETO_LOG_LEVEL": str(KINETO_WARNING),
        }
        yield fake, env
        fake.close()


def test_sigusr2_is_no_kineto_trigger_it_ends_the_process(
    tmp_path: Path, daemon: tuple[FakeDynolog, dict[str, str]]
) -> None:
    fake, env = daemon
    trace = tmp_path / "sigusr2_trace.json"
    # What the removed trigger read: the switch, and where its capture would have gone.
    (tmp_path / "base.conf").write_text(
        f"{BASE_CONFIG}ENABLE_SIGUSR2=YES\nACTIVITIES_LOG_FILE={trace}\n"
    )
    proc = _start(tmp_path, env)
    output: list[str] = []
    try:
        pid = _wait_ready(proc, output)
        # Kineto's config thread reads the base config before its first daemon poll: once a
        # poll arrived, a SIGUSR2 handler would have been installed had libkineto one.
        _wait_for(lambda: fake.polls.get(pid, 0) >= 1, POLL_TIMEOUT_S, "Kineto's first poll")
        os.kill(pid, signal.SIGUSR2)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            _finish(proc, tmp_path)
    assert proc.returncode == -signal.SIGUSR2  # the signal's default action, not a capture
    assert not list(tmp_path.glob("sigusr2_trace*.json"))
    # Why: torch's libkineto has no such key any more (kineto#1408 removed the SIGUSR2 path).
    assert proc.stdout is not None
    output.append(proc.stdout.read())
    assert "Unrecognized config line: ENABLE_SIGUSR2=YES" in "".join(output)


def _written(directory: Path) -> bool:
    """The capture is there and whole: Kineto writes to a temporary name and renames, and a
    file caught mid-write does not parse."""
    try:
        return "traceEvents" in _load_capture(directory)
    except (ValueError, OSError):  # not there yet (unpacking none), or not whole
        return False


def _load_capture(directory: Path) -> dict:
    (path,) = directory.glob("daemon_trace*.json")  # Kineto adds the pid to the name
    return json.loads(path.read_text())


def test_daemon_capture_has_neuron_events_linked_to_their_ops(
    tmp_path: Path, daemon: tuple[FakeDynolog, dict[str, str]]
) -> None:
    fake, env = daemon
    proc = _start(tmp_path, env)
    try:
        pid = _wait_ready(proc)
        fake.trigger(pid, REQUEST.format(log=tmp_path / "daemon_trace.json"))
        _wait_for(lambda: _written(tmp_path), CAPTURE_TIMEOUT_S, "Kineto's on-demand trace")
    finally:
        _finish(proc, tmp_path)
    assert fake.delivered == [pid]
    trace = _load_capture(tmp_path)
    events = trace["traceEvents"]
    ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op"}
    kernels = [e for e in events if e.get("cat") == "kernel"]
    steps = sorted(
        (e for e in events if e.get("name", "").startswith("train_step_")), key=lambda e: e["ts"]
    )
    # The session was Kineto's own (no torch.profiler in the workload) and the collector ran.
    assert trace["neuron_source"] == "emulator"
    assert len(steps) >= 4 and kernels
    # Every kernel launched within the whole steps (not the first, which may have begun before
    # the session, nor the last, which torch may have closed at its stop) is linked to the
    # aten op that launched it, in the same trace. At the edges work can be unlinked (counted)
    # or linked to a dispatch frame or a stale op (docs/collector.md): not asserted here.
    launched = {e["args"]["correlation"]: e["ts"] for e in events if e.get("cat") == _RUNTIME}
    first, last = steps[1]["ts"], steps[-2]["ts"] + steps[-2]["dur"]
    inner = [k for k in kernels if first <= launched.get(k["args"]["correlation"], -1.0) <= last]
    assert len(inner) >= 2 * (len(steps) - 2)  # at least the two addmm kernels a step
    assert [k for k in inner if "External id" not in k["args"]] == []
    assert [k for k in inner if ops[k["args"]["External id"]]["name"] != k["args"]["op"]] == []
    assert sum("External id" not in k["args"] for k in kernels) <= trace[_UNLINKED]
    # In each whole step, every aten::addmm launched one TensorE kernel.
    by_op: dict[int, list[str]] = {}
    for k in inner:
        by_op.setdefault(k["args"]["External id"], []).append(k["name"])
    for step in steps[1:-1]:
        inside = [
            e
            for e in ops.values()
            if e["name"] == "aten::addmm" and step["ts"] <= e["ts"] <= step["ts"] + step["dur"]
        ]
        assert len(inside) == 2  # the MLP's two Linear layers, forward
        for op in inside:
            assert by_op.get(op["args"]["External id"]) == ["TensorE: addmm"], step["name"]
