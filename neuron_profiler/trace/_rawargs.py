"""Raw JSON args of millions of events, stored as a few big buffers plus offsets.

A ``list[bytes]`` costs ~40 bytes of object header per event on top of the text; this sequence
keeps the loader's decoded pieces as they are and slices on access. It behaves like the
``list[bytes]`` the ``Trace`` model documents (indexing, ``len``, iteration, slicing)::

    store = RawArgsBuilder(); store.add(b'{"a":1},{"b":2}', starts, lengths); args = store.build()
    args[1]  # -> b'{"b":2}'
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np


class RawArgs(Sequence[bytes]):
    """Immutable sequence of JSON-encoded args objects backed by shared buffers."""

    __slots__ = ("_buffers", "_first", "_starts", "_lengths")

    def __init__(
        self, buffers: list[bytes], first: list[int], starts: np.ndarray, lengths: np.ndarray
    ) -> None:
        self._buffers = buffers
        self._first = first  # global index of each buffer's first entry
        self._starts = starts
        self._lengths = lengths

    def __len__(self) -> int:
        return len(self._starts)

    @overload
    def __getitem__(self, index: int) -> bytes: ...

    @overload
    def __getitem__(self, index: slice) -> list[bytes]: ...

    def __getitem__(self, index: int | slice) -> bytes | list[bytes]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        i = int(index)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("args row out of range")
        start = int(self._starts[i])
        buffer = self._buffers[bisect.bisect_right(self._first, i) - 1]
        return buffer[start : start + int(self._lengths[i])]

    def __iter__(self) -> Iterator[bytes]:
        bounds = [*self._first, len(self)]
        for index, buffer in enumerate(self._buffers):  # a buffer at a time: no bisect per entry
            lo, hi = bounds[index], bounds[index + 1]
            starts = self._starts[lo:hi]
            ends = (starts + self._lengths[lo:hi]).tolist()
            yield from [buffer[s:e] for s, e in zip(starts.tolist(), ends, strict=True)]

    def __repr__(self) -> str:
        return f"RawArgs({len(self)} entries in {len(self._buffers)} buffers)"

    @property
    def nbytes(self) -> int:
        """Memory held: buffers plus offset arrays."""
        return sum(map(len, self._buffers)) + self._starts.nbytes + self._lengths.nbytes


class RawArgsBuilder:
    """Collects ``(buffer, starts, lengths)`` pieces; ``build()`` returns the ``RawArgs``."""

    def __init__(self) -> None:
        self._buffers: list[bytes] = []
        self._first: list[int] = []
        self._starts: list[np.ndarray] = []
        self._lengths: list[np.ndarray] = []
        self.count = 0

    def add(self, buffer: bytes, starts: np.ndarray, lengths: np.ndarray) -> int:
        """Append entries ``buffer[starts[i]:starts[i]+lengths[i]]``; returns the first index."""
        first = self.count
        if len(starts):
            self._buffers.append(buffer)
            self._first.append(first)
            self._starts.append(starts.astype(np.int64, copy=False))
            self._lengths.append(lengths.astype(np.int32, copy=False))
            self.count += len(starts)
        return first

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled with its buffers as numpy views of the bytes: pickle protocol 5 can then
        hand them over out of band (the split load's child, ``forked.py``), as one copy."""
        views = [np.frombuffer(buffer, dtype=np.uint8) for buffer in self._buffers]
        return _builder, (views, self._first, self._starts, self._lengths, self.count)

    def extend(self, other: RawArgsBuilder) -> int:
        """Append every entry of ``other`` (no copy of its buffers); returns the index its
        first entry now has."""
        first = self.count
        self._buffers.extend(other._buffers)
        self._first.extend(f + first for f in other._first)
        self._starts.extend(other._starts)
        self._lengths.extend(other._lengths)
        self.count += other.count
        return first

    def build(self) -> RawArgs:
        starts = np.concatenate(self._starts) if self._starts else np.zeros(0, np.int64)
        lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, np.int32)
        return RawArgs(self._buffers, self._first, starts, lengths)


def _builder(
    views: list[np.ndarray],
    first: list[int],
    starts: list[np.ndarray],
    lengths: list[np.ndarray],
    count: int,
) -> RawArgsBuilder:
    """A pickled ``RawArgsBuilder`` rebuilt, its buffers bytes again (``RawArgs`` slices them)."""
    builder = RawArgsBuilder()
    builder._buffers = [view.tobytes() for view in views]
    builder._first, builder._starts, builder._lengths = first, starts, lengths
    builder.count = count
    return builder
