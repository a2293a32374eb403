"""Repair hostile JSON text: the loader's slow path, run only where msgspec rejects a piece.

Profiles come from crashed jobs and other tools: a Python producer writes ``NaN``, a C one writes
Latin-1 bytes or a lone ``\\ud800`` escape, a buggy one nests args a thousand levels deep. msgspec
(rightly) refuses all of these, and one bad event must not cost the rest of the file. This module
splits an events array into its elements without decoding them (strings and brackets only, so no
recursion and no limit on depth) and rewrites one element so that msgspec accepts it:

- bytes that are not UTF-8, lone surrogate escapes, bad escapes: U+FFFD / the text kept literally;
- ``NaN``, ``Infinity``, numbers beyond float range, other bare words: kept as strings;
- a member value nested deeper than the decoder allows: replaced by a marker object;
- control characters inside strings: escaped; a comma before a closing bracket: dropped.

    fixed, how = repair_value(b'{"args":{"v":NaN}}', depth_limit())   # how == Repair.VALUES
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import msgspec

from neuron_profiler.trace import vocabulary as V

T = TypeVar("T")

HEADROOM = 64  # frames below the caller at which the loader decodes (see with_headroom)
_PROBE_MAX = 4096
_DEPTH_SAFETY = 8
_DEEP_HINT = 64  # a container this deep makes the repair measure what the decoder allows

# strings (possibly unterminated: a lone quote), brackets and commas: enough to split elements
_STRUCT = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},"]', re.S)
# every token of one element, for the rewrite
_TOKEN = re.compile(rb"""
    (?P<str>"[^"\\]*(?:\\.[^"\\]*)*")
  | (?P<open>[\[{]) | (?P<close>[\]}]) | (?P<comma>,) | (?P<colon>:) | (?P<ws>[ \t\r\n]+)
  | (?P<num>-?[0-9.][0-9A-Za-z.+\-]*)
  | (?P<word>-?[A-Za-z_$][A-Za-z0-9_$]*)
  | (?P<other>.)
""", re.S | re.X)
_NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?\Z")
_ESCAPE = re.compile(rb'\\(?:u([0-9a-fA-F]{4})|(["\\/bfnrt])|(.)|\Z)', re.S)
_CONTROL = re.compile(rb"[\x00-\x1f]")
_LITERALS = (b"true", b"false", b"null")
_FFFD = rb"\ufffd"


class Repair(enum.IntFlag):
    """What a repair changed in one element."""

    NONE = 0
    TEXT = 1  # bytes not UTF-8, lone surrogate escapes, bad escapes, control characters
    VALUES = 2  # NaN / Infinity / numbers beyond float range / bare words: now strings
    NESTING = 4  # a value nested too deeply: replaced by the marker
    SYNTAX = 8  # a comma before a closing bracket dropped


def marker(limit: int) -> bytes:
    """What a too-deep value becomes: an object, so that replaced args are still args."""
    return msgspec.json.encode({V.ARG_REPLACED: f"nested deeper than {limit} levels"})


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


def split_elements(data: bytes) -> Iterator[tuple[str, int, int]]:
    """The elements of an array body (``data`` starts after ``[`` or a separator) as
    ``(ELEMENT, start, end)``, then one final ``(END, pos, pos)`` at the closing ``]``,
    ``(INCOMPLETE, pos, pos)`` where the data ends inside an element (pos: where it starts), or
    ``(DAMAGE, pos, pos)`` at a bracket that cannot be there. Nothing is decoded."""
    depth, segment = 0, 0
    for match in _STRUCT.finditer(data):
        char = data[match.start()]
        if char == 0x22:  # "
            if match.end() - match.start() == 1:  # a quote that never closes
                yield INCOMPLETE, segment, segment
                return
        elif char in b"[{":
            depth += 1
        elif char in b"]}":
            if depth == 0:
                if char == 0x7D:  # }
                    yield DAMAGE, match.start(), match.start()
                    return
                if data[segment:match.start()].strip():
                    yield ELEMENT, segment, match.start()
                yield END, match.start(), match.start()
                return
            depth -= 1
        elif depth == 0:  # a comma between elements
            if data[segment:match.start()].strip():
                yield ELEMENT, segment, match.start()
            segment = match.end()
    yield INCOMPLETE, segment, segment


def close_of(data: bytes, depth: int) -> int | None:
    """Offset just after the bracket that closes ``depth`` open containers (None if the data
    ends first): where a top-level object ends after its events array."""
    for match in _STRUCT.finditer(data):
        char = data[match.start()]
        if char == 0x22:
            if match.end() - match.start() == 1:
                return None
        elif char in b"[{":
            depth += 1
        elif char in b"]}":
            depth -= 1
            if depth == 0:
                return match.end()
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


def repair_value(text: bytes, limit: int | None = None) -> tuple[bytes, Repair]:
    """One complete JSON value (an event, args, a top-level object) rewritten so that msgspec
    decodes it. ``limit``: the deepest nesting kept (values of the value's own members that go
    deeper are replaced by ``marker``); None measures it (``depth_limit``)."""
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
        if kind == "open":
            depth += 1
            if depth == 2:
                member_start = match.start()
            if not replacing and depth > (_DEEP_HINT if limit is None else limit):
                limit = depth_limit() if limit is None else limit
                if depth > limit and member_start >= 0:
                    replacing = True
                    how |= Repair.NESTING
        elif kind == "close":
            if last == b"," and not replacing:
                edits.append((last_comma, last_comma + 1, b""))
                how |= Repair.SYNTAX
            depth -= 1
            if replacing and depth == 1:
                edits = [e for e in edits if e[0] < member_start]
                edits.append((member_start, match.end(), marker(limit or 0)))
                replacing = False
        elif replacing:
            pass
        elif kind == "str":
            fixed = _fix_string(token)
            if fixed is not token:
                edits.append((match.start(), match.end(), fixed))
                how |= Repair.TEXT
        elif kind == "num":
            if not _NUMBER.match(token) or _beyond_float(token):
                edits.append((match.start(), match.end(), _quoted(token)))
                how |= Repair.VALUES
        elif kind == "word":
            if token not in _LITERALS:
                edits.append((match.start(), match.end(), _quoted(token)))
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


def _quoted(token: bytes) -> bytes:
    return msgspec.json.encode(token.decode("utf-8", "replace"))


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
            out.append(_escape_controls(body[pos:match.start()]))
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
