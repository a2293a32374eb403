"""The armed process's side of on-demand capture: a step marker (a global optimizer step
post-hook, or ``on_demand.step()``) that checks for a request file at most every
``CHECK_INTERVAL_S`` and, once a request is taken, runs ``torch.profiler.profile`` over the
requested steps, stepping it from the same marker.

Nothing here may crash or stall training: every error inside the marker is caught, written to
the status file, and ends that request (the process stays armed for the next one).
"""

from __future__ import annotations

import atexit
import os
import socket
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from neuron_profiler.on_demand import protocol as P
from neuron_profiler.trace import vocabulary as V

# At most one request check per this many seconds: an ``os.stat`` costs about 1-2 µs, so the
# armed-but-idle cost stays under 0.02 % of any step; a request is seen within one step of a
# step longer than this (docs/capture.md).
CHECK_INTERVAL_S = 0.01
# torch.profiler's schedule: one warm-up step before the recorded ones (Kineto's own advice:
# the first step after a start carries the tracer's set-up cost).
WARMUP_STEPS = 1


@dataclass
class _Capture:
    """One request being served: steps seen since it was taken, the profiler once started."""

    request: P.Request
    taken_at: int = 0  # the marker that took it (markers counted from 0 since arming)
    steps_seen: int = 0
    profiler: Any = None
    trace: Path | None = None
    ready: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def steps_total(self) -> int:
        return self.request.delay_steps + WARMUP_STEPS + self.request.steps


class Agent:
    """The armed state of this process (one per process; see ``on_demand.enable``)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.pid = os.getpid()
        self.next_check = 0.0
        self.markers = 0  # step markers seen since arming
        self.rank_known = False
        self.capture: _Capture | None = None
        self.handled: set[str] = set()  # request ids ended, in case their file outlives them
        self.pacer: int | None = None  # id() of the optimizer whose steps count
        self.other: int | None = None
        self.handle: Any = None

    # -- arming ---------------------------------------------------------------------------
    def arm(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self.directory.mkdir(parents=True, exist_ok=True)
        self.handle = register_optimizer_step_post_hook(self._on_optimizer)
        try:
            self._register()
        except BaseException:
            self.handle.remove()
            raise
        atexit.register(self.disarm)

    def disarm(self) -> None:
        if self.handle is not None:
            self.handle.remove()
            self.handle = None
        if os.getpid() != self.pid:
            return
        if self.capture is not None:
            self._cut_short(self.capture)
        P.armed_path(self.directory, self.pid).unlink(missing_ok=True)

    def _cut_short(self, capture: _Capture) -> None:
        """The process disarms (or exits normally) while recording: stopping the profiler
        writes what it recorded (its trace callback), which is the capture's trace, with the
        steps it holds said in the status; nothing recorded, the request fails."""
        try:
            if capture.profiler is not None and not capture.ready:
                capture.profiler.stop()
        except Exception:  # noqa: BLE001 - the status says it failed
            capture.ready = False
        if not capture.ready:
            self._fail("the process disarmed (or exited) during the capture")
            return
        self.capture = None
        self._write_status(
            capture,
            P.DONE,
            trace=str(capture.trace),
            detail="the process disarmed (or exited) after "
            f"{max(capture.steps_seen - WARMUP_STEPS, 0)} of {capture.request.steps} recorded "
            "steps: the trace holds those",
        )
        self._end(capture)

    def _register(self) -> None:
        doc: dict[str, Any] = {
            "pid": self.pid,
            "uid": os.getuid(),
            "host": socket.gethostname(),
            "armed_at": time.time(),
        }
        info = _distributed_info()
        if info is not None:
            doc.update(info)
            self.rank_known = True
        P.write_json_atomic(P.armed_path(self.directory, self.pid), doc)

    # -- the step marker ------------------------------------------------------------------
    def _on_optimizer(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """Counts one step per step of the pacing optimizer: the first to step after arming,
        or another one that steps twice in a row without it (the first was replaced)."""
        key = id(optimizer)
        if self.pacer is None:
            self.pacer = key
        elif key != self.pacer:
            if key != self.other:
                self.other = key
                return
            self.pacer = key
        self.other = None
        self.step()

    def step(self) -> None:
        """The step marker: cheap when idle (a clock read; one stat per CHECK_INTERVAL_S)."""
        self.markers += 1
        try:
            if self.capture is not None:
                self._advance(self.capture)
                return
            now = time.monotonic()
            if now < self.next_check:
                return
            self.next_check = now + CHECK_INTERVAL_S
            self._poll()
        except Exception as err:  # noqa: BLE001 - training must never see a capture error
            self._fail(f"{type(err).__name__}: {err}", traceback.format_exc(limit=4))

    def _poll(self) -> None:
        if os.getpid() != self.pid:  # a forked child inherits the hook, not the arming
            return
        if not self.rank_known and _distributed_info() is not None:
            self._register()
        path = P.request_path(self.directory, self.pid)
        try:
            os.stat(path)
        except FileNotFoundError:
            return
        doc = P.read_json(path)
        if doc is None:  # being written (cannot be: atomic) or garbage: say so, drop it
            doc = {"request_id": "?"}
        request_id = str(doc.get("request_id", "?"))
        if request_id in self.handled:
            return
        try:
            request = P.Request.from_json(doc)
        except ValueError as err:
            self.capture = _Capture(P.Request(request_id=request_id, steps=1))
            self._fail(str(err))
            return
        self.capture = _Capture(request, taken_at=self.markers - 1)
        self._write_status(self.capture, P.WAITING)
        if request.delay_steps == 0:
            self._start(self.capture)

    def _advance(self, capture: _Capture) -> None:
        capture.steps_seen += 1
        if capture.profiler is None:
            if capture.steps_seen >= capture.request.delay_steps:
                self._start(capture)
            else:
                self._write_status(capture, P.WAITING)
            return
        capture.profiler.step()
        if capture.ready:
            capture.profiler.stop()
            self._finish(capture)
        else:
            self._write_status(capture, P.RECORDING)

    # -- the profiler ---------------------------------------------------------------------
    def _start(self, capture: _Capture) -> None:
        from torch.profiler import ProfilerActivity, profile, schedule

        if torch._C._autograd._profiler_enabled():
            # Kineto holds one session per process: starting ours would end the user's
            raise RuntimeError("a profiler is already running in this process (one at a time)")
        request = capture.request
        capture.trace = self.directory / _trace_name(self.pid, request.request_id)

        def ready(prof: Any) -> None:
            assert capture.trace is not None
            tmp = capture.trace.with_name(f".{capture.trace.name}.tmp")
            try:
                prof.export_chrome_trace(str(tmp))
                os.replace(tmp, capture.trace)
            finally:
                tmp.unlink(missing_ok=True)
            capture.ready = True

        capture.profiler = profile(
            activities=_activities(ProfilerActivity),
            schedule=schedule(wait=0, warmup=WARMUP_STEPS, active=request.steps, repeat=1),
            on_trace_ready=ready,
            record_shapes=request.shapes,
            profile_memory=request.memory,
            with_stack=request.stack,
        )
        capture.profiler.start()
        self._write_status(capture, P.RECORDING)

    def _finish(self, capture: _Capture) -> None:
        self._write_status(capture, P.DONE, trace=str(capture.trace))
        self._end(capture)

    def _fail(self, message: str, detail: str = "") -> None:
        """End the current request with an error; never raises."""
        capture, self.capture = self.capture, None
        if capture is None:
            return
        try:
            if capture.profiler is not None and not capture.ready:
                capture.profiler.stop()
        except Exception:  # noqa: BLE001, S110 - already failing; the status says why
            pass
        try:
            self._write_status(capture, P.ERROR, error=message, detail=detail)
            self._end(capture)
        except Exception:  # noqa: BLE001, S110 - an unwritable DIR: nothing left to tell
            pass

    def _end(self, capture: _Capture) -> None:
        self.capture = None
        self.handled.add(capture.request.request_id)
        P.request_path(self.directory, self.pid).unlink(missing_ok=True)

    def _write_status(self, capture: _Capture, state: str, **more: str) -> None:
        P.write_status(
            self.directory,
            self.pid,
            P.Status(
                request_id=capture.request.request_id,
                state=state,
                taken_at_step=capture.taken_at,
                steps_seen=capture.steps_seen,
                steps_total=capture.steps_total,
                **more,
            ),
        )


def _activities(kinds: Any) -> list[Any]:
    """CPU, plus NEURON when this process has the neuron device (real or emulated)."""
    if torch._C._get_privateuse1_backend_name() == "neuron":
        from neuron_profiler import NEURON

        return [kinds.CPU, NEURON]
    return [kinds.CPU]


def _distributed_info() -> dict[str, Any] | None:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    return {
        V.DIST_RANK: dist.get_rank(),
        V.DIST_WORLD_SIZE: dist.get_world_size(),
        V.DIST_BACKEND: str(dist.get_backend()),
    }


def _trace_name(pid: int, request_id: str) -> str:
    """``[rank<R>_]<host>_<pid>.<request id>.pt.trace.json`` (torch's own handler names its
    files ``<host>_<pid>.<time>.pt.trace.json``)."""
    info = _distributed_info()
    prefix = f"rank{info['rank']}_" if info else ""
    return f"{prefix}{socket.gethostname()}_{pid}.{request_id}{P.TRACE_SUFFIX}"
