"""A JSON array of like objects (one per device) held as columns, encoded without a Python
object per row or per number.

A report of 60,000 device queues writes two such arrays of 60,000 objects, each holding
nested objects and ~3 million numbers in all: built as dicts, or as msgspec Structs of Python
numbers, they cost ~0.5 s of a 2.6 s ``analyze --json`` (``tolist``, the encoder's walk, the
frees). :class:`Rows` keeps the columns instead (numpy arrays, 1-D for a value per row, 2-D for
a list per row, or lists); an encoder meets it in its ``enc_hook`` (:meth:`Rows.encodable`),
which writes the array's compact JSON at once (:func:`_columns_text`): each column's values
are encoded by msgspec as one list and split at its commas, and the rows are laid out side by
side as a byte matrix (numpy), the keys and brackets between values written down its columns.
The bytes are those of the dicts (:meth:`Rows.dicts`, for callers that want the objects): the
same keys in the same order, the very texts msgspec writes for the same Python values. Columns
of other kinds (lists of numbers, None, bools) take the path of before: msgspec Structs made
column-wise by ``map`` (no Python frame per row).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from functools import lru_cache
from itertools import islice
from typing import Any, Union

import msgspec
import numpy as np

from neuron_profiler.forked import usable_cores

# A column: the rows' values in order, or the columns of an object nested in each row.
Column = Union[list[Any], np.ndarray, "dict[str, Column]"]

_SEPARATOR = b"\x00"  # never in msgspec's text of a number or a string (it escapes NUL)
_NUMBER_KINDS = "iuf"  # numpy dtypes whose values tolist() as int / float

_encode = msgspec.json.encode
# Fewer rows than this take the Struct path: the column path costs ~7 µs a column (a trace of
# 2 devices over 3,000 steps: 50 ms where the Structs take 10), the Struct path ~0.1 µs a value.
MIN_COLUMN_ROWS = 256
CHUNK_ROWS = 2048  # rows laid out at a time: a matrix of ~1 MB, in cache, no fresh pages
PARALLEL_ROWS = 16_384  # rows laid out by two threads from this many (fewer: not worth a thread)
AHEAD = 3  # chunks laid out ahead of the one being written


class Rows:
    """``count`` objects with the keys of ``columns`` in their order, each key's value the
    row's entry of its column. (Not a dataclass: msgspec would encode its fields.)"""

    __slots__ = ("count", "columns")

    def __init__(self, count: int, columns: dict[str, Column]) -> None:
        self.count = count
        self.columns = columns

    def dicts(self) -> list[dict[str, Any]]:
        return _dicts(self.columns, self.count)

    def encodable(self) -> msgspec.Raw | list[msgspec.Struct]:
        """The rows as msgspec encodes :meth:`dicts`: their text, or Structs that write it."""
        text = _columns_text(self.columns, self.count)
        if text is not None:
            return msgspec.Raw(text)
        return _structs(self.columns, self.count)

    def text(self, depth: int) -> Iterator[bytes] | None:
        """The rows as ``msgspec.json.format(.., indent=1)`` writes them in an array opened at
        ``depth``, in pieces of whole rows, each laid out when asked for (to be written one
        after the other, never joined); None when they take the Struct path (then format
        :meth:`encodable`)."""
        return _columns_pieces(self.columns, self.count, depth)


def _listed(column: Column) -> list[Any]:
    return column.tolist() if isinstance(column, np.ndarray) else column


def _dicts(columns: dict[str, Column], count: int) -> list[dict[str, Any]]:
    if not columns:
        return [{} for _ in range(count)]
    keys = tuple(columns)
    values = [_dicts(c, count) if isinstance(c, dict) else _listed(c) for c in columns.values()]
    return [dict(zip(keys, row, strict=True)) for row in zip(*values, strict=True)]


def _structs(columns: dict[str, Column], count: int) -> list[msgspec.Struct]:
    values = [_structs(c, count) if isinstance(c, dict) else _listed(c) for c in columns.values()]
    if any(len(v) != count for v in values):
        raise ValueError(f"columns of {sorted({len(v) for v in values})} rows for {count}")
    row = _struct_type(tuple(columns))
    return list(map(row, *values)) if values else [row() for _ in range(count)]


@lru_cache(maxsize=64)
def _struct_type(keys: tuple[str, ...]) -> type[msgspec.Struct]:
    """A Struct encoded as an object of ``keys`` in order (any key text: fields are renamed);
    untracked by the garbage collector (rows hold numbers, strings and lists of numbers)."""
    fields = [f"f{k}" for k in range(len(keys))]
    return msgspec.defstruct(
        "Row", fields, rename=dict(zip(fields, keys, strict=True)), gc=False, frozen=True
    )


# A row as written: (text before the value, the column of values) in order, then the text that
# closes the row.
Slots = tuple[list[tuple[bytes, Any]], bytes]


def _columns_text(columns: dict[str, Column], count: int) -> bytes | None:
    """The rows' compact JSON array (:func:`_columns_pieces` joined)."""
    pieces = _columns_pieces(columns, count)
    return None if pieces is None else b"".join(pieces)


def _columns_pieces(
    columns: dict[str, Column], count: int, depth: int | None = None
) -> Iterator[bytes] | None:
    """The rows' JSON array, compact or indented as ``msgspec.json.format(.., indent=1)`` writes
    an array opened at ``depth``; None when a column is not one this path writes.

    The rows are laid out as a byte matrix, a row of it per row: the text between values (the
    same in every row, as are columns holding one value) written once down its columns, each
    varying column's texts as a block as wide as its longest, NUL-padded (numpy's ``S``
    arrays); the array's text is the matrix without its NULs (JSON text holds none). The matrix
    holds ``CHUNK_ROWS`` rows at a time: laid out whole (~40 MB for 60,000 devices) it costs
    twice as much, in fresh pages and memory traffic. The pieces are laid out as they are
    asked for, so a writer that writes each before asking for the next keeps a few chunks'
    memory at a time (held all at once, 60,000 devices' rows faulted in ~50 MB afresh)."""
    row_depth = None if depth is None else depth + 1
    flat = _slots(columns, row_depth) if count >= MIN_COLUMN_ROWS else None
    if flat is None:
        return None
    slots, tail = flat
    if any(len(c) != count for _, c in slots):
        raise ValueError(f"columns of {sorted({len(c) for _, c in slots})} rows for {count}")
    if count == 0:
        return iter([b"[]"])
    return _laid_out(slots, tail, count, row_depth, depth)


def _laid_out(
    slots: list[tuple[bytes, Any]],
    tail: bytes,
    count: int,
    row_depth: int | None,
    depth: int | None,
) -> Iterator[bytes]:
    """:func:`_columns_pieces`' text. ``PARALLEL_ROWS`` rows or more are laid out by two worker
    threads (numpy's copies, masks and scatters release the GIL: the meta shape's 60,000
    devices' two arrays in 0.19 s instead of 0.23), the columns' texts made side by side, and
    each chunk laid out ahead of the one being written (at most ``AHEAD`` held). The threads
    end with the text (or when it is dropped): a process with threads left running forks no
    child (``neuron_profiler.forked``)."""
    workers = None
    if count >= PARALLEL_ROWS and usable_cores() > 1:
        from concurrent.futures import ThreadPoolExecutor  # (~5 ms: not at every start)

        workers = ThreadPoolExecutor(2, "json-rows")
    try:
        columns = [column for _, column in slots]
        same_as = _first_equal(columns)  # (a device's busy and compute time are often equal)
        own = [k for k, j in enumerate(same_as) if j == k]
        wanted = [columns[k] for k in own]
        made = map(_row_texts, wanted) if workers is None else workers.map(_row_texts, wanted)
        texts_of = dict(zip(own, made, strict=True))
        texts = [texts_of[j] for j in same_as]
        pieces: list[bytes | np.ndarray] = [b""]  # the constant text before each block, then it
        for (before, _), text in zip(slots, texts, strict=True):
            if isinstance(text, bytes):  # the same in every row: part of the text before the next
                pieces[-1] += before + text
            else:
                pieces[-1] += before
                pieces += [text, b""]
        between = b"," + _line(row_depth)
        pieces[-1] += tail + between
        blocks = [
            np.frombuffer(p, np.uint8)[np.newaxis, :]
            if isinstance(p, bytes)
            else p.view(np.uint8).reshape(count, p.dtype.itemsize)
            for p in pieces
        ]
        layout = _Layout(blocks, count, len(between), _line(depth) + b"]")
        yield b"[" + _line(row_depth)
        if workers is None:
            yield from map(layout.chunk, range(0, count, CHUNK_ROWS))
            return
        starts = iter(range(0, count, CHUNK_ROWS))
        ahead = deque(workers.submit(layout.chunk, first) for first in islice(starts, AHEAD))
        while ahead:
            chunk = ahead.popleft().result()
            for first in islice(starts, 1):
                ahead.append(workers.submit(layout.chunk, first))
            yield chunk
    finally:
        if workers is not None:
            workers.shutdown(cancel_futures=True)


class _Layout:
    """Chunks of the rows' text: ``blocks`` side by side, ``CHUNK_ROWS`` rows at a time, the
    NULs dropped, the last row's ``cut`` bytes of separator replaced by ``close``. Each thread
    lays out its chunks in a matrix of its own, made once (no fresh pages per chunk)."""

    def __init__(self, blocks: list[np.ndarray], count: int, cut: int, close: bytes) -> None:
        self.blocks, self.count, self.cut, self.close = blocks, count, cut, close
        self.width = sum(b.shape[1] for b in blocks)
        self._matrix = threading.local()

    def chunk(self, first: int) -> bytes:
        matrix = getattr(self._matrix, "value", None)
        if matrix is None:
            matrix = np.empty((min(self.count, CHUNK_ROWS), self.width), np.uint8)
            self._matrix.value = matrix
        rows = slice(first, min(first + CHUNK_ROWS, self.count))
        part = matrix[: rows.stop - first]
        at = 0
        for block in self.blocks:  # (every byte of the matrix is written: no zeroing first)
            width = block.shape[1]
            part[:, at : at + width] = block if len(block) == 1 else block[rows]
            at += width
        text = part.reshape(-1)
        chunk = text[text != 0].tobytes()
        return chunk if rows.stop < self.count else chunk[: -self.cut] + self.close


def _first_equal(columns: list[Any]) -> list[int]:
    """Per column, the first column before it whose texts are its texts (itself when none):
    numpy columns of one dtype equal bit for bit (floats compared as their bits: -0.0 and 0.0
    are written differently, a NaN like itself), tested on their first and last values before
    the rest."""
    first: list[int] = []
    for k, column in enumerate(columns):
        earlier = (j for j in range(k) if first[j] == j and _written_alike(columns[j], column))
        first.append(next(earlier, k))
    return first


def _written_alike(a: Any, b: Any) -> bool:
    """Two non-empty numpy columns of one dtype and shape, equal bit for bit (the first and
    last values compared before the rest)."""
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and len(b)):
        return False
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    a, b = _bits(a), _bits(b)
    return bool(a[0] == b[0] and a[-1] == b[-1] and np.array_equal(a, b))


def _bits(column: np.ndarray) -> np.ndarray:
    """A float column viewed as integers of its size (compared bit for bit); others as they are."""
    return column.view(f"i{column.dtype.itemsize}") if column.dtype.kind == "f" else column


def _row_texts(column: Any) -> bytes | np.ndarray:
    """Each row's value as msgspec writes it (an ``S`` array), or that text when every row holds
    the same value. Floats are compared by their bits (-0.0 is not 0.0)."""
    if isinstance(column, list):  # strings
        body = _encode(column)[1:-1]
        if body.count(b",") != len(column) - 1:  # a string holds a comma: one at a time
            return np.array([_encode(s) for s in column], dtype=bytes)
        return _split_texts(body, len(column))
    if column.dtype.kind == "f":
        column = np.ascontiguousarray(column, np.float64)
    bits = _bits(column)
    if bool((bits == bits[0]).all()):
        return _encode(column[0].item())
    body = _encode(column.tolist())[1:-1]  # numbers hold no comma: split the list's text there
    return _split_texts(body, len(column))


_COMMA = ord(",")


def _split_texts(body: bytes, count: int) -> np.ndarray:
    """The ``count`` texts of a JSON list's body (none holding a comma of its own) as an ``S``
    array, each NUL-padded in a slot one byte wider than the longest, without a bytes object
    per text (``np.array(body.split(b","))`` took ~2x as long on 60,000 numbers): every byte
    is placed in one scatter, a text's comma into the spare byte of its slot, then cleared."""
    chars = np.frombuffer(body, np.uint8)
    starts = np.empty(count, np.int64)
    starts[0] = 0
    starts[1:] = np.flatnonzero(chars == _COMMA) + 1
    lengths = np.diff(starts, append=len(chars) + 1)  # each text and the comma after it
    slot = int(lengths.max())  # (the longest text and its comma, or one spare NUL)
    index = np.int32 if count * slot < 2**31 else np.int64
    out = np.zeros((count, slot), np.uint8)
    where = np.repeat((np.arange(count, dtype=index) * slot - starts).astype(index), lengths)
    where = where[: len(chars)]
    where += np.arange(len(chars), dtype=index)
    out.reshape(-1)[where] = chars
    out.reshape(-1)[np.arange(count - 1, dtype=np.int64) * slot + lengths[:-1] - 1] = 0  # commas
    return out.reshape(-1).view(f"S{slot}")


def _slots(columns: dict[str, Column], depth: int | None = None) -> Slots | None:
    """Each value of a row with the text before it (keys, braces, brackets, commas): compact,
    or as ``msgspec.json.format(.., indent=1)`` lays out an object opened at ``depth``."""
    if not columns:
        return [], b"{}"
    inner = None if depth is None else depth + 1
    slots: list[tuple[bytes, Any]] = []
    pending = b"{" + _line(inner)
    colon = b":" if depth is None else b": "
    for i, (key, column) in enumerate(columns.items()):
        pending += (b"," + _line(inner) if i else b"") + _encode(key) + colon
        if isinstance(column, dict):
            nested = _slots(column, inner)
            if nested is None:
                return None
            nested_slots, nested_tail = nested
            if nested_slots:
                slots.append((pending + nested_slots[0][0], nested_slots[0][1]))
                slots += nested_slots[1:]
                pending = nested_tail
            else:
                pending += nested_tail
        elif _is_numbers(column) and column.ndim == 2:
            if column.shape[1] == 0:
                pending += b"[]"
                continue
            item = _line(None if inner is None else inner + 1)
            for step in range(column.shape[1]):
                slots.append((pending + (b"," if step else b"[") + item, column[:, step]))
                pending = b""
            pending = _line(inner) + b"]"
        elif (_is_numbers(column) and column.ndim == 1) or _is_strings(column):
            slots.append((pending, column))
            pending = b""
        else:
            return None
    return slots, pending + _line(depth) + b"}"


def _line(depth: int | None) -> bytes:
    """What starts a line at ``depth`` (one space a level); nothing in compact JSON."""
    return b"" if depth is None else b"\n" + b" " * depth


def _is_numbers(column: Column) -> bool:
    return isinstance(column, np.ndarray) and column.dtype.kind in _NUMBER_KINDS


def _is_strings(column: Column) -> bool:
    # (the types gathered in one C pass: a generator's frame per row cost ~5 ms a column of
    # 60,000 device labels)
    return isinstance(column, list) and (not column or set(map(type, column)) == {str})
