"""Vectorised protobuf wire encoding: many messages of one layout at once, from numpy columns.

    inner = FixedRows(n); inner.varint(11, track_uuid); inner.fixed64(47, flow_ids)
    rows = FixedRows(n); rows.varint(8, ts_ns); rows.message(11, inner)
    framed = FixedRows(n); framed.message(1, rows)            # Trace.packet framing
    wire = interleave([(row_index, framed.matrix()), ...], n)  # several layouts, in row order

Why: the perfetto package builds one Python object per packet (about 0.2M packets/s here).
Giving every message of a layout the same byte layout (each varint padded to the widest value of
its column) makes a layout one (rows, width) byte matrix built column block by column block;
``interleave`` merges the layouts' rows back in order. Field numbers come from perfetto's own
generated protos (see ``perfetto.py``), never typed in twice.

Rows may end with a variable-length blob of already-encoded fields (``tail``, e.g. args encoded
in Python): it is the last field of every enclosing message, which protobuf allows (field order
is free), and only changes the length values, not the layout.
"""

from __future__ import annotations

import numpy as np

WIRE_VARINT, WIRE_FIXED64, WIRE_LEN = 0, 1, 2
_THRESHOLDS = [np.uint64(1) << np.uint64(7 * k) for k in range(1, 10)]


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


def varint_sizes(values: np.ndarray) -> np.ndarray:
    """Bytes each uint64 value takes as a varint (1..10)."""
    sizes = np.ones(len(values), dtype=np.int64)
    top = int(values.max()) if len(values) else 0
    for threshold in _THRESHOLDS:
        if top < int(threshold):
            break
        sizes += values >= threshold
    return sizes


def _padded_varint_block(values: np.ndarray) -> np.ndarray:
    """(n, k) bytes: every value as a k-byte varint, k = the widest value's size.

    Smaller values carry redundant 0x80 groups: a valid, non-canonical varint every protobuf
    parser reads (protozero and upb included), which gives every row the same layout.
    """
    top = int(values.max()) if len(values) else 0
    width = int(varint_sizes(np.array([top], dtype=np.uint64))[0])
    if width == 1:
        return values.astype(np.uint8)[:, None]
    if width == 2:
        return np.stack([(values & np.uint64(0x7F)).astype(np.uint8) | 0x80,
                         (values >> np.uint64(7)).astype(np.uint8)], axis=1)
    # groups that every value shares (e.g. the high bits of nearby timestamps) are one constant
    low = int(values.min())
    varying = width
    while varying > 1 and (low >> (7 * (varying - 1))) == (top >> (7 * (varying - 1))):
        varying -= 1
    shifts = (np.arange(varying, dtype=np.uint64) * np.uint64(7))[None, :]
    block = ((values[:, None] >> shifts) & np.uint64(0x7F)).astype(np.uint8) | 0x80
    if varying == width:
        block[:, -1] &= 0x7F
        return block
    # the shared high groups are the canonical varint of top >> (7 * varying): width - varying
    # bytes, since width is top's own size
    shared = encode_varint(top >> (7 * varying))
    const = np.broadcast_to(np.frombuffer(shared, dtype=np.uint8), (len(values), len(shared)))
    return np.concatenate([block, const], axis=1)


class FixedRows:
    """``n`` messages with the same fields and the same byte layout (varints padded per column),
    so the wire bytes are a plain (n, width) matrix: no per-byte masks to compact. Rows may
    still differ in a trailing blob's size (``tail``), which only changes length values."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.blocks: list[np.ndarray] = []
        self.width = 0
        self.tail_sizes = np.zeros(n, dtype=np.int64)

    @property
    def length(self) -> np.ndarray:
        return self.tail_sizes + self.width

    def _add(self, block: np.ndarray) -> None:
        self.blocks.append(block)
        self.width += block.shape[1]

    def raw(self, data: bytes) -> None:
        self._add(np.broadcast_to(np.frombuffer(data, dtype=np.uint8), (self.n, len(data))))

    def varint(self, field: int, values: np.ndarray) -> None:
        self.raw(tag(field, WIRE_VARINT))
        self._add(_padded_varint_block(np.asarray(values).astype(np.uint64)))

    def fixed64(self, field: int, values: np.ndarray) -> None:
        self.raw(tag(field, WIRE_FIXED64))
        self._add(np.ascontiguousarray(values, dtype="<u8").view(np.uint8).reshape(self.n, 8))

    def double(self, field: int, values: np.ndarray) -> None:
        self.fixed64(field, np.ascontiguousarray(values, dtype="<f8").view("<u8"))

    def message(self, field: int, inner: FixedRows) -> None:
        """A nested message on every row (its trailing blob sizes carry over)."""
        self.raw(tag(field, WIRE_LEN))
        self._add(_padded_varint_block(inner.length.astype(np.uint64)))
        self.blocks += inner.blocks
        self.width += inner.width
        self.tail_sizes = self.tail_sizes + inner.tail_sizes

    def tail(self, sizes: np.ndarray) -> None:
        """Declare per-row trailing bytes (written by the caller right after each row)."""
        self.tail_sizes = self.tail_sizes + np.asarray(sizes, dtype=np.int64)

    def matrix(self) -> np.ndarray:
        return np.concatenate(self.blocks, axis=1) if self.blocks else np.zeros((self.n, 0),
                                                                               np.uint8)


def interleave(rows: list[tuple[np.ndarray, np.ndarray]], n: int,
               tails: tuple[np.ndarray, list[bytes]] | None = None) -> bytes:
    """Join row matrices of different widths into one stream in row order.

    ``rows``: (row indices, (len, width) matrix) per layout; ``tails``: (rows ascending, blobs)
    appended right after those rows' bytes.
    """
    width = max((m.shape[1] for _, m in rows), default=0)
    sizes = np.zeros(n, dtype=np.int64)
    grid = np.empty((n, width), dtype=np.uint8)  # only the used prefix of each row is read
    for index, matrix in rows:
        grid[index, : matrix.shape[1]] = matrix
        sizes[index] = matrix.shape[1]
    head = grid[np.arange(width)[None, :] < sizes[:, None]].tobytes()
    if tails is None or len(tails[0]) == 0:
        return head
    ends = np.cumsum(sizes)[tails[0]].tolist()
    view, parts, done = memoryview(head), [], 0
    for end, blob in zip(ends, tails[1], strict=True):
        parts.append(view[done:end])
        parts.append(blob)
        done = end
    parts.append(view[done:])
    return b"".join(parts)
