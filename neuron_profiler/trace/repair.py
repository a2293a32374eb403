"""The one policy for bad JSON input: what the trace loader (``trace.loader``) and the runtime
system-trace parser (``runtime_trace.parser``) do with files that msgspec refuses.

Profiles and captures come from crashed jobs and other tools: a Python producer writes ``NaN``, a
C one Latin-1 bytes or a lone ``\\ud800`` escape, a buggy one nests args a thousand levels deep,
a killed one stops mid-write. One bad element must not cost the rest of the file, and valid files
must pay nothing for that: both readers decode with msgspec, and only where it refuses do they
come here. The policy, for both:

**An error** (``TraceLoadError``: one line ``<file>: <problem>``, exit code 2): a missing or
unreadable file (``open_input``), an empty one, text that is not JSON or not the reader's document
(``invalid JSON (...)``, ``not a torch.profiler trace (...)``, ``not a runtime system-trace
envelope (...)``), and a file cut off or damaged before its first complete element
(``truncated, no complete event``, ``Unusable``). The loader also refuses a top-level key written
twice with different values (which holds would be a guess); it keeps every ``traceEvents`` array
of a file that writes that key twice (``repeated_members``, ``member_array`` find them).

**Kept and reported**: a file cut off mid-write keeps every complete element before the cut; JSON
that stops being JSON mid-file keeps the elements before it; a UTF-8 byte-order mark is dropped.
The array is split into elements without decoding them (``split_elements``, ``close_of``:
strings and brackets only, no recursion, no depth limit).

**Repaired in place and counted** (``repair_value``; ``Repair`` says what, counted once per
element): bytes that are not UTF-8, lone surrogate escapes and bad escapes become U+FFFD or the
text kept literally, control characters in strings are escaped (``TEXT``); ``NaN``,
``Infinity``, numbers beyond float range and other bare words (``VALUES``) become what the
reader's ``Policy`` says, and so does a member nested deeper than the decoder takes
(``NESTING``); a comma before a closing bracket is dropped (``SYNTAX``, not counted).

Each reader's ``Policy``: trace files (``TRACE_FILES``) keep an odd value as its text, since args
are read by people, and a too-deep value becomes ``{"neuron-profiler replaced": "nested deeper
than N levels"}``; they count ``LoadReport.replaced_text`` / ``replaced_values`` /
``replaced_nesting``. System-trace files (``runtime_trace.parser.REPAIR``) hold typed numbers and
ids: an odd value, and an integer beyond 64 bits, becomes null (the field is left out, as a
mistyped one is) and a too-deep ``data`` object becomes ``{"neuron_profiler": {"too_deep":
true}}``; they count ``DeviceActivities.malformed``.

    fixed, how = repair_value(b'{"args":{"v":NaN}}', depth_limit())   # how == Repair.VALUES
"""

from __future__ import annotations

import enum
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

import msgspec

from neuron_profiler.errors import TraceLoadError
from neuron_profiler.trace import vocabulary as V

T = TypeVar("T")

HEADROOM = 64  # frames below the caller at which the loader decodes (see with_headroom)
_PROBE_MAX = 4096
_DEPTH_SAFETY = 8
_DEEP_HINT = 64  # a container this deep makes the repair measure what the decoder allows

# strings (possibly unterminated: a lone quote), brackets and commas: enough to split elements.
# Brackets in runs (``[[[``, ``]}]``): one match, not one Python step, per bracket of a value
# nested thousands deep (hostile input), so that splitting and repairing it stay linear in C.
_STRUCT = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[{]+|[\]}]+|[,"]', re.S)
# every token of one element, for the rewrite
_TOKEN = re.compile(
    rb"""
    (?P<str>"[^"\\]*(?:\\.[^"\\]*)*")
  | (?P<open>[\[{]+) | (?P<close>[\]}]+) | (?P<comma>,) | (?P<colon>:) | (?P<ws>[ \t\r\n]+)
  | (?P<num>-?[0-9.][0-9A-Za-z.+\-]*)
  | (?P<word>-?[A-Za-z_$][A-Za-z0-9_$]*)
  | (?P<other>.)
""",
    re.S | re.X,
)
_NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?\Z")
_ESCAPE = re.compile(rb'\\(?:u([0-9a-fA-F]{4})|(["\\/bfnrt])|(.)|\Z)', re.S)
_CONTROL = re.compile(rb"[\x00-\x1f]")
_LITERALS = (b"true", b"false", b"null")
_FFFD = rb"\ufffd"


class Repair(enum.IntFlag):
    """What a repair changed in one element."""

    NONE = 0
    TEXT = 1  # bytes not UTF-8, lone surrogate escapes, bad escapes, control characters
    VALUES = 2  # NaN / Infinity / numbers beyond float range / bare words: text or null
    NESTING = 4  # a value nested too deeply: replaced by the marker
    SYNTAX = 8  # a comma before a closing bracket dropped (not counted)


COUNTED = Repair.TEXT | Repair.VALUES | Repair.NESTING  # what a reader counts, once per element


def marker(limit: int) -> bytes:
    """What a too-deep value of a trace file becomes: an object, so that replaced args are still
    args."""
    return msgspec.json.encode({V.ARG_REPLACED: f"nested deeper than {limit} levels"})


@dataclass(frozen=True)
class Policy:
    """What one reader's repairs write (the rest of the policy is the same for every reader).

    marker: what a value nested deeper than ``limit`` levels becomes (``marker(limit)``).
    odd_as_text: ``NaN``, ``Infinity``, numbers beyond float range and bare words become their
        text (a JSON string); False: null.
    int_bits: integers outside a signed integer of this many bits are odd values too (None: any
        size is kept: msgspec decodes them).
    """

    marker: Callable[[int], bytes] = marker
    odd_as_text: bool = True
    int_bits: int | None = None


TRACE_FILES = Policy()  # the loader's (trace/loader.py); system-trace files: parser.REPAIR


class Unusable(msgspec.DecodeError):
    """Nothing usable in a reader's input (``str(err)``: the problem, one line). A
    ``msgspec.DecodeError``, so callers that map decode errors to ``TraceLoadError`` map it."""


# ---- one-line problems of an input file (TraceLoadError(path, problem)) ----------------------

EMPTY_FILE = "empty file"
NOTHING_COMPLETE = "truncated, no complete event"


def open_input(path: Path) -> IO[bytes]:
    """``path`` opened for reading; ``TraceLoadError`` ("no such file", "cannot read: ...",
    "not a regular file ...") otherwise. Readers seek and read a file more than once, so a pipe
    or a device is refused before it is opened (opening a FIFO without a writer would block)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise TraceLoadError(path, "no such file") from None
    except OSError as err:
        raise TraceLoadError(path, cannot_read(err)) from None
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):  # (a directory: "cannot read")
        raise TraceLoadError(path, "not a regular file (a pipe or a device): save it to a file")
    try:
        return open(path, "rb")  # noqa: SIM115 - the caller closes it
    except FileNotFoundError:
        raise TraceLoadError(path, "no such file") from None
    except OSError as err:
        raise TraceLoadError(path, cannot_read(err)) from None


def cannot_read(err: OSError) -> str:
    return f"cannot read: {err.strerror or err}"


def with_headroom(fn: Callable[[Any], T], arg: Any, frames: int = HEADROOM) -> T:
    """``fn(arg)`` called ``frames`` Python frames deeper than here.

    msgspec refuses nesting deeper than the Python stack has room for. Decoding with headroom
    means that what the loader accepts still decodes later, from a deeper caller (an exporter,
    an analysis), and a RecursionError surfaces here, on the loader's slow path."""
    if frames > 0:
        return with_headroom(fn, arg, frames - 1)
    return fn(arg)


def depth_limit() -> int:
    """The deepest nesting msgspec decodes from here (with the loader's headroom), less a
    safety margin: values deeper than this are replaced by the repair."""

    def fits(depth: int) -> bool:
        try:
            with_headroom(msgspec.json.decode, b"[" * depth + b"]" * depth, HEADROOM + 2)
            return True
        except RecursionError:
            return False

    lo, hi = 1, _PROBE_MAX
    if fits(hi):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return max(lo - _DEPTH_SAFETY, 2)


# ---- splitting an events array ---------------------------------------------------------------

ELEMENT, END, INCOMPLETE, DAMAGE = "element", "end", "incomplete", "damage"


def split_elements(data: bytes, start: int = 0) -> Iterator[tuple[str, int, int]]:
    """The elements of an array body (from ``start``, just after ``[`` or a separator) as
    ``(ELEMENT, start, end)``, then one final ``(END, pos, pos)`` at the closing ``]``,
    ``(INCOMPLETE, pos, pos)`` where the data ends inside an element (pos: where it starts), or
    ``(DAMAGE, pos, pos)`` at a bracket that cannot be there. Nothing is decoded."""
    depth, segment = 0, start
    for match in _STRUCT.finditer(data, start):
        char = data[match.start()]
        if char == 0x22:  # "
            if match.end() - match.start() == 1:  # a quote that never closes
                yield INCOMPLETE, segment, segment
                return
        elif char in b"[{":
            depth += match.end() - match.start()
        elif char in b"]}":
            if match.end() - match.start() > depth:  # a bracket of the run closes the array
                at = match.start() + depth
                if data[at] == 0x7D:  # }
                    yield DAMAGE, at, at
                    return
                if data[segment:at].strip():
                    yield ELEMENT, segment, at
                yield END, at, at
                return
            depth -= match.end() - match.start()
        elif depth == 0:  # a comma between elements
            if data[segment : match.start()].strip():
                yield ELEMENT, segment, match.start()
            segment = match.end()
    yield INCOMPLETE, segment, segment


def close_of(data: bytes, depth: int, start: int = 0) -> int | None:
    """Offset just after the bracket that closes ``depth`` open containers, counting from
    ``start`` (None if the data ends first): where a top-level object ends after its events
    array."""
    for match in _STRUCT.finditer(data, start):
        char = data[match.start()]
        if char == 0x22:
            if match.end() - match.start() == 1:
                return None
        elif char in b"[{":
            depth += match.end() - match.start()
        elif char in b"]}":
            if 0 < depth <= match.end() - match.start():
                return match.start() + depth
            depth -= match.end() - match.start()
    return None


_MEMBER = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[{]+|[\]}]+|[,:"]', re.S)
_WS_BYTES = b" \t\r\n"


def _non_blank(text: bytes) -> int:
    """Bytes of ``text`` that are not JSON whitespace (counted in C: no copy, no loop here)."""
    return len(text) - sum(text.count(c) for c in (b" ", b"\t", b"\r", b"\n"))


def repeated_members(text: bytes, top: dict[str, Any]) -> list[tuple[str, bytes]] | None:
    """Every member of the top-level object ``text``, in file order, as (key, value's JSON
    text), when a key occurs more than once; None when no key repeats.

    ``top`` is what msgspec decoded from ``text`` (``dict[str, msgspec.Raw]``), which keeps a
    repeated key's last value only, as Python's json and JavaScript's ``JSON.parse`` do. The
    check is free for the usual object: its non-blank bytes add up to those of ``top``'s keys,
    values and punctuation exactly; only where they do not is ``text`` scanned (strings and
    brackets, as ``split_elements`` does: no recursion)."""
    kept = sum(
        _non_blank(msgspec.json.encode(key)) + 1 + _non_blank(bytes(value))
        for key, value in top.items()
    )
    if _non_blank(text) == 2 + kept + max(len(top) - 1, 0):
        return None
    members: list[tuple[str, bytes]] = []
    depth, key, value_start = 0, None, -1
    for match in _MEMBER.finditer(text):
        token = match.group()
        char = token[0]
        if char in b"[{":
            depth += len(token)
        elif char in b"]}":
            if depth - len(token) < 1:  # the run closes the top-level object
                end = match.start() + depth - 1  # (its bracket in the run)
                if key is not None and value_start >= 0:
                    members.append((key, text[value_start:end].strip(_WS_BYTES)))
                break
            depth -= len(token)
        elif depth != 1:
            continue
        elif char == 0x22 and key is None and len(token) > 1:
            try:
                key = msgspec.json.decode(token)
            except msgspec.DecodeError:
                key = token[1:-1].decode("utf-8", "replace")
        elif token == b":" and key is not None:
            value_start = match.end()
        elif token == b"," and key is not None and value_start >= 0:
            members.append((key, text[value_start : match.start()].strip(_WS_BYTES)))
            key, value_start = None, -1
    counts: dict[str, int] = {}
    for name, _ in members:
        counts[name] = counts.get(name, 0) + 1
    return members if any(n > 1 for n in counts.values()) else None


def member_array(data: bytes, key: bytes, depth: int) -> tuple[int, int] | None:
    """Where a member ``key`` (its JSON text, quotes included) whose value is an array starts
    at depth 1 of ``data``, which begins ``depth`` containers deep: (the key's offset, the
    offset just after its ``[``). None where the object closes first or the data ends: a
    second ``traceEvents`` array after the first, found without decoding anything."""
    at, colon = -1, False
    for match in _MEMBER.finditer(data):
        token = match.group()
        char = token[0]
        if char in b"[{":
            if at >= 0 and colon and depth == 1 and char == 0x5B:  # [
                return at, match.start() + 1
            depth += len(token)
            at = -1
        elif char in b"]}":
            if len(token) >= depth:
                return None
            depth -= len(token)
        elif depth != 1:
            continue
        elif char == 0x22 and len(token) == 1:  # a quote that never closes
            return None
        elif token == key and not colon:
            at = match.start()
        elif token == b":" and at >= 0:
            colon = True
        else:
            at, colon = -1, False
    return None


# ---- rewriting one value ----------------------------------------------------------------------


def fix_utf8(text: bytes) -> tuple[bytes, bool]:
    """``text`` with bytes that are not UTF-8 replaced by U+FFFD; True if any were."""
    if text.isascii():
        return text, False
    try:
        text.decode("utf-8")
        return text, False
    except UnicodeDecodeError:
        return text.decode("utf-8", "replace").encode("utf-8"), True


def repair_value(
    text: bytes, limit: int | None = None, policy: Policy = TRACE_FILES
) -> tuple[bytes, Repair]:
    """One complete JSON value (an event, args, a top-level object) rewritten so that msgspec
    decodes it, as ``policy`` says. ``limit``: the deepest nesting kept (values of the value's own
    members that go deeper are replaced by ``policy.marker``); None measures it (``depth_limit``)
    when a value is deep enough to need it."""
    text, bad_bytes = fix_utf8(text)
    how = Repair.TEXT if bad_bytes else Repair.NONE
    edits: list[tuple[int, int, bytes]] = []
    depth = 0
    member_start = -1  # where the open container at depth 2 (a member's value) starts
    replacing = False
    last = b""  # last significant token (for a comma before a closing bracket)
    last_comma = -1
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup
        if kind == "ws":
            continue
        token = match.group()
        if kind == "open":  # a run of opening brackets
            if depth < 2 <= depth + len(token):
                member_start = match.start() + 1 - depth  # the bracket that reaches depth 2
            depth += len(token)
            if not replacing and depth > (_DEEP_HINT if limit is None else limit):
                limit = depth_limit() if limit is None else limit
                if depth > limit and member_start >= 0:
                    replacing = True
                    how |= Repair.NESTING
        elif kind == "close":  # a run of closing brackets
            if last == b"," and not replacing:
                edits.append((last_comma, last_comma + 1, b""))
                how |= Repair.SYNTAX
            if replacing and depth - len(token) <= 1:  # the run closes the replaced member
                edits = [e for e in edits if e[0] < member_start]
                end = match.start() + depth - 1  # just after the bracket back at depth 1
                edits.append((member_start, end, policy.marker(limit or 0)))
                replacing = False
            depth -= len(token)
        elif replacing:
            pass
        elif kind == "str":
            fixed = _fix_string(token)
            if fixed is not token:
                edits.append((match.start(), match.end(), fixed))
                how |= Repair.TEXT
        elif kind == "num":
            if (
                not _NUMBER.match(token)
                or _beyond_float(token)
                or (policy.int_bits is not None and _beyond_int(token, policy.int_bits))
            ):
                edits.append((match.start(), match.end(), _odd(token, policy)))
                how |= Repair.VALUES
        elif kind == "word":
            if token not in _LITERALS:
                edits.append((match.start(), match.end(), _odd(token, policy)))
                how |= Repair.VALUES
        elif kind == "comma":
            last_comma = match.start()
        last = b"," if kind == "comma" else token[:1]
    if not edits:
        return text, how
    parts, pos = [], 0
    for start, end, new in edits:
        parts += [text[pos:start], new]
        pos = end
    parts.append(text[pos:])
    return b"".join(parts), how


def _beyond_float(token: bytes) -> bool:
    """A JSON number msgspec cannot hold: a float that overflows (ints of any size decode)."""
    if not any(c in token for c in b".eE"):
        return False
    return abs(float(token)) == float("inf")


def _beyond_int(token: bytes, bits: int) -> bool:
    """An integer token outside a signed ``bits``-bit integer."""
    if any(c in token for c in b".eE"):
        return False
    return not -(2 ** (bits - 1)) <= int(token) < 2 ** (bits - 1)


def _odd(token: bytes, policy: Policy) -> bytes:
    """What an odd value becomes: its text, or null."""
    return _quoted(token) if policy.odd_as_text else b"null"


def _quoted(token: bytes) -> bytes:
    return msgspec.json.encode(token.decode("utf-8", "replace"))


_decode_raw = msgspec.json.Decoder(msgspec.Raw).decode


def checked(
    element: bytes, limit: Callable[[], int], policy: Policy = TRACE_FILES
) -> tuple[bytes, Repair] | None:
    """``element`` as it is if msgspec decodes it (with the loader's headroom), else its repair,
    else None (not JSON even then: damage). ``limit()`` gives the depth limit (called only when
    a repair is needed, so a reader can measure it once)."""
    try:
        with_headroom(_decode_raw, element)
        return element, Repair.NONE
    except (msgspec.DecodeError, RecursionError):
        pass
    fixed, how = repair_value(element, limit(), policy)
    try:
        with_headroom(_decode_raw, fixed)
    except (msgspec.DecodeError, RecursionError):
        return None
    return fixed, how


def _fix_string(token: bytes) -> bytes:
    """A string token with lone surrogate escapes and bad escapes replaced, control characters
    escaped; the same object when nothing needed fixing."""
    body = token[1:-1]
    if b"\\" not in body and not _CONTROL.search(body):
        return token
    out: list[bytes] = []
    pos = 0
    high = -1  # index in ``out`` of a high surrogate escape still waiting for its low half

    def unpaired() -> None:
        nonlocal high
        if high >= 0:
            out[high] = _FFFD
            high = -1

    for match in _ESCAPE.finditer(body):
        if match.start() > pos:
            unpaired()
            out.append(_escape_controls(body[pos : match.start()]))
        pos = match.end()
        hexa = match.group(1)
        code = int(hexa, 16) if hexa is not None else -1
        if 0xDC00 <= code < 0xE000:  # a low half: fine right after a high one
            out.append(match.group() if high >= 0 else _FFFD)
            high = -1
            continue
        unpaired()
        if 0xD800 <= code < 0xDC00:
            high = len(out)
            out.append(match.group())
        elif hexa is not None or match.group(2) is not None:
            out.append(match.group())
        else:  # a bad escape: the text kept literally
            out.append(b"\\\\" + _escape_controls(match.group()[1:]))
    if pos < len(body):
        unpaired()
        out.append(_escape_controls(body[pos:]))
    unpaired()
    fixed = b'"' + b"".join(out) + b'"'
    return token if fixed == token else fixed


def _escape_controls(text: bytes) -> bytes:
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub(lambda m: b"\\u%04x" % m.group()[0], text)
