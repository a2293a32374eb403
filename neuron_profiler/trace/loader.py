"""Load a Kineto Chrome trace (.json / .json.gz) into the one ``Trace`` model, fast and lean.

    trace = load_trace("worker0.pt.trace.json.gz")

The file is streamed: blocks are read (and inflated) one at a time, the ``traceEvents`` array is
cut into pieces of at most about 1 MB, and each piece is decoded by msgspec and turned into numpy
columns (``_columns.py``) before the next is read, so neither the file nor a Python object per
event is ever held whole. Files that do not look like Kineto output fall back to decoding the whole
document, which also classifies bad input.

Detection rules (docs/trace-model.md):
- ``ts``/``dur`` are µs (Kineto's unit) as numbers or numeric strings, converted to integer ns
  exactly: strings and large floats from their digits, ns fractions kept (``ns resolution``).
- With a top-level ``baseTimeNanoseconds``, ``ts`` is relative to it; otherwise ``ts`` is
  absolute µs since the Unix epoch (older Kineto) and is used as is.
- ``B``/``E`` pairs on one thread become complete events; ``M`` events are kept as they were
  (``Trace.meta_events``) and fill the process/thread name and sort-index dicts.
- Events whose fields are mistyped are skipped and counted (``Trace.skipped_events``).
- A file cut off mid-write keeps every complete event before the cut (``Trace.truncated``).
"""

from __future__ import annotations

import dataclasses
import gc
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from neuron_profiler.errors import TraceLoadError
from neuron_profiler.trace import schema as S
from neuron_profiler.trace._columns import LABEL_ID_BASE, ColumnSink
from neuron_profiler.trace._pairing import pair_begin_end
from neuron_profiler.trace._stream import BlockSource, decode_top, leading_events, skip_separator
from neuron_profiler.trace.kinds import refine_kinds
from neuron_profiler.trace.model import Trace, file_base_ns

_KEY = b'"traceEvents"'
_ARRAY_START = re.compile(rb"\s*:\s*\[")
_BASE_TIME = re.compile(rb'"baseTimeNanoseconds"\s*:\s*(\d+)')
_SALVAGE_TRIES = 64
_TAIL_TRIES = 32
_WHITESPACE = b" \t\r\n"
_CLOSE_BRACE = ord("}")
_MAX_HEAD_BYTES = 64 << 20  # no "traceEvents" key this far in: decode the whole document


class TruncatedTraceWarning(UserWarning):
    """The file was cut off; complete events before the cut were kept."""


@contextmanager
def _gc_paused() -> Iterator[None]:
    """The loader allocates millions of short-lived objects and no cycles: skip GC passes."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def load_trace(path: str | Path) -> Trace:
    """Load one trace file; raises ``TraceLoadError`` (exit code 2) when nothing is usable."""
    path = Path(path)
    with _gc_paused():
        source = BlockSource(path)
        try:
            sink, metadata, truncated = _Load(path, source).run()
        finally:
            source.close()
        trace = _build(sink, metadata, str(path), truncated)
    if truncated:
        warnings.warn(f"{path}: file is truncated; kept {len(trace)} complete events before "
                      "the cut", TruncatedTraceWarning, stacklevel=2)
    return trace


class _Load:
    """One load: find the events array, stream its pieces, decode the tail (or salvage it)."""

    def __init__(self, path: Path, source: BlockSource) -> None:
        self.path, self.source = path, source
        self.sink = ColumnSink()
        self.metadata: dict[str, Any] = {}
        self.truncated = False

    def run(self) -> tuple[ColumnSink, dict[str, Any], bool]:
        pending = self._events_start()
        if pending is None:
            self._whole_document()
        else:
            self._stream_events(pending)
        if self.source.cut:
            self.truncated = True
        return self.sink, self.metadata, self.truncated

    def _events_start(self) -> bytes | None:
        """Bytes right after ``"traceEvents": [`` with the keys before it decoded, or None
        (then the whole document is decoded instead)."""
        self._head = b""
        while True:
            key = self._head.find(_KEY)
            enough = key >= 0 and len(self._head) - key > 1024
            if enough or self.source.done or len(self._head) > _MAX_HEAD_BYTES:
                break
            self._head = self._read_until(self._head, 2 * len(self._head))
        while key >= 0:  # the first top-level "traceEvents": [ (the text may occur in strings)
            match = _ARRAY_START.match(self._head, key + len(_KEY))
            if match is not None:
                try:
                    top = decode_top(self._head[:key] + b'"traceEvents":[]}')
                except (msgspec.DecodeError, msgspec.ValidationError):
                    top = None
                if top is not None:
                    self._keep_metadata(top)
                    pending, self._head = self._head[match.end():], b""
                    return pending
            key = self._head.find(_KEY, key + 1)
        return None

    def _read_until(self, pending: bytes, size: int) -> bytes:
        """``pending`` plus blocks until it holds ``size`` bytes (or a block) or the file ends;
        joined once, so growing a large buffer never copies it block by block."""
        parts, total = [pending], len(pending)
        while not self.source.done and (total < size or total < self.source.block_bytes):
            block = self.source.read()
            parts.append(block)
            total += len(block)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _stream_events(self, pending: bytes) -> None:
        retry_at = 0
        while True:
            if not self.source.done and (len(pending) < self.source.block_bytes
                                         or len(pending) < retry_at):
                pending = self._read_until(pending, retry_at)
                continue
            if self.source.done:
                break
            end = leading_events(self.sink.add_piece, pending, need_comma=True)
            if end is None:  # one huge event, or damage: read on, the tail will tell
                retry_at = 2 * len(pending)
                continue
            pending, retry_at = skip_separator(pending[end:]), 0
        self._tail(pending)

    def _tail(self, pending: bytes) -> None:
        """The last piece plus the keys after the array (``baseTimeNanoseconds`` in Kineto)."""
        if self._split_tail(pending):
            return
        try:
            top = decode_top(b'{"traceEvents":[' + pending)
        except msgspec.DecodeError:
            self.truncated = True
            leading_events(self.sink.add_piece, pending, need_comma=False, tries=_SALVAGE_TRIES)
            base = _BASE_TIME.search(pending)
            if base and "baseTimeNanoseconds" not in self.metadata:
                self.metadata["baseTimeNanoseconds"] = int(base.group(1))
            if self.sink.seen == 0:
                raise TraceLoadError(self.path, "truncated, no complete event") from None
            return
        self.sink.add_piece(bytes(top.pop("traceEvents")))
        self._keep_metadata(top)

    def _split_tail(self, pending: bytes) -> bool:
        """Find the array's closing ``]`` from the end, decode the short rest (the keys after
        the array) and then the events before it, so the tail is parsed once. A candidate is
        right only if both parts decode; False leaves the tail to the general path."""
        limit = len(pending)
        for _ in range(_TAIL_TRIES):
            close = pending.rfind(b"]", 0, limit)
            if close < 0:
                return False
            limit = close
            last = close - 1
            while last >= 0 and pending[last] in _WHITESPACE:
                last -= 1
            if last >= 0 and pending[last] != _CLOSE_BRACE:
                continue  # events are objects: this ] closes something inside the keys
            try:
                rest = decode_top(b'{"traceEvents":[' + pending[close:])
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            if last >= 0:
                try:
                    self.sink.add_piece(b"".join((b"[", memoryview(pending)[:last + 1], b"]")))
                except msgspec.DecodeError:
                    return False  # damaged events: the general path salvages them
            rest.pop("traceEvents", None)
            self._keep_metadata(rest)
            return True
        return False

    def _whole_document(self) -> None:
        data = self.source.read_all(self._head)
        if not data.strip():
            raise TraceLoadError(self.path, "empty file")
        try:
            top = decode_top(data)
        except msgspec.ValidationError as err:
            raise TraceLoadError(self.path, f"not a torch.profiler trace ({err})") from None
        except msgspec.DecodeError as err:
            problem = "truncated, no complete event" if _KEY in data else f"invalid JSON ({err})"
            raise TraceLoadError(self.path, problem) from None
        events = top.pop("traceEvents", None)
        if events is None:
            raise TraceLoadError(self.path, "not a torch.profiler trace (no traceEvents)")
        if bytes(events)[:1] != b"[":
            raise TraceLoadError(self.path, "not a torch.profiler trace (traceEvents is not "
                                 "an array)")
        self.sink.add_piece(bytes(events))
        self._keep_metadata(top)

    def _keep_metadata(self, top: dict[str, msgspec.Raw]) -> None:
        for key, value in top.items():
            if key != "traceEvents":
                self.metadata[key] = msgspec.json.decode(value)


def _build(sink: ColumnSink, metadata: dict[str, Any], source: str, truncated: bool) -> Trace:
    columns = sink.columns()
    base_ns = file_base_ns(metadata)
    if base_ns:
        columns[S.TS_NS] += base_ns
    columns = pair_begin_end(columns)
    ts = columns[S.TS_NS]
    if len(ts) > 1 and not bool((ts[1:] >= ts[:-1]).all()):
        order = np.argsort(ts, kind="stable")
        for name in list(columns):
            columns[name] = columns[name][order]
    strings = list(sink.strings)
    columns[S.KIND] = refine_kinds(columns[S.KIND], columns[S.NAME_ID], strings)
    labels = {LABEL_ID_BASE + i: text for text, i in sink.labels.items()}
    meta_events = tuple(m if m.ts_ns is None or not base_ns else
                        dataclasses.replace(m, ts_ns=m.ts_ns + base_ns) for m in sink.meta_events)
    return Trace(columns=columns, strings=strings, raw_args=sink.raw_args(),
                 metadata=metadata, process_names=sink.process_names,
                 thread_names=sink.thread_names, process_sort_index=sink.process_sort,
                 thread_sort_index=sink.thread_sort, pid_labels=labels, tid_labels=labels,
                 source=source, skipped_events=sink.skipped, truncated=truncated,
                 meta_events=meta_events)
