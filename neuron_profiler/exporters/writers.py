"""The one way to write a trace file: the writer is chosen by the output's suffix.

    from neuron_profiler.exporters.writers import write_trace
    written = write_trace(trace, "out.pftrace")   # or .json / .json.gz
    print(written.summary)                        # one line: what was written, what was left out

``WRITERS`` is the registry: each writer declares the suffixes it writes, whether its output is
binary and the media type it is served with (the TensorBoard plugin's downloads). ``export``,
``merge`` and the TensorBoard plugin all write through ``write_trace``; an unknown suffix is a
``NeuronProfilerError`` (exit code 2) naming the file and the suffixes there are, raised by
``writer_for`` before any work. Every writer writes atomically (``neuron_profiler.output``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuron_profiler.errors import NeuronProfilerError

if TYPE_CHECKING:
    from neuron_profiler.trace.model import Trace

Progress = Callable[[int], None]  # told the rows written so far, after each chunk


@dataclass(frozen=True)
class Written:
    """What ``write_trace`` wrote: the file, a one-line summary (what was written and what was
    left out) and the format writer's own result (``PerfettoExport`` for .pftrace, the path for
    Chrome JSON)."""

    path: Path
    summary: str
    result: Any


@dataclass(frozen=True)
class TraceWriter:
    """One output format: the suffixes it writes, whether the file is binary, its media type, and
    ``write(trace, path, progress, args)``. ``args=False`` leaves event args out where the format
    can (``args_optional``: .pftrace); other formats ignore it."""

    name: str
    suffixes: tuple[str, ...]
    binary: bool
    media_type: str
    write: Callable[[Trace, Path, Progress | None, bool], Written]
    args_optional: bool = False


def _chrome(trace: Trace, path: Path, progress: Progress | None, args: bool) -> Written:
    from neuron_profiler.exporters.chrome import write_chrome_trace

    out = write_chrome_trace(trace, path, progress=progress)
    n = len(trace)
    return Written(out, f"wrote {n} event{'s' * (n != 1)} to {path}", out)


def _perfetto(trace: Trace, path: Path, progress: Progress | None, args: bool) -> Written:
    from neuron_profiler.exporters.perfetto import write_perfetto_trace

    r = write_perfetto_trace(trace, path, progress=progress, args=args)
    left_out = sum(r.skipped.values()) + r.unbound_flow_endpoints + r.orphan_flow_endpoints
    details = ", ".join(f"{n} {why}" for why, n in r.skipped.items())
    summary = (
        f"wrote {r.slices} slices, {r.instants} instants, {r.flows} flows, "
        f"{r.counter_points} counter points to {path} ({r.overlap_tracks} overlap "
        f"tracks; left out: {left_out} events"
        + (f": {details}" if details else "")
        + (
            f", {r.unbound_flow_endpoints} unbound flow endpoints"
            if r.unbound_flow_endpoints
            else ""
        )
        + (
            f", {r.orphan_flow_endpoints} flow endpoints without their other end"
            if r.orphan_flow_endpoints
            else ""
        )
        + (
            "; also left out of events written: "
            + ", ".join(f"{n} {why}" for why, n in r.parts_left_out.items())
            if r.parts_left_out
            else ""
        )
        + ")"
    )
    return Written(r.path, summary, r)


WRITERS = (
    TraceWriter(
        "Chrome trace JSON", (".json",), binary=False, media_type="application/json", write=_chrome
    ),
    TraceWriter(
        "Chrome trace JSON, gzip-compressed",
        (".json.gz",),
        binary=True,
        media_type="application/gzip",
        write=_chrome,
    ),
    TraceWriter(
        "Perfetto protobuf",
        (".pftrace",),
        binary=True,
        media_type="application/octet-stream",
        write=_perfetto,
        args_optional=True,
    ),
)
SUFFIXES = tuple(s for w in WRITERS for s in w.suffixes)


def writer_for(path: str | Path) -> TraceWriter:
    """The writer of ``path``'s suffix (any case: ``.JSON``); ``NeuronProfilerError`` (exit
    code 2) for any other."""
    name = Path(path).name.lower()
    for writer in WRITERS:
        if name.endswith(writer.suffixes):
            return writer
    raise NeuronProfilerError(
        f"{path}: unsupported output format (use one of {', '.join(SUFFIXES)})", exit_code=2
    )


def write_trace(
    trace: Trace, path: str | Path, *, progress: Progress | None = None, args: bool = True
) -> Written:
    """Write ``trace`` to ``path`` in the format its suffix names (``WRITERS``), atomically;
    ``progress(rows_done)`` after each chunk; ``args=False``: .pftrace without event args."""
    path = Path(path)
    return writer_for(path).write(trace, path, progress, args)
