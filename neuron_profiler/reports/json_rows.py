"""A JSON array of like objects (one per device) held as columns, encoded without a Python
dict per object.

A report of 60,000 device queues writes two such arrays of 60,000 objects, each holding
nested objects: built as dicts (a Python loop over the devices), encoded, then freed, they cost
~0.8 s of a 3.6 s ``analyze --json``. :class:`Rows` keeps the columns instead; an encoder
meets it in its ``enc_hook`` (:func:`encodable`) and gets the rows as msgspec Structs made
column-wise by ``map`` (no Python frame per row), which it writes as the objects, keys in the
same order, values the same: the bytes are those of the dicts (:meth:`Rows.dicts`, for callers
that want the objects).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Union

import msgspec

# A column: the rows' values in order, or the columns of an object nested in each row.
Column = Union[list[Any], "dict[str, Column]"]


class Rows:
    """``count`` objects with the keys of ``columns`` in their order, each key's value the
    row's entry of its column. (Not a dataclass: msgspec would encode its fields.)"""

    __slots__ = ("count", "columns")

    def __init__(self, count: int, columns: dict[str, Column]) -> None:
        self.count = count
        self.columns = columns

    def dicts(self) -> list[dict[str, Any]]:
        return _dicts(self.columns, self.count)

    def encodable(self) -> list[msgspec.Struct]:
        """The rows as Structs that msgspec encodes as :meth:`dicts` would be."""
        return _structs(self.columns, self.count)


def _dicts(columns: dict[str, Column], count: int) -> list[dict[str, Any]]:
    if not columns:
        return [{} for _ in range(count)]
    keys = tuple(columns)
    values = [_dicts(c, count) if isinstance(c, dict) else c for c in columns.values()]
    return [dict(zip(keys, row, strict=True)) for row in zip(*values, strict=True)]


def _structs(columns: dict[str, Column], count: int) -> list[msgspec.Struct]:
    values = [_structs(c, count) if isinstance(c, dict) else c for c in columns.values()]
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
