"""The requesting side of on-demand capture (``neuron-prof capture``; torch-free): check every
target before asking anything, write the requests, wait for each armed process to finish.

Each problem is a ``CaptureError`` (exit 2) or, once requests are out, one ``Outcome`` per pid,
so one rank's failure does not hide another's trace.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from neuron_profiler.errors import NeuronProfilerError
from neuron_profiler.on_demand import protocol as P

POLL_INTERVAL_S = 0.1  # how often the status files are read while waiting


class CaptureError(NeuronProfilerError):
    """A capture that cannot be asked for or did not complete."""

    exit_code = 2


@dataclass(frozen=True)
class Outcome:
    """How one pid's capture ended: the trace path, or the problem (one line)."""

    pid: int
    trace: Path | None = None
    problem: str = ""
    note: str = ""  # about a written trace (the process stopped before the last step)


def check_directory(directory: Path) -> None:
    """DIR must be an existing directory this user can create files in (tested by creating
    one, since permission bits do not tell the whole story: read-only mounts, ACLs)."""
    if not directory.is_dir():
        what = "not a directory" if directory.exists() else "no such directory"
        raise CaptureError(f"{directory}: {what}")
    try:
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as err:
        raise CaptureError(f"{directory}: not writable ({err.strerror or err})") from err


def process_alive(pid: int) -> bool:
    """Whether a process with this pid exists (one of another user's counts: it exists)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def targets(directory: Path, pids: Iterable[int], every: bool) -> list[int]:
    """The pids to ask, each checked: it exists, it is armed in DIR, no capture of it runs.
    ``every``: every live process of this user armed in DIR."""
    if every:
        found = [
            pid
            for pid in P.armed_pids(directory)
            if process_alive(pid)
            and (P.read_json(P.armed_path(directory, pid)) or {}).get("uid") == os.getuid()
        ]
        if not found:
            raise CaptureError(f"{directory}: no live process of this user is armed there")
        pids = found
    chosen = sorted(set(pids))
    if not chosen:
        raise CaptureError("no process named: give --pid PID (repeatable) or --all")
    for pid in chosen:
        if not process_alive(pid):
            raise CaptureError(f"pid {pid}: no such process")
        if not P.armed_path(directory, pid).is_file():
            raise CaptureError(
                f"pid {pid}: not armed in {directory} (no {P.armed_path(directory, pid).name}; "
                f"the process must call neuron_profiler.on_demand.enable(dir={str(directory)!r}))"
            )
        if P.request_path(directory, pid).exists():
            raise CaptureError(
                f"pid {pid}: a capture is already in progress "
                f"({P.request_path(directory, pid)} exists)"
            )
    return chosen


def new_request_id() -> str:
    """Unique per capture (time for order, random for two captures in one second)."""
    return f"{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}"


def send(directory: Path, pid: int, request: P.Request) -> None:
    """Write the request file, failing if one appeared since ``targets`` checked (another
    ``capture`` got there first): a hard link is created only where no file is."""
    path = P.request_path(directory, pid)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(asdict(request), f)
        os.link(tmp, path)
    except FileExistsError as err:
        raise CaptureError(f"pid {pid}: a capture is already in progress ({path} exists)") from err
    finally:
        Path(tmp).unlink(missing_ok=True)


def send_all(directory: Path, pids: Iterable[int], request: P.Request) -> dict[int, P.Request]:
    """Send ``request`` to every pid, or to none: if one send fails, those already sent are
    withdrawn before the error is raised."""
    sent: dict[int, P.Request] = {}
    try:
        for pid in pids:
            send(directory, pid, request)
            sent[pid] = request
    except BaseException:
        for pid in sent:
            _withdraw(directory, pid, request)
        raise
    return sent


def wait(
    directory: Path,
    requests: dict[int, P.Request],
    timeout_s: float,
    progress: Callable[[int, P.Status], None] = lambda pid, status: None,
) -> list[Outcome]:
    """Wait until every pid's request is done or failed, its process is gone, or the time is
    up. On timeout, a request the process has not taken yet is withdrawn (its file removed),
    so the process is left as it was; one it has taken completes on its own."""
    deadline = time.monotonic() + timeout_s
    pending = dict(requests)
    outcomes: dict[int, Outcome] = {}
    while pending:
        for pid, request in list(pending.items()):
            status = P.read_status(directory, pid)
            mine = status is not None and status.request_id == request.request_id
            if mine and status is not None:
                progress(pid, status)
                if status.state == P.DONE:
                    outcomes[pid] = Outcome(pid, trace=Path(status.trace), note=status.detail)
                elif status.state == P.ERROR:
                    outcomes[pid] = Outcome(
                        pid, problem=f"pid {pid}: capture failed: {status.error}"
                    )
            if pid not in outcomes and not process_alive(pid):
                _withdraw(directory, pid, request)
                outcomes[pid] = Outcome(pid, problem=f"pid {pid}: process exited mid-capture")
            if pid in outcomes:
                del pending[pid]
        if not pending:
            break
        if time.monotonic() >= deadline:
            for pid, request in pending.items():
                status = P.read_status(directory, pid)
                taken = status is not None and status.request_id == request.request_id
                if not taken:
                    _withdraw(directory, pid, request)
                where = (
                    f"{status.state}, step {status.steps_seen} of {status.steps_total}; "
                    "it will still write its trace"
                    if taken and status is not None
                    else "request not taken (no optimizer step since?), withdrawn"
                )
                outcomes[pid] = Outcome(
                    pid, problem=f"pid {pid}: timed out after {timeout_s:g} s ({where})"
                )
            break
        time.sleep(POLL_INTERVAL_S)
    return [outcomes[pid] for pid in sorted(outcomes)]


def _withdraw(directory: Path, pid: int, request: P.Request) -> None:
    """Remove our request file (only ours: another capture's is left alone)."""
    path = P.request_path(directory, pid)
    doc = P.read_json(path)
    if doc is not None and doc.get("request_id") == request.request_id:
        path.unlink(missing_ok=True)
