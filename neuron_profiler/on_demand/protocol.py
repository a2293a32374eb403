"""The on-demand capture protocol: the files an armed process and ``neuron-prof capture`` share
in one directory (torch-free: the CLI imports it).

Per armed process, in DIR:

- ``<pid>.armed.json``: the registration (pid, uid, host, armed time, rank and world size once
  torch.distributed is initialised); written when armed, removed at exit;
- ``<pid>.request.json``: a capture request, written by the CLI; its presence is what the
  process checks for (one ``os.stat``, rate-limited); removed by the process when the request
  ends (done or error), or withdrawn by the CLI when it gives up before the process took it;
- ``<pid>.status.json``: the process's progress on the request (``Status``);
- the trace, ``<name>.pt.trace.json``.

Every file is written whole or not at all (a temporary file beside it, then ``os.replace``), so
a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from neuron_profiler.trace.vocabulary import TORCH_TRACE_SUFFIXES

ARMED_SUFFIX = ".armed.json"
REQUEST_SUFFIX = ".request.json"
STATUS_SUFFIX = ".status.json"
TRACE_SUFFIX = TORCH_TRACE_SUFFIXES[0]  # what torch.profiler's tensorboard_trace_handler writes

# Request states a status file reports; the last two end a request.
WAITING, RECORDING, DONE, ERROR = "waiting", "recording", "done", "error"
FINAL_STATES = (DONE, ERROR)


@dataclass(frozen=True)
class Request:
    """What the CLI asks for: ``steps`` profiled steps after ``delay_steps`` steps, with
    torch.profiler's ``profile_memory`` / ``with_stack`` / ``record_shapes``."""

    request_id: str
    steps: int
    delay_steps: int = 0
    memory: bool = False
    stack: bool = False
    shapes: bool = False

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Request:
        """Raises ValueError on a malformed request (so the process reports it, not crash)."""
        try:
            req = cls(
                request_id=str(doc["request_id"]),
                steps=int(doc["steps"]),
                delay_steps=int(doc.get("delay_steps", 0)),
                memory=bool(doc.get("memory", False)),
                stack=bool(doc.get("stack", False)),
                shapes=bool(doc.get("shapes", False)),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"malformed capture request: {err!r}") from err
        if req.steps < 1 or req.delay_steps < 0:
            raise ValueError(
                f"malformed capture request: steps={req.steps}, delay={req.delay_steps}"
            )
        return req


@dataclass(frozen=True)
class Status:
    """The process's progress on one request: ``state`` (WAITING for the delay to pass,
    RECORDING, DONE, ERROR), the step marker that took it (counted from 0 since the process
    was armed), steps seen since, the trace path once DONE, the error text once ERROR."""

    request_id: str
    state: str
    taken_at_step: int = 0
    steps_seen: int = 0
    steps_total: int = 0
    trace: str = ""
    error: str = ""
    detail: str = ""  # the traceback of an error, for whoever debugs it (the CLI shows `error`)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Status:
        return cls(**{k: doc[k] for k in cls.__dataclass_fields__ if k in doc})

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES


def armed_path(directory: Path, pid: int) -> Path:
    return directory / f"{pid}{ARMED_SUFFIX}"


def request_path(directory: Path, pid: int) -> Path:
    return directory / f"{pid}{REQUEST_SUFFIX}"


def status_path(directory: Path, pid: int) -> Path:
    return directory / f"{pid}{STATUS_SUFFIX}"


def write_json_atomic(path: Path, doc: dict[str, Any]) -> None:
    """Write ``doc`` to ``path`` whole or not at all (temporary file in the same directory,
    then rename: atomic on POSIX). The temporary name starts with a dot and does not end in
    .json, so a directory scan for traces never picks it up."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: Path) -> dict[str, Any] | None:
    """The document at ``path``; None when it is absent or not a JSON object."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def write_status(directory: Path, pid: int, status: Status) -> None:
    write_json_atomic(status_path(directory, pid), asdict(status))


def read_status(directory: Path, pid: int) -> Status | None:
    doc = read_json(status_path(directory, pid))
    if doc is None:
        return None
    try:
        return Status.from_json(doc)
    except TypeError:
        return None


def armed_pids(directory: Path) -> list[int]:
    """Pids with a registration file in ``directory`` (live or not), sorted."""
    pids = []
    for p in directory.glob(f"*{ARMED_SUFFIX}"):
        stem = p.name.removesuffix(ARMED_SUFFIX)
        if stem.isdigit():
            pids.append(int(stem))
    return sorted(pids)
