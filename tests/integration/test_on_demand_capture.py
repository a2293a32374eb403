"""``neuron-prof capture`` against real training processes on the emulated device
(tests/on_demand_workload.py: a tiny MLP in timing mode, each step wrapped in
``train_step_<i>``), single process and two gloo ranks, and every refusal the command makes.

The workload's own ``train_step_<i>`` annotations are the independent truth for the step
window: the capture must hold exactly the requested number of them, consecutive, each inside
one of torch.profiler's ``ProfilerStep#`` spans.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from neuron_profiler.cli.main import main
from neuron_profiler.on_demand import protocol as P

REPO = Path(__file__).resolve().parents[2]
WORKLOAD = REPO / "tests" / "on_demand_workload.py"
START_TIMEOUT_S = 180  # importing torch and arming, on 2 loaded cores


def _start(directory: Path, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, str(WORKLOAD), str(directory), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def _wait_armed(proc: subprocess.Popen[str]) -> int:
    """The pid the workload prints once armed (fails with its output if it dies first)."""
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + START_TIMEOUT_S
    seen = []
    while time.monotonic() < deadline:
        if sel.select(timeout=1.0):
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
            seen.append(line)
            if line.startswith("armed "):
                return int(line.split()[1])
    raise AssertionError(f"workload never armed: {''.join(seen)[-3000:]}")


def _stop(directory: Path, *procs: subprocess.Popen[str]) -> None:
    (directory / "stop").touch()
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def armed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int]]:
    directory = tmp_path_factory.mktemp("armed")
    proc = _start(directory)
    pid = _wait_armed(proc)
    yield directory, pid
    _stop(directory, proc)


def _capture(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["capture", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _trace_of(out: str) -> dict:
    paths = [line for line in out.splitlines() if line.endswith(P.TRACE_SUFFIX)]
    assert len(paths) == 1, out
    return json.loads(Path(paths[0]).read_text())


def _spans(trace: dict, pattern: str) -> list[dict]:
    return [
        e for e in trace["traceEvents"] if e.get("ph") == "X" and re.fullmatch(pattern, e["name"])
    ]


def _check_window(trace: dict, steps: int, first: int | None = None) -> None:
    """Exactly ``steps`` profiler steps, holding consecutive training steps (from ``first``)."""
    profiler_steps = _spans(trace, r"ProfilerStep#\d+")
    train_steps = _spans(trace, r"train_step_\d+")
    assert len(profiler_steps) == steps
    numbers = sorted(int(e["name"].rsplit("_", 1)[1]) for e in train_steps)
    start = numbers[0] if first is None else first
    assert numbers == list(range(start, start + steps))
    # a profiler step runs from one optimizer.step() (the marker) to the next: it holds the
    # start of exactly one training step, and ends inside that training step, at its optimizer
    for t in train_steps:
        holding = [p for p in profiler_steps if p["ts"] <= t["ts"] < p["ts"] + p["dur"]]
        assert len(holding) == 1, t["name"]
        assert t["ts"] < holding[0]["ts"] + holding[0]["dur"] <= t["ts"] + t["dur"]


def test_capture_has_device_events_and_exactly_the_requested_steps(
    armed: tuple[Path, int], capsys: pytest.CaptureFixture[str]
) -> None:
    directory, pid = armed
    code, out, err = _capture(
        capsys, "--pid", str(pid), "--steps", "3", "--delay-steps", "2", "-o", str(directory)
    )
    assert code == 0, err
    trace = _trace_of(out)
    status = P.read_status(directory, pid)
    assert status is not None and status.state == P.DONE and status.steps_total == 2 + 1 + 3
    # the workload's step i ends at marker i: taken at marker t, 2 steps of delay, 1 warm-up
    _check_window(trace, 3, first=status.taken_at_step + 2 + 1 + 1)
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    assert kernels and trace["neuron_timing_modelled"] is True
    # the options not asked for are off
    assert not any("Input Dims" in e.get("args", {}) for e in trace["traceEvents"])
    assert not any(e.get("name") == "[memory]" for e in trace["traceEvents"])
    assert not any(e.get("cat") == "python_function" for e in trace["traceEvents"])
    assert "distributedInfo" not in trace
    assert re.search(r"no rank · 3 steps · mean step [\d.]+ ms · device idle", out)
    assert not P.request_path(directory, pid).exists()  # the request ended


def test_capture_honours_memory_stack_and_shapes(
    armed: tuple[Path, int], capsys: pytest.CaptureFixture[str]
) -> None:
    directory, pid = armed
    code, out, err = _capture(
        capsys,
        *("--pid", str(pid), "--steps", "2", "--memory", "--stack", "--shapes"),
        *("-o", str(directory)),
    )
    assert code == 0, err
    trace = _trace_of(out)
    _check_window(trace, 2)
    events = trace["traceEvents"]
    linears = [e for e in events if e.get("name") == "aten::addmm"]
    assert linears and all("Input Dims" in e["args"] for e in linears)
    assert [32, 64] in [d for e in linears for d in e["args"]["Input Dims"]]
    assert any(e.get("name") == "[memory]" for e in events)
    assert any(e.get("cat") == "python_function" for e in events)


def test_a_malformed_request_fails_alone_and_training_goes_on(
    armed: tuple[Path, int], capsys: pytest.CaptureFixture[str]
) -> None:
    directory, pid = armed
    P.write_json_atomic(P.request_path(directory, pid), {"request_id": "bad", "steps": 0})
    deadline = time.monotonic() + 60
    while (status := P.read_status(directory, pid)) is None or status.request_id != "bad":
        assert time.monotonic() < deadline, "the process never answered the request"
        time.sleep(0.1)
    assert status.state == P.ERROR and "steps=0" in status.error
    assert not P.request_path(directory, pid).exists()
    code, out, err = _capture(capsys, "--pid", str(pid), "--steps", "1", "-o", str(directory))
    assert code == 0, err  # still armed, still training
    _check_window(_trace_of(out), 1)


def test_a_second_capture_while_one_runs_is_refused(
    armed: tuple[Path, int], capsys: pytest.CaptureFixture[str]
) -> None:
    directory, pid = armed
    first = subprocess.Popen(
        [sys.executable, "-m", "neuron_profiler.cli.main", "capture", "--pid", str(pid)]
        # 40 steps of delay (>= 0.8 s: each step sleeps STEP_PAUSE_S) keep it in progress
        + ["--steps", "1", "--delay-steps", "40", "-o", str(directory)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not P.request_path(directory, pid).exists():
        assert time.monotonic() < deadline and first.poll() is None
        time.sleep(0.05)
    code, out, err = _capture(capsys, "--pid", str(pid), "--steps", "1", "-o", str(directory))
    assert code == 2 and f"pid {pid}: a capture is already in progress" in err
    assert len(err.strip().splitlines()) == 1
    out1, err1 = first.communicate(timeout=120)
    assert first.returncode == 0, err1  # the first one was not disturbed
    assert "no rank · 1 step ·" in out1  # (no distributedInfo: not rank 0)


def test_refusals_are_one_line_and_exit_2(
    armed: tuple[Path, int], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory, pid = armed
    gone = subprocess.Popen(["true"])
    gone.wait()
    cases = {
        f"pid {gone.pid}: no such process": ("--pid", str(gone.pid), "-o", str(directory)),
        f"pid {os.getpid()}: not armed in {directory}": (
            "--pid",
            str(os.getpid()),
            "-o",
            str(directory),
        ),
        "/proc: not writable": ("--pid", str(pid), "-o", "/proc"),
        f"{tmp_path / 'nowhere'}: no such directory": (
            "--pid",
            str(pid),
            "-o",
            str(tmp_path / "nowhere"),
        ),
        f"{tmp_path}: no live process of this user is armed there": ("--all", "-o", str(tmp_path)),
    }
    for message, args in cases.items():
        code, out, err = _capture(capsys, *args)
        assert (code, out) == (2, ""), message
        assert err.startswith(f"neuron-prof: error: {message}"), err
        assert len(err.strip().splitlines()) == 1, err
        assert not P.request_path(directory, pid).exists()  # nothing was asked


def test_timeout_withdraws_a_request_never_taken(
    armed: tuple[Path, int], capsys: pytest.CaptureFixture[str]
) -> None:
    """The armed process, stopped (SIGSTOP): alive, but no optimizer step comes to take the
    request. (A process of its own that never steps cost a torch start-up, ~5 s.)"""
    directory, pid = armed
    os.kill(pid, signal.SIGSTOP)
    try:
        code, out, err = _capture(capsys, "--pid", str(pid), "--timeout", "1", "-o", str(directory))
    finally:
        os.kill(pid, signal.SIGCONT)
    assert code == 2 and f"pid {pid}: timed out after 1 s (request not taken" in err
    assert not P.request_path(directory, pid).exists()
    # the process is left as it was: armed, and it takes the next request
    code, out, err = _capture(capsys, "--pid", str(pid), "--steps", "1", "-o", str(directory))
    assert code == 0, err
    _check_window(_trace_of(out), 1)


def test_a_process_killed_mid_capture_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proc = _start(tmp_path)
    pid = _wait_armed(proc)
    capture = subprocess.Popen(
        [sys.executable, "-m", "neuron_profiler.cli.main", "capture", "--pid", str(pid)]
        + ["--steps", "500", "--timeout", "120", "-o", str(tmp_path)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while (status := P.read_status(tmp_path, pid)) is None or status.state != P.RECORDING:
        assert time.monotonic() < deadline and capture.poll() is None
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    proc.wait()
    out, err = capture.communicate(timeout=60)
    assert capture.returncode == 2 and out == ""
    assert f"pid {pid}: process exited mid-capture" in err
    assert not list(tmp_path.glob(f"*{P.TRACE_SUFFIX}"))  # no half-written trace
    assert not P.request_path(tmp_path, pid).exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_ranks_each_write_their_own_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = str(_free_port())
    procs = [_start(tmp_path, "--ranks", "2", "--rank", str(r), "--port", port) for r in (0, 1)]
    try:
        pids = [_wait_armed(p) for p in procs]
        code, out, err = _capture(
            capsys,
            "--pid",
            str(pids[0]),
            "--pid",
            str(pids[1]),
            "--steps",
            "2",
            "-o",
            str(tmp_path),
        )
        assert code == 0, err
        paths = [Path(line) for line in out.splitlines() if line.endswith(P.TRACE_SUFFIX)]
        assert len(paths) == 2
        infos = {}
        for path in paths:
            trace = json.loads(path.read_text())
            _check_window(trace, 2)
            assert any(e.get("cat") == "kernel" for e in trace["traceEvents"])
            info = trace["distributedInfo"]
            assert info["world_size"] == 2 and info["backend"] == "gloo"
            assert path.name.startswith(f"rank{info['rank']}_")
            infos[info["rank"]] = path
        assert sorted(infos) == [0, 1]
        for rank in (0, 1):
            assert re.search(rf"rank {rank} · 2 steps", out)
        registration = P.read_json(P.armed_path(tmp_path, pids[1]))
        assert registration is not None and registration["rank"] == 1
        code, out, err = _capture(capsys, "--all", "--steps", "1", "-o", str(tmp_path))
        assert code == 0, err
        assert f"asked 2 processes ({min(pids)}, {max(pids)})" in err
        assert len([line for line in out.splitlines() if line.endswith(P.TRACE_SUFFIX)]) == 2
    finally:
        _stop(tmp_path, *procs)
