"""Read a trace file as a stream of decompressed blocks and cut its event array into pieces.

The file is never held whole: plain JSON is read block by block, gzip is inflated block by
block. The ``traceEvents`` array is cut after an event's closing ``}`` that is followed by a
comma; a cut is accepted only if msgspec decodes ``[`` + piece + ``]``, so a ``}`` inside a
string or a nested object can never produce a wrong cut (the next candidate is tried instead).

    source = BlockSource(path)
    while block := source.read(): ...
"""

from __future__ import annotations

import os
import re
import threading
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from neuron_profiler.errors import TraceLoadError
from neuron_profiler.heap import reuse_transient_buffers
from neuron_profiler.trace.repair import cannot_read, open_input

BLOCK_BYTES = 1 << 20  # largest block: pieces this small keep a load's transient memory low
FIRST_BLOCK_BYTES = 128 << 10  # blocks grow with what was read, so small files stay small
_GZIP_IN = 256 << 10
_WS = b" \t\r\n"
_AT_BYTE = re.compile(r"\(byte (\d+)\)")
_BOM = b"\xef\xbb\xbf"
_GZIP_MAGIC = b"\x1f\x8b"
_GZIP_TRAILER = 18  # bytes of a gzip member without data: 10 of header, CRC32 and ISIZE
# inflated / compressed sizes a gzip trace's trailer may claim and be believed: Kineto's JSON
# deflates 8-30x (the shared traces, the bench's shapes); outside this the trailer is taken
# for what it may be (a cut-off file's last bytes, one member of several) and ignored
_GZIP_RATIO = (1, 64)
_SALVAGE_STEP = 64  # compressed bytes per step when inflating up to a damaged spot
MAX_CUT_TRIES = 8
READ_AHEAD = True  # inflate the next full-size gzip block in a worker thread
# ... once this many full-size blocks were read: below that a thread costs more than it hides
# (its start, and the blocks it inflates land in a malloc arena of its own whose pages a fresh
# process faults in: a 5 MB gzip trace loaded 4-5 ms slower, 4 MB more memory, with it)
READ_AHEAD_AFTER_BLOCKS = 8


class BlockSource:
    """Decompressed blocks of a plain or gzip file (a leading UTF-8 BOM dropped); ``cut`` is
    True if the gzip stream ended early (the file was cut off mid-write); ``damage`` says why
    inflating stopped at damaged data (everything before it is delivered); ``trailing`` counts
    bytes after the last gzip member that are not one.

    Once a gzip file's blocks are full size (the file is large), the next block is inflated in
    a worker thread while the caller decodes the current one: zlib releases the GIL, so
    inflating costs little wall time. Only the worker touches the file and the inflater while
    it runs; ``cut`` / ``damage`` / ``trailing`` wait for it."""

    def __init__(self, path: Path, *, start: int = 0) -> None:
        """``start``: the byte offset of a plain file to read from (the loader's second half)."""
        self.path = path
        reuse_transient_buffers()  # (heap.py: the C heap's rules for bulk work)
        self._fh = open_input(path)  # closed in close(); TraceLoadError when it cannot be read
        head = self._fh.read(2)
        self._fh.seek(0)
        self._inflater = zlib.decompressobj(wbits=31) if head == b"\x1f\x8b" else None
        self._gzip_hint = self._gzip_trailer_size() if self._inflater is not None else None
        self._end: int | None = None  # a plain file's offset to stop at (``stop_at``)
        if start:
            self._fh.seek(start)
        self._tail = b""  # compressed input not yet inflated
        self._delivered = 0
        self.block_bytes = min(BLOCK_BYTES, FIRST_BLOCK_BYTES)
        self._cut = False
        self.done = False
        self._damage = ""  # why the gzip data stopped early (corrupt data, a failed check)
        self._trailing = 0  # bytes after the last gzip member that are not another member
        self._stopped = False  # damage or trailing bytes: nothing more to inflate
        self._ahead: _Ahead | None = None  # the next block, being produced by a worker

    @property
    def plain_bytes(self) -> int | None:
        """Size of a plain (not gzip) file, None for gzip: how much text is to come."""
        if self._inflater is not None:
            return None
        try:
            return os.fstat(self._fh.fileno()).st_size
        except OSError:
            return None

    @property
    def position(self) -> int:
        """Bytes of a plain file read so far (its offset after the last block delivered)."""
        return self._fh.tell()

    def stop_at(self, offset: int) -> None:
        """Deliver a plain file's bytes up to ``offset`` only (the first half of a split load)."""
        self._end = offset

    @property
    def size_hint(self) -> int | None:
        """About how much text is to come: a plain file's size, or the inflated size a gzip
        file's trailer claims when that is plausible (``_gzip_trailer_size``); None when
        unknown. Only a hint (room to reserve for rows): nothing relies on it being right."""
        return self.plain_bytes if self._inflater is None else self._gzip_hint

    def _gzip_trailer_size(self) -> int | None:
        """ISIZE, the last 4 bytes of a gzip file: the inflated size (mod 2**32) of its last
        member, which is the whole file's for the usual single-member trace. None where the
        ratio to the compressed size is implausible (``_GZIP_RATIO``) or the file cannot
        seek."""
        try:
            compressed = os.fstat(self._fh.fileno()).st_size
            if compressed <= _GZIP_TRAILER:
                return None
            self._fh.seek(compressed - 4)
            claimed = int.from_bytes(self._fh.read(4), "little")
        except OSError:
            return None
        finally:
            self._fh.seek(0)
        low, high = _GZIP_RATIO
        return claimed if low * compressed <= claimed <= high * compressed else None

    @property
    def cut(self) -> bool:
        self._settle()
        return self._cut

    @property
    def damage(self) -> str:
        self._settle()
        return self._damage

    @property
    def trailing(self) -> int:
        self._settle()
        return self._trailing

    def read(self) -> bytes:
        """Next block (``block_bytes``, growing up to BLOCK_BYTES), b"" at the end."""
        if self.done:
            return b""
        self.block_bytes = min(BLOCK_BYTES, max(FIRST_BLOCK_BYTES, self._delivered))
        if self._ahead is not None:
            ahead, self._ahead = self._ahead, None
            out = ahead.result()
        else:
            out = self._produce(self.block_bytes)
        if not out:
            self.done = True
        elif self._delivered == 0 and out.startswith(_BOM):  # some Windows tools write one
            out = out[len(_BOM) :]
        self._delivered += len(out)
        if out and self._reads_ahead():
            self._ahead = _Ahead(self._produce, BLOCK_BYTES)
        return out

    def _reads_ahead(self) -> bool:
        """Full-size gzip blocks of a file past its first ``READ_AHEAD_AFTER_BLOCKS``: inflating
        the next one overlaps the caller's decoding (2 s less per 5M events). Plain blocks are
        a copy from the page cache: a thread per block would cost more than it hides."""
        return (
            READ_AHEAD
            and self._inflater is not None
            and self.block_bytes == BLOCK_BYTES
            and self._delivered >= READ_AHEAD_AFTER_BLOCKS * BLOCK_BYTES
        )

    def _produce(self, size: int) -> bytes:
        try:
            if self._inflater is not None:
                return self._inflate(size)
            if self._end is not None:
                size = max(0, min(size, self._end - self._fh.tell()))
            return self._fh.read(size)
        except OSError as err:
            raise TraceLoadError(self.path, cannot_read(err)) from None

    def _settle(self) -> None:
        """Wait for the block being read ahead (it is kept for the next ``read``)."""
        if self._ahead is not None:
            self._ahead.wait()

    def _inflate(self, block_bytes: int) -> bytes:
        parts: list[bytes] = []
        size = 0
        while size < block_bytes and not self._stopped:
            raw = self._tail or self._fh.read(_GZIP_IN)
            if not raw:
                if not self._inflater.eof:
                    parts.append(self._inflater.flush())
                    self._cut = True
                break
            if self._inflater.eof:  # a multi-member gzip file: the next member starts here
                if len(raw) < 2 and raw == _GZIP_MAGIC[: len(raw)]:
                    raw += self._fh.read(_GZIP_IN)
                if not raw.startswith(_GZIP_MAGIC):  # not a member: trailing bytes, ignored
                    self._trailing = len(raw) + self._drain()
                    self._tail, self._stopped = b"", True
                    break
                self._inflater = zlib.decompressobj(wbits=31)
            before = self._inflater.copy()
            try:
                part = self._inflater.decompress(raw, block_bytes - size)  # bounded
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
            step = raw[start : start + _SALVAGE_STEP]
            before = inflater.copy()
            try:
                parts.append(inflater.decompress(step))
                continue
            except zlib.error:
                inflater = before
            for i in range(len(step)):  # the failing step again, a byte at a time
                try:
                    parts.append(inflater.decompress(step[i : i + 1]))
                except zlib.error:
                    break
            break
        out = b"".join(parts)
        self._damage = (
            f"damaged gzip data ({str(err).split(': ', 1)[-1]}) after {offset + len(out)} bytes"
        )
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
        self._settle()  # (the worker may still be reading the file)
        self._ahead = None
        self._fh.close()


class _Ahead:
    """One call run in a worker thread; ``result()`` joins it and returns or raises."""

    def __init__(self, produce: Callable[[int], bytes], size: int) -> None:
        self._out: bytes = b""
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(produce, size), daemon=True, name="trace-read-ahead"
        )
        self._thread.start()

    def _run(self, produce: Callable[[int], bytes], size: int) -> None:
        try:
            self._out = produce(size)
        except BaseException as err:  # noqa: BLE001 - handed to the caller by result()
            self._error = err

    def wait(self) -> None:
        self._thread.join()

    def result(self) -> bytes:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._out


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


def leading_events(
    add_piece: Callable[[bytes], None], data: bytes, *, need_comma: bool, tries: int = MAX_CUT_TRIES
) -> Cut:
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
        if need_comma and data[pos + 1 : pos + 65].lstrip(_WS)[:1] != b",":
            limit = pos
            continue
        tries -= 1
        try:
            add_piece(b"".join((b"[", view[: pos + 1], b"]")))  # one copy
            return Cut(pos + 1)
        except RecursionError:  # somewhere in the piece: the repair path finds it
            return Cut(None, True)
        except msgspec.DecodeError as err:  # a } inside an event: try an earlier one
            hint = error_offset(err, 1)
            trouble = trouble or (hint is not None and hint < pos)  # bad content, not the cut
            limit = pos if hint is None else min(pos, max(hint, 0))
    return Cut(None, trouble)


_BETWEEN_EVENTS = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
BOUNDARY_SEARCH_BYTES = 4 << 20  # events are far smaller: a gap between two is found at once
BOUNDARY_FIRST_BYTES = 64 << 10  # the first window searched (then 8x larger, up to the above)
_PHASE_KEY = b'"ph"'
SAMPLES = 32  # windows read to estimate where the events' middle lies
SAMPLE_BYTES = 32 << 10


def events_middle(path: Path, start: int, size: int, share: float = 0.5) -> int:
    """The offset in ``[start, size)`` with ``share`` of the events before it (half: as many
    before as after), estimated from the density of ``"ph"`` keys in a few windows spread over
    the file: where events differ in size along the file (short ``M`` events first in a trace
    of many processes), the middle byte is not the middle event, and a split there leaves one
    half the longer job."""
    span = size - start
    step = span / SAMPLES
    counts = []
    try:
        with open(path, "rb") as fh:
            for k in range(SAMPLES):
                fh.seek(start + int(k * step))
                counts.append(fh.read(min(SAMPLE_BYTES, int(step) + 1)).count(_PHASE_KEY))
    except OSError:
        return start + span // 2
    total = sum(counts)
    if total == 0:
        return start + span // 2
    seen = 0.0
    for k, count in enumerate(counts):  # the window where half of the events are reached
        if seen + count >= total * share:
            within = (total * share - seen) / count
            return start + int((k + within) * step)
        seen += count
    return start + span // 2


def find_boundary(path: Path, offset: int, size: int) -> tuple[int, int] | None:
    """The first place at or after ``offset`` of a plain file that looks like the gap between
    two events (``},{``): (the offset after the ``}``, the offset of the ``{``), or None.
    Only a candidate: the text may sit inside a string or a nested array; the loader proves
    it by decoding up to it."""
    want = BOUNDARY_FIRST_BYTES
    try:
        with open(path, "rb") as fh:
            while True:  # (a small window first: the gap is usually within a few events)
                fh.seek(offset)
                window = fh.read(max(0, min(want, size - offset)))
                match = _BETWEEN_EVENTS.search(window)
                if match is not None or want >= BOUNDARY_SEARCH_BYTES or len(window) < want:
                    break
                want *= 8
    except OSError:
        return None
    if match is None:
        return None
    return offset + match.start() + 1, offset + match.end() - 1


def decode_top(text: bytes) -> dict[str, msgspec.Raw]:
    return msgspec.json.decode(text, type=dict[str, msgspec.Raw])
