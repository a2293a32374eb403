"""Chrome trace JSON (.json / .json.gz) writer for the ``Trace`` model, streamed in chunks.

    from neuron_profiler.exporters.chrome import write_chrome_trace
    write_chrome_trace(trace, "out.json.gz")

Events are formatted a chunk at a time from pre-encoded interned strings, so the output is never
held whole in memory. ``ts`` is written in µs relative to ``baseTimeNanoseconds`` (Kineto's layout).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO, Any

import msgspec

from neuron_profiler.exporters._output import atomic_output
from neuron_profiler.trace import schema as S
from neuron_profiler.trace.model import Trace

EXTENSIONS = (".json", ".json.gz")
CHUNK_ROWS = 65536
_encode = msgspec.json.encode


def _open(path: Path) -> AbstractContextManager[IO[bytes]]:
    """Atomic: a failed write leaves an existing ``path`` as it was (``exporters/_output``)."""
    return atomic_output(path, gzip_level=6 if path.name.endswith(".gz") else None)


def _ident(value: int, labels: dict[int, str]) -> bytes:
    return _encode(labels[value]) if value in labels else str(value).encode()


def _us(ns: int) -> str:
    sign = "-" if ns < 0 else ""
    whole, frac = divmod(abs(ns), 1000)
    return f"{sign}{whole}.{frac:03d}"


def _metadata_events(trace: Trace) -> list[bytes]:
    out = []
    pid, tid = trace.pid_labels, trace.tid_labels
    for p, name in trace.process_names.items():
        out.append(b'{"ph":"M","name":"process_name","pid":%s,"tid":0,"args":{"name":%s}}'
                   % (_ident(p, pid), _encode(name)))
    for p, index in trace.process_sort_index.items():
        out.append(b'{"ph":"M","name":"process_sort_index","pid":%s,"tid":0,'
                   b'"args":{"sort_index":%d}}' % (_ident(p, pid), index))
    for (p, t), name in trace.thread_names.items():
        out.append(b'{"ph":"M","name":"thread_name","pid":%s,"tid":%s,"args":{"name":%s}}'
                   % (_ident(p, pid), _ident(t, tid), _encode(name)))
    for (p, t), index in trace.thread_sort_index.items():
        out.append(b'{"ph":"M","name":"thread_sort_index","pid":%s,"tid":%s,'
                   b'"args":{"sort_index":%d}}' % (_ident(p, pid), _ident(t, tid), index))
    return out


def _event_lines(trace: Trace, base_ns: int) -> Any:
    """Yields chunks of encoded events (bytes), CHUNK_ROWS rows at a time."""
    strings = [_encode(s) for s in trace.strings]
    letters = {int(k): v.encode() for k, v in S.PH_LETTERS.items()}
    c = trace.columns
    for lo in range(0, len(trace), CHUNK_ROWS):
        hi = min(lo + CHUNK_ROWS, len(trace))
        cols = {k: c[k][lo:hi].tolist() for k in (S.TS_NS, S.DUR_NS, S.PH, S.NAME_ID, S.CAT_ID,
                                                   S.PID, S.TID, S.FLOW_ID, S.ARGS_ROW)}
        parts = []
        for i in range(hi - lo):
            ph = letters.get(cols[S.PH][i], b"X")
            line = b'{"ph":"%s","cat":%s,"name":%s,"pid":%s,"tid":%s,"ts":%s' % (
                ph, strings[cols[S.CAT_ID][i]], strings[cols[S.NAME_ID][i]],
                _ident(cols[S.PID][i], trace.pid_labels), _ident(cols[S.TID][i], trace.tid_labels),
                _us(cols[S.TS_NS][i] - base_ns).encode())
            if ph == b"X":
                line += b',"dur":%s' % _us(cols[S.DUR_NS][i]).encode()
            if cols[S.FLOW_ID][i] >= 0:
                line += b',"id":%d' % cols[S.FLOW_ID][i]
                if ph == b"f":
                    line += b',"bp":"e"'
            if cols[S.ARGS_ROW][i] >= 0:
                line += b',"args":' + trace.raw_args[cols[S.ARGS_ROW][i]]
            parts.append(line + b"}")
        yield b",\n".join(parts)


def write_chrome_trace(trace: Trace, path: str | Path,
                       progress: Callable[[int], None] | None = None) -> Path:
    """Write ``trace`` as Kineto-style Chrome trace JSON; ``progress(rows_done)`` per chunk."""
    path = Path(path)
    base_ns = int(trace.metadata.get("baseTimeNanoseconds", trace.base_time_ns))
    header = {k: v for k, v in trace.metadata.items() if k not in ("traceEvents",
                                                                   "baseTimeNanoseconds")}
    with _open(path) as out:
        out.write(b"{" + b"".join(_encode(k) + b":" + _encode(v) + b"," for k, v in header.items()))
        out.write(b'"baseTimeNanoseconds":%d,\n"traceEvents":[\n' % base_ns)
        meta = _metadata_events(trace)
        out.write(b",\n".join(meta))
        done = 0
        for chunk in _event_lines(trace, base_ns):
            if chunk:
                out.write((b",\n" if (meta or done) else b"") + chunk)
            done = min(done + CHUNK_ROWS, len(trace))
            if progress:
                progress(done)
        out.write(b"\n]}\n")
    return path
