"""Chrome trace JSON (.json / .json.gz) writer for the ``Trace`` model, streamed in chunks.

    from neuron_profiler.exporters.chrome import write_chrome_trace
    write_chrome_trace(trace, "out.json.gz")

Events are formatted a chunk at a time from pre-encoded interned strings, so the output is never
held whole in memory. Lossless for a loaded trace (docs/trace-model.md, "What round-trips"):
every top-level key as loaded, ``ts`` relative to ``baseTimeNanoseconds`` when the trace has
one and absolute µs when it has none (as the file was), every ``M`` event the file had, and each
event spelled as it was (the FORM column: instant scope, ``"I"``, no ``cat``, ``bp``,
digit-string pids/tids, other phase letters).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO, Any

import msgspec

from neuron_profiler.output import atomic_output
from neuron_profiler.trace import schema as S
from neuron_profiler.trace.model import META_VIEWS, MetaEvent, Trace, file_base_ns

CHUNK_ROWS = 65536
_encode = msgspec.json.encode
_F = S.Form
_FLOWS = (S.Phase.FLOW_START, S.Phase.FLOW_STEP, S.Phase.FLOW_END)
_PH_LETTERS = {int(phase): letter for phase, letter in S.PH_LETTERS.items()}


def _open(path: Path) -> AbstractContextManager[IO[bytes]]:
    """Atomic: a failed write leaves an existing ``path`` as it was (``neuron_profiler.output``)."""
    return atomic_output(path, gzip_level=6 if path.name.lower().endswith(".gz") else None)


def _ident(value: int, labels: dict[int, str], text: bool = False) -> bytes:
    """A pid/tid as written: its label, the number, or the number as a string (``text``)."""
    if value in labels:
        return _encode(labels[value])
    return b'"%d"' % value if text else b"%d" % value


def _us(ns: int) -> bytes:
    sign = "-" if ns < 0 else ""
    whole, frac = divmod(abs(ns), 1000)
    return f"{sign}{whole}.{frac:03d}".encode()


class _Spelling:
    """How one (phase, form) pair is written: the line's head and what else it carries."""

    __slots__ = ("head", "cat", "dur", "bp", "pid_text", "tid_text")

    def __init__(self, ph: int, form: int) -> None:
        detail = form & _F.DETAIL
        if ph == S.Phase.OTHER:
            letter = S.OTHER_PHASES[detail] if detail < len(S.OTHER_PHASES) else "?"
        elif ph == S.Phase.INSTANT and form & _F.CAPITAL_I:
            letter = "I"
        else:
            letter = _PH_LETTERS.get(ph, "?")
        head = b'{"ph":%s' % _encode(letter)
        if ph == S.Phase.INSTANT and detail & _F.SCOPE:
            head += b',"s":%s' % _encode(S.SCOPES[detail & _F.SCOPE])
        self.head = head
        self.cat = not form & _F.NO_CAT
        self.dur = ph == S.Phase.COMPLETE  # others: only a non-zero dur is written
        kineto_bp = ph == S.Phase.FLOW_END
        flipped = ph in _FLOWS and bool(detail & _F.BP_FLIPPED)
        self.bp = b',"bp":"e"' if ph in _FLOWS and kineto_bp != flipped else b""
        self.pid_text = bool(form & _F.PID_TEXT)
        self.tid_text = bool(form & _F.TID_TEXT)


def _meta_line(m: MetaEvent, trace: Trace, base_ns: int) -> bytes:
    line = b'{"ph":"M","name":%s,"pid":%s,"tid":%s' % (
        _encode(m.name),
        _ident(m.pid, trace.pid_labels, bool(m.form & _F.PID_TEXT)),
        _ident(m.tid, trace.tid_labels, bool(m.form & _F.TID_TEXT)),
    )
    if m.ts_ns is not None:
        line += b',"ts":' + _us(m.ts_ns - base_ns)
    if m.cat is not None:
        line += b',"cat":' + _encode(m.cat)
    return line + b',"args":' + _encode(m.args) + b"}"


def _metadata_events(trace: Trace, base_ns: int) -> list[bytes]:
    """The trace's ``M`` events as loaded (those whose dict entry a producer removed left out),
    then one per name or sort index the dicts add or change."""
    views: dict[str, dict[Any, Any]] = {
        "process_names": trace.process_names,
        "thread_names": trace.thread_names,
        "process_sort_index": trace.process_sort_index,
        "thread_sort_index": trace.thread_sort_index,
    }
    written: dict[str, dict[Any, Any]] = {view: {} for view in views}
    out = []
    for m in trace.meta_events:
        entry = m.entry()
        if entry is not None:
            view, key, value = entry
            if key not in views[view]:
                continue
            written[view][key] = value
        out.append(_meta_line(m, trace, base_ns))
    for name, view in META_VIEWS.items():
        field = "name" if view.endswith("names") else "sort_index"
        for key, value in views[view].items():
            if key in written[view] and written[view][key] == value:
                continue
            pid, tid = (key, 0) if view.startswith("process") else key
            out.append(
                _meta_line(
                    MetaEvent(name=name, pid=pid, tid=tid, args={field: value}), trace, base_ns
                )
            )
    return out


def _id_text(label: str) -> bytes:
    """An event's id from its ``id_labels`` text: an ``id2`` object, a number the column could
    not hold as itself (``-1``, ``2**64 - 1``), else text (``"0x1f"``)."""
    if S.id2_scope(label):
        return b',"id2":' + label[len(S.ID2_LABEL) :].encode()
    return b',"id":' + (label.encode() if S.integer_label(label) else _encode(label))


def _event_lines(trace: Trace, base_ns: int) -> Iterator[bytes]:
    """Yields chunks of encoded events (bytes), CHUNK_ROWS rows at a time."""
    strings = [_encode(s) for s in trace.strings]
    spellings: dict[int, _Spelling] = {}
    pid_labels, tid_labels, raw_args = trace.pid_labels, trace.tid_labels, trace.raw_args
    id_text = {k: _id_text(v) for k, v in trace.id_labels.items()}
    c = trace.columns
    for lo in range(0, len(trace), CHUNK_ROWS):
        hi = min(lo + CHUNK_ROWS, len(trace))
        cols = [
            c[k][lo:hi].tolist()
            for k in (
                S.PH,
                S.FORM,
                S.CAT_ID,
                S.NAME_ID,
                S.PID,
                S.TID,
                S.TS_NS,
                S.DUR_NS,
                S.FLOW_ID,
                S.ARGS_ROW,
            )
        ]
        parts = []
        for ph, form, cat, name, pid, tid, ts, dur, flow, args in zip(*cols, strict=True):
            key = ph << 8 | form
            sp = spellings.get(key)
            if sp is None:
                sp = spellings[key] = _Spelling(ph, form)
            line = sp.head
            if sp.cat:
                line += b',"cat":' + strings[cat]
            line += b',"name":%s,"pid":%s,"tid":%s,"ts":%s' % (
                strings[name],
                _ident(pid, pid_labels, sp.pid_text),
                _ident(tid, tid_labels, sp.tid_text),
                _us(ts - base_ns),
            )
            if sp.dur or dur:
                line += b',"dur":' + _us(dur)
            if flow != -1:  # (-1: no id) a text id as its text, else the number
                line += id_text.get(flow) or b',"id":%d' % flow
            line += sp.bp
            if args >= 0:
                line += b',"args":' + raw_args[args]
            parts.append(line + b"}")
        yield b",\n".join(parts)


def write_chrome_trace(
    trace: Trace, path: str | Path, progress: Callable[[int], None] | None = None
) -> Path:
    """Write ``trace`` as Kineto-style Chrome trace JSON; ``progress(rows_done)`` per chunk."""
    path = Path(path)
    base_ns = file_base_ns(trace.metadata)
    header = {k: v for k, v in trace.metadata.items() if k != "traceEvents"}
    with _open(path) as out:
        out.write(
            b"{" + b"".join(_encode(k) + b":" + _encode(v) + b",\n" for k, v in header.items())
        )
        out.write(b'"traceEvents":[\n')
        meta = _metadata_events(trace, base_ns)
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
