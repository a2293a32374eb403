"""Vectorised protobuf wire encoding: many messages of one layout at once, from numpy columns.

    inner = FixedRows(n); inner.varint(11, track_uuid); inner.fixed64(47, flow_ids)
    rows = FixedRows(n); rows.varint(8, ts_ns); rows.message(11, inner)
    framed = FixedRows(n); framed.message(1, rows)            # Trace.packet framing
    out = np.empty(total, np.uint8)
    scatter_rows(out, row_offsets, framed.matrix())           # each row to its byte offset
    wire = interleave([(row_index, framed.matrix()), ...], n)  # or: layouts merged in row order

Why: the perfetto package builds one Python object per packet (about 0.2M packets/s here).
Giving every message of a layout the same byte layout (each varint padded to the widest value of
its column) makes a layout one (rows, width) byte matrix: a template row of its constant bytes,
then one strided write per varying column. Rows go to their byte offsets (a cumulative sum of
row sizes) in one copy through a view of the output in which row i starts at byte i, so rows of
different widths are never padded to a common width and compacted byte by byte. Field numbers
come from perfetto's own generated protos (see ``perfetto.py``), never typed in twice.

Rows may end with a variable-length blob of already-encoded fields (``tail``, e.g. args encoded
in Python): it is the last field of every enclosing message, which protobuf allows (field order
is free), and only changes the length values, not the layout.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

WIRE_VARINT, WIRE_FIXED64, WIRE_LEN = 0, 1, 2


def tag(field: int, wire_type: int) -> bytes:
    """The encoded key of one field."""
    return encode_varint((field << 3) | wire_type)


SMALL_VARINTS = [bytes([i]) for i in range(128)]  # 0..127 encode as themselves


def encode_varint(value: int) -> bytes:
    """One varint (negative ints as 64-bit two's complement, as protobuf's int64 does)."""
    if 0 <= value < 128:
        return SMALL_VARINTS[value]
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varint_size(value: int) -> int:
    """Bytes a non-negative value takes as a varint (1..10)."""
    return max(1, -(-value.bit_length() // 7))


_U64 = np.uint64
# spread the low 56 bits of a uint64 into eight 7-bit groups, one per byte (a pdep in numpy):
# 28-bit halves to 32-bit lanes, 14-bit quarters to 16-bit lanes, 7-bit groups to bytes
_SPREAD = [
    (_U64(0x000000000FFFFFFF), _U64(0x00FFFFFFF0000000), _U64(4)),
    (_U64(0x00003FFF00003FFF), _U64(0x0FFFC0000FFFC000), _U64(2)),
    (_U64(0x007F007F007F007F), _U64(0x3F803F803F803F80), _U64(1)),
]
_LOW56 = _U64((1 << 56) - 1)
_U32 = np.uint32
# the same for the low 28 bits into four bytes of a uint32
_SPREAD32 = [
    (_U32(0x00003FFF), _U32(0x0FFFC000), _U32(2)),
    (_U32(0x007F007F), _U32(0x3F803F80), _U32(1)),
]
_LOW28 = _U64((1 << 28) - 1)
_CONTINUATION = _U64(0x8080808080808080)


def _varint_groups(values: np.ndarray, k: int) -> np.ndarray:
    """The low k <= 8 7-bit groups of each value, one per byte (little-endian), continuation
    bits set: a uint32 for k <= 4 (half the memory traffic), else a uint64."""
    if k <= 4:
        x = (values & _LOW28).astype(np.uint32)
        for keep, move, shift in _SPREAD32:
            x = (x & keep) | ((x & move) << shift)
        return x | np.uint32(0x80808080 & ((1 << (8 * k)) - 1))
    x = values & _LOW56
    for keep, move, shift in _SPREAD:
        moved = x & move
        x &= keep
        x |= moved << shift
    return x | (_CONTINUATION & _U64((1 << (8 * k)) - 1))


def _high_groups(values: np.ndarray, k: int) -> np.ndarray:
    """Groups 8.. k-1 (k = 9 or 10) of each value, one per byte, continuation bits set."""
    out = np.zeros(len(values), dtype=np.uint64)
    for j in range(k - 8):
        group = (values >> _U64(7 * (8 + j))) & _U64(0x7F)
        out |= (group | _U64(0x80)) << _U64(8 * j)
    return out


class _Word:
    """A varying block of ``width`` <= 8 bytes: each row's bytes are the low ``width`` bytes of
    its unsigned integer (little-endian), so a block is written as strided integer columns, not
    as a (rows, width) byte matrix (numpy copies those a few bytes at a time: 20x slower)."""

    def __init__(self, values: np.ndarray, width: int) -> None:
        self.values = values
        self.width = width


_Block = _Word | bytes


def _padded_varint_parts(values: np.ndarray) -> tuple[list[_Word], bytes]:
    """Every value as a k-byte varint, k = the widest value's size, split into its varying low
    bytes (words of up to 8 bytes) and the bytes every row shares.

    Smaller values carry redundant 0x80 groups: a valid, non-canonical varint every protobuf
    parser reads (protozero and upb included), which gives every row the same layout.
    """
    top = int(values.max()) if len(values) else 0
    width = varint_size(top)
    if width == 1:
        return [_Word(values, 1)], b""
    # groups that every value shares (e.g. the high bits of nearby timestamps) are one constant
    low = int(values.min())
    varying = width
    while varying > 1 and (low >> (7 * (varying - 1))) == (top >> (7 * (varying - 1))):
        varying -= 1
    words = [_Word(_varint_groups(values, min(varying, 8)), min(varying, 8))]
    if varying > 8:
        words.append(_Word(_high_groups(values, varying), varying - 8))
    if varying == width:  # the last group ends the varint
        last = words[-1]
        keep = ((1 << (8 * last.width)) - 1) ^ (0x80 << (8 * (last.width - 1)))
        last.values &= last.values.dtype.type(keep)
        return words, b""
    # the shared high groups are the canonical varint of top >> (7 * varying): width - varying
    # bytes, since width is top's own size
    return words, encode_varint(top >> (7 * varying))


class FixedRows:
    """``n`` messages with the same fields and the same byte layout (varints padded per column),
    so the wire bytes are a plain (n, width) matrix: no per-byte masks to compact. Rows may
    still differ in a trailing blob's size (``tail``), which only changes length values."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.blocks: list[_Block] = []  # bytes: the same on every row
        self.width = 0
        self.tail_sizes: np.ndarray | int = 0

    def _add(self, block: _Block) -> None:
        self.blocks.append(block)
        self.width += len(block) if isinstance(block, bytes) else block.width

    def raw(self, data: bytes) -> None:
        self._add(bytes(data))

    def words(self, values: np.ndarray, width: int) -> None:
        """Per-row raw bytes: the low ``width`` <= 8 bytes of each uint64 (little-endian)."""
        self._word(_Word(np.asarray(values, dtype=np.uint64), width))

    def _word(self, word: _Word) -> None:
        """A varying block, or its bytes when every row has the same ones."""
        v = word.values
        if self.n and word.width <= 2 and int(v.min()) == int(v.max()):
            self._add((int(v[0]) & ((1 << (8 * word.width)) - 1)).to_bytes(word.width, "little"))
        else:
            self._add(word)

    def _varint_column(self, values: np.ndarray) -> None:
        words, shared = _padded_varint_parts(values)
        for word in words:
            self._word(word)
        if shared:
            self.raw(shared)

    def varint(self, field: int, values: np.ndarray) -> None:
        self.raw(tag(field, WIRE_VARINT))
        self._varint_column(np.asarray(values).astype(np.uint64))

    def fixed64(self, field: int, values: np.ndarray) -> None:
        self.raw(tag(field, WIRE_FIXED64))
        self._add(_Word(np.asarray(values).astype(np.uint64, copy=False), 8))

    def double(self, field: int, values: np.ndarray) -> None:
        self.fixed64(field, np.ascontiguousarray(values, dtype="<f8").view("<u8"))

    def message(self, field: int, inner: FixedRows) -> None:
        """A nested message on every row (its trailing blob sizes carry over)."""
        self.raw(tag(field, WIRE_LEN))
        length = np.asarray(inner.tail_sizes, dtype=np.int64) + inner.width
        if length.ndim == 0:  # no per-row tails: one length for all rows
            self.raw(encode_varint(int(length)))
        else:
            self._varint_column(length.astype(np.uint64))
        self.blocks += inner.blocks
        self.width += inner.width
        self.tail_sizes = self.tail_sizes + inner.tail_sizes

    def tail(self, sizes: np.ndarray) -> None:
        """Declare per-row trailing bytes (written by the caller right after each row)."""
        self.tail_sizes = self.tail_sizes + np.asarray(sizes, dtype=np.int64)

    def matrix(self) -> np.ndarray:
        """The (n, width) bytes: a template row of the constant bytes, then each varying block
        as integer columns of 8, 4, 2 or 1 bytes (a structured view of the rows)."""
        template = np.zeros(self.width, dtype=np.uint8)
        names, formats, offsets, columns = [], [], [], []
        at = 0
        for block in self.blocks:
            if isinstance(block, bytes):
                template[at : at + len(block)] = np.frombuffer(block, dtype=np.uint8)
                at += len(block)
                continue
            done = 0
            while done < block.width:
                size = _PIECE[block.width - done]
                names.append(f"f{len(names)}")
                formats.append(f"<u{size}")
                offsets.append(at + done)
                columns.append(block.values >> _U64(8 * done) if done else block.values)
                done += size
            at += block.width
        out = _repeated(template, self.n)
        if names and self.n:
            layout = np.dtype(
                {"names": names, "formats": formats, "offsets": offsets, "itemsize": self.width}
            )
            rows = out.view(layout)[:, 0]
            for name, column in zip(names, columns, strict=True):
                rows[name] = column  # integer casts wrap: the low bytes
        return out


_PIECE = [0, 1, 2, 2, 4, 4, 4, 4, 8]  # widest integer column fitting in k remaining bytes


def _repeated(row: np.ndarray, n: int) -> np.ndarray:
    """(n, len(row)) copies of ``row``, by doubling copies (memcpy speed, few calls)."""
    width = len(row)
    flat = np.empty(n * width, dtype=np.uint8)
    if n and width:
        flat[:width] = row
        done = width
        while done < len(flat):
            step = min(done, len(flat) - done)
            flat[done : done + step] = flat[:step]
            done += step
    return flat.reshape(n, width)


def _void_rows(buffer: np.ndarray, width: int) -> np.ndarray:
    """A view of ``buffer`` as overlapping ``width``-byte items: item i starts at byte i."""
    rows = as_strided(buffer, shape=(len(buffer) - width + 1, width), strides=(1, 1))
    return rows.view(np.dtype((np.void, width)))[:, 0]


def scatter_rows(out: np.ndarray, starts: np.ndarray, matrix: np.ndarray) -> None:
    """Copy row i of ``matrix`` to ``out[starts[i]:starts[i] + width]`` (one copy for all rows;
    the target ranges must not overlap)."""
    count, width = matrix.shape
    if count == 0 or width == 0:
        return
    items = np.ascontiguousarray(matrix).view(np.dtype((np.void, width)))[:, 0]
    _void_rows(out, width)[starts] = items


def scatter_blobs(out: np.ndarray, starts: np.ndarray, data: np.ndarray, sizes: np.ndarray) -> None:
    """Copy blob i (``sizes[i]`` bytes of ``data``, in order) to ``out[starts[i]:]``."""
    if len(data) == 0:
        return
    before = np.cumsum(sizes) - sizes
    out[np.repeat(starts - before, sizes) + np.arange(len(data))] = data


def interleave(
    rows: list[tuple[np.ndarray, np.ndarray]],
    n: int,
    tails: tuple[np.ndarray, list[bytes]] | None = None,
) -> bytes:
    """Join row matrices of different widths into one stream in row order.

    ``rows``: (row indices, (len, width) matrix) per layout; ``tails``: (rows ascending, blobs)
    appended right after those rows' bytes.
    """
    sizes = np.zeros(n, dtype=np.int64)
    for index, matrix in rows:
        sizes[index] = matrix.shape[1]
    tail_rows, blobs = tails if tails is not None else (np.zeros(0, dtype=np.int64), [])
    tail_sizes = np.array([len(b) for b in blobs], dtype=np.int64)
    sizes[tail_rows] += tail_sizes
    offsets = np.cumsum(sizes) - sizes
    out = np.empty(int(sizes.sum()), dtype=np.uint8)
    for index, matrix in rows:
        scatter_rows(out, offsets[index], matrix)
    data = np.frombuffer(b"".join(blobs), dtype=np.uint8)
    scatter_blobs(out, offsets[tail_rows] + sizes[tail_rows] - tail_sizes, data, tail_sizes)
    return out.tobytes()
