"""Read a trace file as a stream of decompressed blocks and cut its event array into pieces.

The file is never held whole: plain JSON is read block by block, gzip is inflated block by
block. The ``traceEvents`` array is cut after an event's closing ``}`` that is followed by a
comma; a cut is accepted only if msgspec decodes ``[`` + piece + ``]``, so a ``}`` inside a
string or a nested object can never produce a wrong cut (the next candidate is tried instead).

    source = BlockSource(path)
    while block := source.read(): ...
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from neuron_profiler.errors import TraceLoadError

BLOCK_BYTES = 1 << 20  # largest block: pieces this small keep a load's transient memory low
FIRST_BLOCK_BYTES = 128 << 10  # blocks grow with what was read, so small files stay small
_GZIP_IN = 256 << 10
_WS = b" \t\r\n"
_AT_BYTE = re.compile(r"\(byte (\d+)\)")
_BOM = b"\xef\xbb\xbf"
_GZIP_MAGIC = b"\x1f\x8b"
_SALVAGE_STEP = 64  # compressed bytes per step when inflating up to a damaged spot
MAX_CUT_TRIES = 8


class BlockSource:
    """Decompressed blocks of a plain or gzip file (a leading UTF-8 BOM dropped); ``cut`` is
    True if the gzip stream ended early (the file was cut off mid-write); ``damage`` says why
    inflating stopped at damaged data (everything before it is delivered); ``trailing`` counts
    bytes after the last gzip member that are not one."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._fh = open(path, "rb")  # noqa: SIM115 - closed in close()
        except FileNotFoundError:
            raise TraceLoadError(path, "no such file") from None
        except OSError as err:
            raise TraceLoadError(path, f"cannot read: {err.strerror or err}") from None
        head = self._fh.read(2)
        self._fh.seek(0)
        self._inflater = zlib.decompressobj(wbits=31) if head == b"\x1f\x8b" else None
        self._tail = b""  # compressed input not yet inflated
        self._delivered = 0
        self.block_bytes = min(BLOCK_BYTES, FIRST_BLOCK_BYTES)
        self.cut = False
        self.done = False
        self.damage = ""  # why the gzip data stopped early (corrupt data, a failed check)
        self.trailing = 0  # bytes after the last gzip member that are not another member
        self._stopped = False  # damage or trailing bytes: nothing more to inflate

    def read(self) -> bytes:
        """Next block (``block_bytes``, growing up to BLOCK_BYTES), b"" at the end."""
        if self.done:
            return b""
        self.block_bytes = min(BLOCK_BYTES, max(FIRST_BLOCK_BYTES, self._delivered))
        try:
            out = self._fh.read(self.block_bytes) if self._inflater is None else self._inflate()
        except OSError as err:
            raise TraceLoadError(self.path, f"cannot read: {err.strerror or err}") from None
        if not out:
            self.done = True
        elif self._delivered == 0 and out.startswith(_BOM):  # some Windows tools write one
            out = out[len(_BOM):]
        self._delivered += len(out)
        return out

    def _inflate(self) -> bytes:
        parts: list[bytes] = []
        size = 0
        while size < self.block_bytes and not self._stopped:
            raw = self._tail or self._fh.read(_GZIP_IN)
            if not raw:
                if not self._inflater.eof:
                    parts.append(self._inflater.flush())
                    self.cut = True
                break
            if self._inflater.eof:  # a multi-member gzip file: the next member starts here
                if len(raw) < 2 and raw == _GZIP_MAGIC[:len(raw)]:
                    raw += self._fh.read(_GZIP_IN)
                if not raw.startswith(_GZIP_MAGIC):  # not a member: trailing bytes, ignored
                    self.trailing = len(raw) + self._drain()
                    self._tail, self._stopped = b"", True
                    break
                self._inflater = zlib.decompressobj(wbits=31)
            before = self._inflater.copy()
            try:
                part = self._inflater.decompress(raw, self.block_bytes - size)  # bounded
            except zlib.error as err:
                parts.append(self._salvage(before, raw, err, self._delivered + size))
                break
            self._tail = self._inflater.unconsumed_tail or self._inflater.unused_data
            parts.append(part)
            size += len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _salvage(self, inflater: Any, raw: bytes, err: zlib.error, offset: int) -> bytes:
        """Damaged gzip data: everything that inflates before the damage, then the end.
        (zlib raises without the output of the failing call, so it is redone in small steps
        from a copy taken before it.)"""
        parts: list[bytes] = []
        for start in range(0, len(raw), _SALVAGE_STEP):
            step = raw[start:start + _SALVAGE_STEP]
            before = inflater.copy()
            try:
                parts.append(inflater.decompress(step))
                continue
            except zlib.error:
                inflater = before
            for i in range(len(step)):  # the failing step again, a byte at a time
                try:
                    parts.append(inflater.decompress(step[i:i + 1]))
                except zlib.error:
                    break
            break
        out = b"".join(parts)
        self.damage = f"damaged gzip data ({str(err).split(': ', 1)[-1]}) after " \
                      f"{offset + len(out)} bytes"
        self._tail = b""
        self._stopped = True
        return out

    def _drain(self) -> int:
        """Bytes left in the file (read and counted, never held)."""
        count = 0
        while chunk := self._fh.read(_GZIP_IN):
            count += len(chunk)
        return count

    def read_all(self, pending: bytes) -> bytes:
        parts = [pending]
        while block := self.read():
            parts.append(block)
        return b"".join(parts)

    def close(self) -> None:
        self._fh.close()


def skip_separator(data: bytes) -> bytes:
    """Drop the whitespace and the one comma between two array elements."""
    data = data.lstrip(_WS)
    return data[1:].lstrip(_WS) if data[:1] == b"," else data


def error_offset(err: Exception, shift: int) -> int | None:
    """Byte offset msgspec reports for a malformed document, in the caller's coordinates."""
    match = _AT_BYTE.search(str(err))
    return int(match.group(1)) - shift if match else None


class Cut(NamedTuple):
    """Where ``leading_events`` cut: ``end`` of the events fed (None: none), ``trouble``: a cut
    failed on the content rather than on its place (NaN, a lone surrogate, nesting too deep),
    so the first element needs the repair path."""

    end: int | None
    trouble: bool = False


def leading_events(add_piece: Callable[[bytes], None], data: bytes, *, need_comma: bool,
                   tries: int = MAX_CUT_TRIES) -> Cut:
    """Feed ``add_piece`` the longest run of complete events at the start of ``data`` (the body
    of an events array); returns where that run ends.

    ``need_comma``: only cut where another element follows (not at the array's end)."""
    limit = len(data)
    view = memoryview(data)
    trouble = False
    while tries > 0:
        pos = data.rfind(b"}", 0, limit)
        if pos < 0:
            return Cut(None, trouble)
        if need_comma and data[pos + 1:pos + 65].lstrip(_WS)[:1] != b",":
            limit = pos
            continue
        tries -= 1
        try:
            add_piece(b"".join((b"[", view[:pos + 1], b"]")))  # one copy
            return Cut(pos + 1)
        except RecursionError:  # somewhere in the piece: the repair path finds it
            return Cut(None, True)
        except msgspec.DecodeError as err:  # a } inside an event: try an earlier one
            hint = error_offset(err, 1)
            trouble = trouble or (hint is not None and hint < pos)  # bad content, not the cut
            limit = pos if hint is None else min(pos, max(hint, 0))
    return Cut(None, trouble)


def decode_top(text: bytes) -> dict[str, msgspec.Raw]:
    return msgspec.json.decode(text, type=dict[str, msgspec.Raw])
