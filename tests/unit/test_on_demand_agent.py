"""The armed process's step marker in this process, on the CPU (no emulator): requests taken
through a real optimizer's step hook, the rate-limited idle check, and that an error inside a
capture ends the request, not the training."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from neuron_profiler.on_demand import agent as agent_module  # noqa: E402
from neuron_profiler.on_demand import protocol as P  # noqa: E402


@pytest.fixture
def armed(tmp_path: Path) -> Iterator[agent_module.Agent]:
    agent = agent_module.Agent(tmp_path)
    agent.arm()
    yield agent
    agent.disarm()


def _train(steps: int, *optimizers: torch.optim.Optimizer) -> None:
    for _ in range(steps):
        for opt in optimizers:
            opt.step()


def _optimizer() -> torch.optim.Optimizer:
    w = torch.nn.Parameter(torch.ones(4))
    w.grad = torch.ones(4)
    return torch.optim.SGD([w], lr=0.1)


def test_registration_names_this_process(armed: agent_module.Agent) -> None:
    doc = P.read_json(P.armed_path(armed.directory, os.getpid()))
    assert doc is not None and doc["pid"] == os.getpid() and doc["uid"] == os.getuid()
    assert "rank" not in doc  # torch.distributed is not initialised here


def test_a_cpu_capture_through_the_optimizer_hook(armed: agent_module.Agent) -> None:
    opt = _optimizer()
    P.write_json_atomic(
        P.request_path(armed.directory, os.getpid()), {"request_id": "c1", "steps": 2}
    )
    armed.next_check = 0.0
    _train(1 + 1 + 2, opt)  # take the request, warm-up, 2 recorded steps, the closing marker
    status = P.read_status(armed.directory, os.getpid())
    assert status is not None and status.state == P.DONE, status
    trace = json.loads(Path(status.trace).read_text())
    names = [e["name"] for e in trace["traceEvents"] if e.get("ph") == "X"]
    assert sorted(n for n in names if n.startswith("ProfilerStep#")) == [
        "ProfilerStep#1",
        "ProfilerStep#2",
    ]
    assert not any(e.get("cat") == "kernel" for e in trace["traceEvents"])  # CPU only here


def test_only_the_first_optimizer_paces_the_steps(armed: agent_module.Agent) -> None:
    first, second = _optimizer(), _optimizer()
    seen = []
    armed.step = lambda: seen.append(1)  # type: ignore[method-assign]
    _train(5, first, second)
    assert len(seen) == 5


def test_an_idle_check_is_rate_limited(
    armed: agent_module.Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    request = str(P.request_path(armed.directory, os.getpid()))
    stats = []
    real_stat = os.stat
    monkeypatch.setattr(
        agent_module.os, "stat", lambda p, *a, **k: (stats.append(str(p)), real_stat(p, *a, **k))[1]
    )
    monkeypatch.setattr(agent_module, "CHECK_INTERVAL_S", 3600.0)
    armed.next_check = 0.0
    _train(50, _optimizer())
    assert stats.count(request) == 1


def test_an_error_in_the_capture_ends_the_request_not_the_training(
    armed: agent_module.Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("injected profiler failure")

    monkeypatch.setattr(torch.profiler, "profile", broken)
    opt = _optimizer()
    P.write_json_atomic(
        P.request_path(armed.directory, os.getpid()), {"request_id": "e1", "steps": 3}
    )
    armed.next_check = 0.0
    _train(3, opt)  # no exception reaches the loop
    status = P.read_status(armed.directory, os.getpid())
    assert status is not None and status.state == P.ERROR
    assert status.error == "RuntimeError: injected profiler failure"
    assert "injected profiler failure" in status.detail.splitlines()[-1]
    assert not P.request_path(armed.directory, os.getpid()).exists()
    assert armed.capture is None and armed.handle is not None  # still armed


def test_a_running_profiler_is_left_alone(armed: agent_module.Agent) -> None:
    opt = _optimizer()
    P.write_json_atomic(
        P.request_path(armed.directory, os.getpid()), {"request_id": "u1", "steps": 1}
    )
    armed.next_check = 0.0
    with torch.profiler.profile() as users:
        _train(4, opt)
    status = P.read_status(armed.directory, os.getpid())
    assert status is not None and status.state == P.ERROR
    assert "a profiler is already running in this process" in status.error
    steps = [e for e in users.events() if e.name == "Optimizer.step#SGD.step"]
    assert len(steps) == 4  # the user's profile kept every step


def test_enable_reads_the_environment_and_disable_unregisters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from neuron_profiler import on_demand

    monkeypatch.delenv(on_demand.ENV_VAR, raising=False)
    with pytest.raises(ValueError, match="NEURON_PROFILER_ON_DEMAND is not set"):
        on_demand.enable()
    monkeypatch.setenv(on_demand.ENV_VAR, str(tmp_path))
    on_demand.enable()
    try:
        on_demand.enable(dir=tmp_path)  # the same directory again: still one registration
        assert P.armed_pids(tmp_path) == [os.getpid()] and on_demand.is_enabled()
    finally:
        on_demand.disable()
    assert P.armed_pids(tmp_path) == [] and not on_demand.is_enabled()


def test_a_process_that_disarms_mid_capture_leaves_the_steps_it_recorded(tmp_path: Path) -> None:
    """A job that ends normally (atexit disarms) during a 5-step capture: stopping the
    profiler writes the steps recorded so far; the status is DONE with that trace, and says
    how many steps it holds."""
    agent = agent_module.Agent(tmp_path)
    agent.arm()
    opt = _optimizer()
    P.write_json_atomic(P.request_path(tmp_path, os.getpid()), {"request_id": "c2", "steps": 5})
    agent.next_check = 0.0
    _train(1 + 1 + 2, opt)  # take the request, warm-up, 2 of the 5 recorded steps
    agent.disarm()
    status = P.read_status(tmp_path, os.getpid())
    assert status is not None and status.state == P.DONE, status
    assert "after 2 of 5 recorded steps" in status.detail, status
    trace = json.loads(Path(status.trace).read_text())
    steps = [e["name"] for e in trace["traceEvents"] if e["name"].startswith("ProfilerStep#")]
    assert steps and not list(tmp_path.glob(".*.tmp"))
