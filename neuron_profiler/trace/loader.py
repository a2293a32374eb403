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
- A top-level key written twice: every ``traceEvents`` array is read; another key's values
  must be equal (kept once) or the file is refused (``_Load._take_top``). Counted in
  ``LoadReport.repeated_keys``.
- A bare array of events (the Trace Event Format's "JSON Array Format", its closing ``]``
  optional) is read as a ``traceEvents`` array is, with no top-level keys.
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from neuron_profiler.errors import TraceLoadError
from neuron_profiler.forked import ForkedCall, setting_off, usable_cores
from neuron_profiler.heap import TRIM_ROWS, gc_paused, return_freed_heap, warm_heap
from neuron_profiler.trace import schema as S
from neuron_profiler.trace import vocabulary as V
from neuron_profiler.trace._columns import LABEL_ID_BASE, ColumnSink, SinkPart, times_unusable
from neuron_profiler.trace._pairing import pair_begin_end
from neuron_profiler.trace._stream import (
    BlockSource,
    decode_top,
    events_middle,
    find_boundary,
    leading_events,
    skip_separator,
)
from neuron_profiler.trace.kinds import refine_kinds
from neuron_profiler.trace.model import LoadReport, Trace, base_time_ns, file_base_ns
from neuron_profiler.trace.repair import (
    DAMAGE,
    ELEMENT,
    EMPTY_FILE,
    END,
    INCOMPLETE,
    NOTHING_COMPLETE,
    TRACE_FILES,
    Repair,
    checked,
    close_of,
    depth_limit,
    member_array,
    repair_value,
    repeated_members,
    split_elements,
)

EVENTS = "traceEvents"
_KEY = b'"traceEvents"'
_ARRAY_START = re.compile(rb"\s*:\s*\[")
_BASE_TIME = re.compile(rb'"baseTimeNanoseconds"\s*:\s*(\d+)')
REPAIRED = "repaired"
_TAIL_TRIES = 32
_WHITESPACE = b" \t\r\n"
_CLOSE_BRACE = ord("}")
_MAX_HEAD_BYTES = 64 << 20  # no "traceEvents" key this far in: decode the whole document
# the Trace Event Format's "JSON Array Format": a bare array of events (the closing ] optional)
_ARRAY_FORM = re.compile(rb"[ \t\r\n]*\[[ \t\r\n]*")


# A plain file this large is loaded in two halves at once, the second by a forked child
# process. Fresh-process loads of generated traces, whole vs split, best of 4 on two cores:
# 5 MB 53 vs 62 ms (the fork and the hand-over cost more than they save), 14 MB 98 vs 89 ms,
# 28 MB 160 vs 134 ms, 46 MB 265 vs 198 ms, the 186 MB meta shape 1.2 vs 0.75 s
SPLIT_MIN_BYTES = 16 << 20
SPLIT_ENV = "NEURON_PROFILER_SPLIT_LOAD"
# The share of the events this process decodes itself. Half: the child's rows are handed over
# through shared memory (``forked.py``) in ~0.05 s, mostly while this process still works. (Through
# the pipe alone the hand-over took ~0.1 s after the child was done, and 55% was best; now 50%
# is: on the meta shape, 8 alternated loads each, median 0.73 s against 0.77 s at 55%.)
FIRST_HALF_SHARE = 0.5


class _Unsplit(Exception):  # noqa: N818 - a signal to the caller, not an error
    """The split load met something other than the clean path (damage, repairs, a boundary
    that was not between two events, a failed child): the caller loads the file whole."""


@dataclass
class SecondHalf:
    """What the child of a split load hands back: its sink's rows, the keys after the array."""

    part: SinkPart
    metadata: dict[str, Any]
    truncated: bool
    damage: str
    trailing: int
    repeated: bool = False  # a key the child read more than once (or another events array)


_JSON_KINDS = {b"{": "an object", b'"': "text", b"t": "true", b"f": "false", b"n": "null"}


class RepeatedKeyError(TraceLoadError):
    """A top-level key written more than once with different values, or ``traceEvents``
    written more than once and not always as an array: a trace (it has events), but which
    value holds is ambiguous, so it is refused."""


class TruncatedTraceWarning(UserWarning):
    """The file was cut off or damaged; complete events before the cut were kept."""


def load_trace(path: str | Path) -> Trace:
    """Load one trace file; raises ``TraceLoadError`` (exit code 2) when nothing is usable."""
    path = Path(path)
    with gc_paused():
        try:
            load = _loaded(path, split=True)
        except _Unsplit:  # the halves did not meet cleanly: the whole file in this process
            load = _loaded(path, split=False)
        trace = _build(load, str(path))
    if len(trace) >= TRIM_ROWS:
        return_freed_heap()
    report = trace.load_report
    if trace.truncated:
        what = report.damage or "file is truncated"
        where = "damage" if report.damage else "cut"
        warnings.warn(
            f"{path}: {what}; kept {len(trace)} complete events before the {where}",
            TruncatedTraceWarning,
            stacklevel=2,
        )
    elif report.damage:
        warnings.warn(
            f"{path}: {report.damage}; every event was read, but some may be damaged",
            TruncatedTraceWarning,
            stacklevel=2,
        )
    return trace


def nothing_usable(trace: Trace) -> str | None:
    """Why a loaded trace holds nothing to analyse or export (no event but metadata: ``M``
    events name processes and threads of nothing), or None. The commands refuse such a file
    with this problem (``require_usable``); ``load_trace`` itself returns it (an empty trace
    is a valid value)."""
    if len(trace):
        return None
    if trace.skipped_events:
        return f"no usable event ({trace.skipped_events} skipped: mistyped fields)"
    if len(trace.meta_events):
        return "no event (traceEvents holds nothing but metadata)"
    return "no event (traceEvents is empty)"


def require_usable(trace: Trace, path: object) -> Trace:
    """``trace``, or ``TraceLoadError`` naming ``path`` when it holds nothing usable."""
    problem = nothing_usable(trace)
    if problem is not None:
        raise TraceLoadError(path, problem)
    return trace


def _loaded(path: Path, *, split: bool) -> _Load:
    source = BlockSource(path)
    try:
        load = _Load(path, source)
        load.run(split=split)
    finally:
        source.close()
    return load


def split_min_bytes() -> int | None:
    """The smallest plain file whose second half is decoded in a child process
    (``NEURON_PROFILER_SPLIT_LOAD``: ``0`` never, a number of bytes, else the default); None:
    never."""
    setting = os.environ.get(SPLIT_ENV, "").strip()
    if not setting:
        return SPLIT_MIN_BYTES
    if setting_off(setting):
        return None
    try:
        value = int(setting)
    except ValueError:
        return SPLIT_MIN_BYTES
    return value if value > 0 else None


def _decode_second_half(path: Path, start: int, size: int, array_form: bool) -> SecondHalf:
    """The child's work in a split load: the events from ``start`` (an event's first byte) to
    the array's end and the keys after it, by the same code as a whole load."""
    source = BlockSource(path, start=start)
    try:
        load = _Load(path, source)
        load.array_form = array_form
        load.sink.expected_bytes = size - start
        load._stream_events(b"")
        load._settle_source()
    finally:
        source.close()
    return SecondHalf(
        part=load.sink.part(),
        metadata=load.metadata,
        truncated=load.truncated,
        damage=load.damage,
        trailing=load.trailing,
        repeated=any(n > 1 for n in load.occurrences.values()) or EVENTS in load.occurrences,
    )


def read_header(path: str | Path) -> dict[str, Any]:
    """The top-level keys a trace holds before its events (Kineto writes ``deviceProperties``
    and ``distributedInfo`` there), read without reading the events: the first blocks of the
    file only. ``{}`` when none come before the events array (or there is none)."""
    path = Path(path)
    source = BlockSource(path)
    try:
        load = _Load(path, source)
        return load.metadata if load._events_start() is not None else {}
    finally:
        source.close()


def is_trace_file(path: str | Path) -> bool:
    """Whether a file found beside traces is one: named as torch names its traces
    (``*.pt.trace.json[.gz]``), or holding a ``traceEvents`` array (read up to it, not its
    events), or a JSON array whose first element is an event (an object with a ``"ph"`` key);
    a capture's status file or a config is not. A file that cannot be read is no
    trace here."""
    path = Path(path)
    if path.name.endswith(V.TORCH_TRACE_SUFFIXES):
        return True
    try:
        source = BlockSource(path)
    except TraceLoadError:
        return False
    try:
        load = _Load(path, source)
        pending = load._events_start()
        if pending is None:
            return False
        return not load.array_form or _first_is_event(pending)
    except RepeatedKeyError:  # a trace, refused when loaded: under a directory, an error
        return True
    except (TraceLoadError, msgspec.DecodeError, ValueError):
        return False
    finally:
        source.close()


def _first_is_event(body: bytes) -> bool:
    """Whether the first element of an array body (the bytes after its ``[``) is an object with
    a ``"ph"`` key; an element longer than the bytes read: whether they name a ``"ph"``."""
    for kind, start, end in split_elements(body):
        if kind != ELEMENT:
            break
        try:
            first = msgspec.json.decode(body[start:end])
        except (msgspec.DecodeError, RecursionError):
            return False
        return isinstance(first, dict) and "ph" in first
    return body.lstrip(_WHITESPACE)[:1] == b"{" and b'"ph"' in body


class _Load:
    """One load: find the events array, stream its pieces, decode the tail (or salvage it).

    Valid files take the fast path only (msgspec on ~1 MB pieces). Where msgspec rejects the
    content of an element (NaN, bytes that are not UTF-8, a lone surrogate, nesting too deep)
    the slow path (``_walk``) splits elements without decoding them and repairs the bad one
    (``trace/repair.py``, the one repair policy), then the fast path resumes."""

    def __init__(self, path: Path, source: BlockSource) -> None:
        self.path, self.source = path, source
        self.sink = ColumnSink()
        self.sink.expected_bytes = source.size_hint
        self.metadata: dict[str, Any] = {}
        self.truncated = False
        self.damage = ""
        self.trailing = 0
        # a bare JSON array of events (the Trace Event Format's "JSON Array Format") instead of
        # an object with ``traceEvents``: no keys, and the closing ``]`` may be missing
        self.array_form = False
        # how often each top-level key was written (traceEvents: events arrays); more than once
        # is counted in the LoadReport (``_take_top``)
        self.occurrences: dict[str, int] = {}
        self._ended_clean = False  # the slow path's last element ended an array file cleanly
        self._limit: int | None = None  # nesting the repair keeps (measured when first needed)

    def run(self, *, split: bool = False) -> None:
        """Load the file; ``split``: a large plain file's second half may be decoded in a child
        process meanwhile (raises ``_Unsplit`` when the halves do not meet cleanly)."""
        pending = self._events_start()
        if pending is None:
            self._whole_document()
        else:
            child = self._second_half(pending) if split else None
            if child is None:
                # (not for a split load: 16 MB and up, a few ms of faults are nothing there)
                warming = warm_heap(usable_cores(), self.source.size_hint)
                try:
                    self._stream_events(pending)
                finally:
                    if warming is not None:
                        warming.join()  # (long done; nothing may fork while it runs)
            else:
                self._first_half(pending, child)
        self._settle_source()
        if self.truncated and self.sink.seen == 0:
            problem = self.damage or NOTHING_COMPLETE
            raise TraceLoadError(
                self.path, problem + ("" if not self.damage else " (no complete event before it)")
            )

    def _events_start(self) -> bytes | None:
        """Bytes right after ``"traceEvents": [`` with the keys before it decoded, or None
        (then the whole document is decoded instead)."""
        self._head = self._read_until(b"", 1)
        array = _ARRAY_FORM.match(self._head)
        if array is not None:
            if self._head[array.end() : array.end() + 1] not in (b"", b"]", b"{"):
                raise TraceLoadError(
                    self.path,
                    "not a torch.profiler trace (a JSON array whose first element is no event)",
                    not_a_trace=True,
                )
            self.array_form = True
            pending, self._head = self._head[array.end() :], b""
            if pending[:1] == b"{" and not _first_is_event(pending):  # is_trace_file's rule
                raise TraceLoadError(
                    self.path,
                    "not a torch.profiler trace (a JSON array whose first element is no event)",
                    not_a_trace=True,
                )
            if pending.lstrip(_WHITESPACE)[:1] in (b"", b"]"):  # (is_trace_file's too)
                raise TraceLoadError(
                    self.path, "not a torch.profiler trace (an empty JSON array)", not_a_trace=True
                )
            return pending
        while True:
            key = self._head.find(_KEY)
            enough = key >= 0 and len(self._head) - key > 1024
            if enough or self.source.done or len(self._head) > _MAX_HEAD_BYTES:
                break
            self._head = self._read_until(self._head, 2 * len(self._head))
        while key >= 0:  # the first top-level "traceEvents": [ (the text may occur in strings)
            match = _ARRAY_START.match(self._head, key + len(_KEY))
            if match is not None:
                decoded = self._decode_object(self._head[:key] + b'"traceEvents":[]}')
                if decoded is not None:
                    arrays = self._take_top(*decoded)
                    for earlier in arrays[:-1]:  # (the last: the array streamed from here)
                        self._feed_array(earlier)
                    pending, self._head = self._head[match.end() :], b""
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

    def _settle_source(self) -> None:
        """What the source found where its data stopped (a cut, damage, trailing bytes)."""
        if self.source.cut:
            self.truncated = True
        if self.source.damage:  # the cause of any invalid JSON where the data stops
            self.damage = self.source.damage
        self.trailing += self.source.trailing

    def _second_half(self, pending: bytes) -> ForkedCall | None:
        """Start a child decoding the events after the middle of a large plain file (this
        process then stops there), or None: a small or compressed file, no second core, or
        forking not safe here."""
        size, limit = self.source.plain_bytes, split_min_bytes()
        if size is None or limit is None or size < limit or usable_cores() < 2:
            return None
        start = self.source.position - len(pending)
        middle = events_middle(self.path, start, size, share=FIRST_HALF_SHARE)
        boundary = find_boundary(self.path, middle, size)
        if boundary is None:
            return None
        end, child_start = boundary
        child = ForkedCall.start(_decode_second_half, self.path, child_start, size, self.array_form)
        if child is not None:
            self.source.stop_at(end)
        return child

    def _first_half(self, pending: bytes, child: ForkedCall) -> None:
        """Decode up to the boundary, check that it falls between two events, append the
        child's events; ``_Unsplit`` if anything is not the clean path."""
        try:
            self._stream_events(pending, first_half=True)
            second = child.result()
        finally:
            child.close()
        if second is None or second.damage:  # (the damage message counts events from 0)
            raise _Unsplit
        if second.repeated or self.metadata.keys() & second.metadata.keys():
            raise _Unsplit  # a key written twice: the whole load compares and counts them
        self.sink.absorb(second.part)
        self.metadata.update(second.metadata)  # keys after the array, as a whole load keeps
        self.truncated = second.truncated
        self.trailing += second.trailing

    def _meet(self, pending: bytes) -> None:
        """The last events before the boundary: they must decode as whole events, which
        proves the boundary lies between two events of the array (not inside a string)."""
        text = pending.strip(_WHITESPACE)
        try:
            if text:
                self.sink.add_piece(b"[" + text + b"]")
        except (msgspec.DecodeError, RecursionError):
            raise _Unsplit from None

    def _stream_events(self, pending: bytes, *, first_half: bool = False) -> None:
        """Feed the events array's pieces to the sink, then its tail (or, in the first half of
        a split load, ``_meet``: anything but clean pieces there raises ``_Unsplit``)."""
        retry_at = 0
        while True:
            if not self.source.done and (
                len(pending) < self.source.block_bytes or len(pending) < retry_at
            ):
                pending = self._read_until(pending, retry_at)
                continue
            if self.source.done:
                break
            cut = leading_events(self.sink.add_piece, pending, need_comma=True)
            if cut.end is not None:
                pending, retry_at = skip_separator(pending[cut.end :]), 0
                continue
            if first_half:  # repairs, damage, the array's end before the boundary: not clean
                raise _Unsplit
            if cut.trouble:  # the first element needs repair (or the array ends here)
                reached, status = self._walk(pending, final=False)
                if status == REPAIRED:
                    pending, retry_at = skip_separator(pending[reached:]), 0
                    continue
                if status == END:
                    self._after_array(pending[reached:])
                    return
                if status == DAMAGE:
                    return
                pending = pending[reached:]  # INCOMPLETE: the element goes on; read on
            retry_at = 2 * len(pending)  # one huge event, or damage: read on, the tail will tell
        if first_half:
            self._meet(pending)
        else:
            self._tail(pending)

    def _tail(self, pending: bytes) -> None:
        """The last piece plus the keys after the array (``baseTimeNanoseconds`` in Kineto)."""
        if self._split_tail(pending) or self._unclosed_array(pending):
            return
        text = b'{"traceEvents":[' + pending + self._closing
        try:
            top = decode_top(text)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            reached, status = self._walk(pending, final=True)
            if status == END:
                self._after_array(pending[reached:])
            elif status == INCOMPLETE and not self._ended_clean:
                self.truncated = True
                self._base_time_from(pending[reached:])
            return
        for events in self._take_top(text, top, continued=True):  # the streamed array's end first
            self._feed_array(events)

    @property
    def _closing(self) -> bytes:
        """What closes the object the tail is decoded in: ``{"traceEvents":[`` + tail is a whole
        object in a Kineto file; an array file's tail needs its ``}``."""
        return b"}" if self.array_form else b""

    def _unclosed_array(self, pending: bytes) -> bool:
        """An array file whose closing ``]`` is left out (the format allows it: writers stream
        events and stop), its last event complete (a trailing comma allowed): its events are
        fed and True. Not a cut: nothing was lost. False leaves the tail to the general path
        (which tells a cut from a clean end element by element)."""
        if not self.array_form:
            return False
        body = pending.rstrip(_WHITESPACE)
        if body.endswith(b","):
            body = body[:-1].rstrip(_WHITESPACE)
        if not body:
            return True
        if body[-1] != _CLOSE_BRACE:
            return False
        try:
            self.sink.add_piece(b"[" + body + b"]")
        except (msgspec.DecodeError, RecursionError):
            return False
        return True

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
            text = b'{"traceEvents":[' + pending[close:] + self._closing
            try:
                rest = decode_top(text)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                continue
            if last >= 0:
                try:
                    self.sink.add_piece(b"".join((b"[", memoryview(pending)[: last + 1], b"]")))
                except (msgspec.DecodeError, RecursionError):
                    return False  # damaged events: the general path salvages them
            for later in self._take_top(text, rest, continued=True)[1:]:
                self._feed_array(later)
            return True
        return False

    def _walk(self, data: bytes, *, final: bool) -> tuple[int, str]:
        """The slow path over the body of the events array: elements are split without being
        decoded, each one msgspec rejects is repaired, complete ones go to the sink. Stops after
        the first repaired element (unless ``final``), at the array's end, at damage or where
        the data ends; returns (offset reached, REPAIRED / END / DAMAGE / INCOMPLETE)."""
        texts: list[bytes] = []
        reached, status = 0, INCOMPLETE
        self._ended_clean = False
        for kind, start, end in split_elements(data):
            if kind != ELEMENT:
                reached, status = start, kind
                break
            element = data[start:end].strip()
            fixed = self._checked(element)
            if fixed is None:
                reached, status = start, DAMAGE
                break
            texts.append(fixed)
            reached = end
            if fixed is not element and not final:
                status = REPAIRED
                break
        if final and status == INCOMPLETE:
            if data[reached:].strip():  # cut right after one?
                last = self._checked(data[reached:].strip())
                if last is not None:
                    texts.append(last)
                    self._ended_clean = self.array_form
            else:  # (an array file may stop after any event: its ] is optional)
                self._ended_clean = self.array_form
        if texts and not self._feed(texts):
            status = DAMAGE
        if status == DAMAGE:
            self.damage = f"invalid JSON after {self.sink.seen} events"
            self.truncated = True
        return reached, status

    def _checked(self, element: bytes) -> bytes | None:
        """``element`` if msgspec can decode it, else its repair (counted), else None. A repair
        that leaves ``ts`` or ``dur`` no number (``NaN`` there) is not counted: the event is
        skipped as mistyped, and counted once, there."""
        got = checked(element, self._depth_limit)
        if got is None:
            return None
        fixed, how = got
        if how & Repair.VALUES and times_unusable(fixed):
            how &= ~Repair.VALUES
        self._count(how)
        return fixed

    def _feed(self, texts: list[bytes]) -> bool:
        """Checked elements to the sink (one by one if the batch fails); False at damage."""
        try:
            self.sink.add_piece(b"[" + b",".join(texts) + b"]")
            return True
        except (msgspec.DecodeError, RecursionError):
            pass
        for text in texts:
            try:
                self.sink.add_piece(b"[" + text + b"]")
            except (msgspec.DecodeError, RecursionError):
                return False
        return True

    def _after_array(self, rest: bytes) -> None:
        """The keys after the events array (``rest`` starts at its ``]``), read on until the
        top-level object closes; what follows it (a second trace, say) is ignored, counted. (An
        array file: the ``]`` closes it.)"""
        depth = 1 if self.array_form else 2
        while True:
            end = close_of(rest, depth)
            if not self.array_form and _KEY in rest[:end]:  # another events array?
                later = member_array(rest, _KEY, depth)
                if later is not None:
                    self._later_array(rest, *later)
                    return
            if end is not None or self.source.done:
                break
            rest = self._read_until(rest, 2 * len(rest))
        if end is None:  # cut off inside the keys
            self.truncated = True
            self._base_time_from(rest)
            return
        decoded = self._decode_object(b'{"traceEvents":[' + rest[:end] + self._closing)
        if decoded is None:
            self.damage, self.truncated = "invalid JSON after the events array", True
            self._base_time_from(rest)
            return
        for later in self._take_top(*decoded, continued=True)[1:]:
            self._feed_array(later)
        trailing = len(rest[end:].lstrip())
        if trailing or not self.source.done:
            while block := self.source.read():  # counted, never held
                trailing += len(block)
        self.trailing += trailing

    def _later_array(self, rest: bytes, key: int, start: int) -> None:
        """A ``traceEvents`` key again after the first array (``rest`` starts at its ``]``):
        the keys between are kept, and the second array is streamed as the first was (its
        events kept, its end read by the same code), counted in ``occurrences``."""
        decoded = self._decode_object(b'{"traceEvents":[' + rest[:key] + b'"traceEvents":[]}')
        if decoded is None:
            self.damage, self.truncated = "invalid JSON after the events array", True
            return
        arrays = self._take_top(*decoded, continued=True)
        for between in arrays[1:-1]:
            self._feed_array(between)
        self._stream_events(rest[start:])

    def _base_time_from(self, text: bytes) -> None:
        """A cut-off tail may still hold Kineto's ``baseTimeNanoseconds``."""
        base = _BASE_TIME.search(text)
        if base and V.META_BASE_TIME not in self.metadata:
            self.metadata[V.META_BASE_TIME] = int(base.group(1))

    def _whole_document(self) -> None:
        data = self.source.read_all(self._head)
        if not data.strip():
            damage = self.source.damage
            raise TraceLoadError(self.path, damage or EMPTY_FILE, not_a_trace=not damage)
        try:
            decoded: tuple[bytes, dict[str, msgspec.Raw]] | None = (data, decode_top(data))
        except msgspec.ValidationError as err:
            raise TraceLoadError(
                self.path, f"not a torch.profiler trace ({err})", not_a_trace=True
            ) from None
        except (msgspec.DecodeError, RecursionError) as err:
            decoded = self._decode_object(data)
            if decoded is None:
                if _KEY in data:
                    raise TraceLoadError(self.path, NOTHING_COMPLETE) from None
                raise TraceLoadError(self.path, f"invalid JSON ({err})", not_a_trace=True) from None
        arrays = self._take_top(*decoded)
        if not arrays:
            raise TraceLoadError(
                self.path, "not a torch.profiler trace (no traceEvents)", not_a_trace=True
            )
        if any(events[:1] != b"[" for events in arrays):
            raise TraceLoadError(
                self.path,
                "not a torch.profiler trace (traceEvents is not an array)",
                not_a_trace=True,
            )
        for events in arrays:
            self._feed_array(events)

    def _feed_array(self, events: bytes) -> None:
        """One whole events array (its text, ``[`` to ``]``) to the sink; the slow path (repairs,
        damage) where msgspec refuses it."""
        try:
            self.sink.add_piece(events)
        except (msgspec.DecodeError, RecursionError):
            self._walk(events[1:], final=True)

    def _decode_object(self, text: bytes) -> tuple[bytes, dict[str, msgspec.Raw]] | None:
        """A top-level object's keys and the text they were decoded from (``text``, or its
        repair, counted, if msgspec refuses its content); None if it is no object even then."""
        try:
            return text, decode_top(text)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            pass
        fixed, how = repair_value(text, self._depth_limit())
        try:
            top = decode_top(fixed)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            return None
        self._count(how)
        return fixed, top

    def _take_top(
        self, text: bytes, top: dict[str, msgspec.Raw], *, continued: bool = False
    ) -> list[bytes]:
        """The ``traceEvents`` arrays of a top-level object's ``text`` (``top``: msgspec's
        decode of it) in file order; its other keys become metadata.

        A key written more than once (msgspec, like Python's json and ``JSON.parse``, keeps the
        last value only, which would drop the others silently): every ``traceEvents`` array is
        returned, so that all their events are kept (as Perfetto's JSON reader keeps them), and
        counted; another key's values must be equal (kept once, counted), else the file is
        refused: which value holds is ambiguous, and the rank, the time base or the devices
        that analyses read would be a guess. ``continued``: the text's first array is the end
        of the one the load streams (counted already)."""
        members = repeated_members(text, top)
        if members is None:
            arrays = [bytes(top.pop(EVENTS))] if EVENTS in top else []
        else:
            self._all_arrays([value for key, value in members if key == EVENTS])
            top.pop(EVENTS, None)
            arrays = [value for key, value in members if key == EVENTS]
            for key in top:
                values = [value for name, value in members if name == key]
                self._same_values(key, values)
                self.occurrences[key] = self.occurrences.get(key, 0) + len(values) - 1
        if len(arrays) > continued:
            self.occurrences[EVENTS] = self.occurrences.get(EVENTS, 0) + len(arrays) - continued
        self._keep_metadata(top)
        return arrays

    def _all_arrays(self, values: list[bytes]) -> None:
        """``RepeatedKeyError`` unless every value of a ``traceEvents`` written more than once
        is an array (a streamed array's end is the first, ``[...]``). One that is not
        makes the file a broken trace, not "no trace" (it has events): the arrays hold events,
        but what the file meant is ambiguous (decoders that keep the last value see no events
        when that is the odd one; Perfetto's reader stops at it), so it is refused in one line
        naming it, and under a directory it is an error, never skipped."""
        odd = [value for value in values if value[:1] != b"["]
        if not odd or len(values) < 2:
            return
        kinds = sorted({_JSON_KINDS.get(value[:1], "a number") for value in odd})
        raise RepeatedKeyError(
            self.path,
            f"traceEvents written more than once, not always as an array ({' and '.join(kinds)}"
            " too): which events the file holds is ambiguous (edit the file to keep the arrays)",
        )

    def _same_values(self, key: str, values: list[bytes]) -> None:
        """``TraceLoadError`` unless every value written for ``key`` is the same (as JSON)."""

        def decoded(value: bytes) -> object:
            try:
                return msgspec.json.decode(value)
            except (msgspec.DecodeError, RecursionError):
                return value

        first = decoded(values[0])
        if any(value != values[0] and decoded(value) != first for value in values[1:]):
            self._different(key, len(values))

    def _different(self, key: str, count: int) -> None:
        raise RepeatedKeyError(
            self.path,
            f'top-level key "{key}" written {count} times with different values '
            "(which one holds is ambiguous: edit the file to keep one)",
        )

    def _keep_metadata(self, top: dict[str, msgspec.Raw]) -> None:
        for key, raw in top.items():
            if key == EVENTS:
                continue
            value = self._metadata_value(raw)
            if key in self.metadata and value != self.metadata[key]:  # before and after events
                self._different(key, self.occurrences.get(key, 0) + 1)
            self.metadata[key] = value
            self.occurrences[key] = self.occurrences.get(key, 0) + 1

    def _metadata_value(self, raw: msgspec.Raw) -> Any:
        """A top-level key's value, repaired (counted) where msgspec refuses it."""
        try:
            return msgspec.json.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            pass
        fixed, how = repair_value(bytes(raw), self._depth_limit())
        try:
            value = msgspec.json.decode(fixed)
            self._count(how)
            return value
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            self._count(Repair.NESTING)  # not even repaired: the key is left out
            return msgspec.json.decode(TRACE_FILES.marker(self._depth_limit()))

    def _depth_limit(self) -> int:
        if self._limit is None:
            self._limit = depth_limit()
        return self._limit

    def _count(self, how: Repair) -> None:
        repairs = self.sink.repairs
        repairs["replaced_text"] += bool(how & Repair.TEXT)
        repairs["replaced_values"] += bool(how & Repair.VALUES)
        repairs["replaced_nesting"] += bool(how & Repair.NESTING)


def _hbm_counter_category(columns: dict[str, np.ndarray], strings: list[str]) -> np.ndarray:
    """The collector's device memory counters as ``CAT_HBM_USAGE`` rows: Kineto writes them with
    its own counter category (``CAT_KINETO_COUNTERS``), told apart by their names
    (``vocabulary.core_hbm_counter_name``). Appends the category to ``strings`` when needed."""
    cat = columns[S.CAT_ID]
    if V.CAT_KINETO_COUNTERS not in strings:
        return cat
    names = [i for i, text in enumerate(strings) if V.is_core_hbm_counter_name(text)]
    hit = (
        (cat == strings.index(V.CAT_KINETO_COUNTERS))
        & (columns[S.PH] == S.Phase.COUNTER)
        & np.isin(columns[S.NAME_ID], np.asarray(names, dtype=columns[S.NAME_ID].dtype))
    )
    if not hit.any():
        return cat
    if V.CAT_HBM_USAGE not in strings:
        strings.append(V.CAT_HBM_USAGE)
    return np.where(hit, strings.index(V.CAT_HBM_USAGE), cat).astype(cat.dtype)


def _no_negative_durations(columns: dict[str, np.ndarray]) -> int:
    """Durations below 0 (written so, or an ``E`` before its ``B``) read as 0, counted: every
    analysis and exporter then sees spans that end where they start, never before."""
    dur = columns[S.DUR_NS]
    negative = dur < 0
    count = int(np.count_nonzero(negative))
    if count:
        dur[negative] = 0
    return count


def _in_time_order(columns: dict[str, np.ndarray]) -> None:
    """Sort the rows by ts (file order breaks ties), in place of the dict's columns. Each
    column is reordered into the one before it of its dtype (rows of all columns are
    distinct arrays): three new arrays instead of one per column, each of which a VM would
    fault in afresh."""
    ts = columns[S.TS_NS]
    if len(ts) < 2 or bool((ts[1:] >= ts[:-1]).all()):
        return
    order = np.argsort(ts, kind="stable")
    spare: dict[np.dtype, np.ndarray] = {}
    for name, column in list(columns.items()):
        out = spare.pop(column.dtype, None)
        if out is None:
            out = np.empty_like(column)
        np.take(column, order, out=out, mode="clip")  # (clip: no buffering; order is valid)
        columns[name] = out
        spare[column.dtype] = column


def _build(load: _Load, source: str) -> Trace:
    sink, metadata = load.sink, load.metadata
    ignored_base = ""
    if V.META_BASE_TIME in metadata and base_time_ns(metadata[V.META_BASE_TIME]) is None:
        ignored_base = msgspec.json.encode(metadata.pop(V.META_BASE_TIME)).decode()[:80]
    columns = sink.columns()
    base_ns = file_base_ns(metadata)
    if base_ns:
        columns[S.TS_NS] += base_ns
    columns = pair_begin_end(columns)
    negative_durations = _no_negative_durations(columns)
    _in_time_order(columns)
    strings = list(sink.strings)
    columns[S.KIND] = refine_kinds(columns[S.KIND], columns[S.NAME_ID], strings)
    columns[S.CAT_ID] = _hbm_counter_category(columns, strings)
    labels = {LABEL_ID_BASE + i: text for text, i in sink.labels.items()}
    meta_events = sink.meta_table(base_ns)
    report = LoadReport(
        **sink.repairs,
        negative_durations=negative_durations,
        trailing_bytes=load.trailing,
        damage=load.damage,
        ignored_base_time=ignored_base,
        repeated_keys=tuple((k, n) for k, n in load.occurrences.items() if n > 1),
    )
    return Trace(
        columns=columns,
        strings=strings,
        raw_args=sink.raw_args(),
        metadata=metadata,
        process_names=sink.process_names,
        thread_names=sink.thread_names,
        process_sort_index=sink.process_sort,
        thread_sort_index=sink.thread_sort,
        pid_labels=labels,
        tid_labels=labels,
        id_labels=labels,
        source=source,
        skipped_events=sink.skipped,
        truncated=load.truncated,
        meta_events=meta_events,
        load_report=report,
    )
