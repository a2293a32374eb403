"""Find torch.profiler traces under a TensorBoard logdir (no torch, no tensorboard import).

``tensorboard_trace_handler`` writes ``{worker}.{time_ns}.pt.trace.json[.gz]``: the worker
(``hostname_pid``) may contain dots, so the span is the last numeric part only. Any other
``*.pt.trace.json[.gz]`` is one span of its own. A span's label (what the Span selector shows)
is its place among the worker's spans and, when its number is a Unix time (ns, µs, ms or s:
older torch wrote milliseconds), when the file was written, in UTC: ``span 2 · 2023-11-14
22:13:20.001 UTC``. A run is the folder holding the files,
relative to the logdir. Ids are short hashes of names, so routes never take a path and an id
stays valid while new traces appear; the logdir is rescanned on each request.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from neuron_profiler.trace.vocabulary import TORCH_TRACE_SUFFIXES

TRACE_SUFFIXES = TORCH_TRACE_SUFFIXES
_HANDLER_NAME = re.compile(r"^(?P<worker>.+)\.(?P<span>\d+)$")
ID_PATTERN = re.compile(r"^[0-9a-f]{16}$")


def make_id(*parts: str) -> str:
    """An opaque id: routes take these, never names or paths."""
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogateescape")).hexdigest()[:16]


def trace_stem(filename: str) -> str | None:
    """A trace file's name without its trace suffix; None: not a trace file name."""
    for suffix in TRACE_SUFFIXES[::-1]:  # .gz first: it is the longer suffix
        if filename.endswith(suffix):
            return filename[: -len(suffix)] or None
    return None


def split_name(filename: str) -> tuple[str, str] | None:
    """(worker, span) of a trace file name, span "" for a single-span file; None: no trace."""
    stem = trace_stem(filename)
    if stem is None:
        return None
    m = _HANDLER_NAME.match(stem)
    return (m["worker"], m["span"]) if m else (stem, "")


@dataclass(frozen=True)
class Span:
    id: str
    name: str
    path: Path  # absolute, resolved, inside the logdir
    rel: str  # relative to the logdir, "/"-separated: what reports name as the source
    label: str = ""  # what the page shows: ``span_label``


# digits of a Unix time in ns, µs, ms or s (years 2001-2286): ms = int(digits) * m // d
_TO_MS = {19: (1, 10**6), 16: (1, 10**3), 13: (1, 1), 10: (1000, 1)}


def span_label(index: int, span: str) -> str:
    """``span {index}``, with when the file was written (UTC, ms) when ``span`` is a Unix time
    (the ``{time_ns}`` of ``tensorboard_trace_handler``), else with the raw number."""
    to_ms = _TO_MS.get(len(span)) if span.isdigit() and not span.startswith("0") else None
    if to_ms is None:
        return f"span {index}" + (f" ({span})" if span and span != str(index) else "")
    ms = int(span) * to_ms[0] // to_ms[1]
    when = datetime.datetime.fromtimestamp(ms // 1000, tz=datetime.timezone.utc)
    return f"span {index} · {when:%Y-%m-%d %H:%M:%S}.{ms % 1000:03d} UTC"


@dataclass(frozen=True)
class Worker:
    id: str
    name: str
    spans: tuple[Span, ...]


@dataclass(frozen=True)
class Run:
    id: str
    name: str
    workers: tuple[Worker, ...]


def _inside(path: Path, root: Path) -> bool:
    """Whether ``path`` (a symlink resolved) still lies under ``root``: links leading out of
    the logdir are never read."""
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return False
    return resolved == root or root in resolved.parents


def _trace_files(root: Path):  # noqa: ANN202 - a generator of (dirpath, filename)
    """Every trace file name under ``root``, without following directory links."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            if split_name(name) is not None:
                yield Path(dirpath), name


def scan(logdir: str | Path) -> list[Run]:
    """Runs, workers and spans under ``logdir`` now (sorted; spans by their number)."""
    root = Path(logdir).resolve()
    if not root.is_dir():
        return []
    runs: dict[str, dict[str, list[tuple[str, Path]]]] = {}
    for dirpath, name in _trace_files(root):
        path = dirpath / name
        if not _inside(path, root) or not path.resolve().is_file():
            continue
        worker, span = split_name(name)  # type: ignore[misc]
        run = dirpath.relative_to(root).as_posix()
        runs.setdefault(run, {}).setdefault(worker, []).append((span, path))
    out = []
    for run in sorted(runs):
        workers = []
        for worker in sorted(runs[run]):
            spans = sorted(runs[run][worker], key=lambda s: (len(s[0]), s[0]))
            workers.append(
                Worker(
                    make_id(worker),
                    worker,
                    tuple(
                        Span(
                            make_id(span, p.name),
                            span or "1",
                            p.resolve(),
                            p.relative_to(root).as_posix(),
                            span_label(i, span),
                        )
                        for i, (span, p) in enumerate(spans, start=1)
                    ),
                )
            )
        out.append(Run(make_id(run), run, tuple(workers)))
    return out


def find(logdir: str | Path, run_id: str, worker_id: str, span_id: str) -> Span | None:
    """The span these ids name in a fresh scan, or None."""
    for run in scan(logdir):
        if run.id != run_id:
            continue
        for worker in run.workers:
            if worker.id == worker_id:
                return next((s for s in worker.spans if s.id == span_id), None)
    return None


class ActiveCheck:
    """``is_active`` answer: stops at the first trace file, remembered for ``ttl_s`` seconds
    (TensorBoard asks often; a large logdir must not be walked each time)."""

    def __init__(self, logdir: str | Path, ttl_s: float = 10.0) -> None:
        self.logdir = Path(logdir)
        self.ttl_s = ttl_s
        self._at = -float("inf")
        self._value = False

    def __call__(self) -> bool:
        now = time.monotonic()
        if now - self._at >= self.ttl_s:
            self._value = self._any()
            self._at = now
        return self._value

    def _any(self) -> bool:
        root = self.logdir.resolve()
        if not root.is_dir():
            return False
        return any(_inside(d / n, root) for d, n in _trace_files(root))
