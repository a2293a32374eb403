"""The args of a trace's ``M`` events, kept as their JSON text and decoded when first read.

A metadata-heavy trace holds hundreds of thousands of ``M`` events (five per device queue,
60,000 queues in one real shape). The loader needs only two values of their args, ``name`` and
``sort_index`` (the name and sort-index dicts); every other key is read only by an export. So
the loader decodes the args of a piece typed (``ViewArgs``: the two values, other keys skipped,
about twice as fast as a dict each) and keeps the text, one buffer per piece, which
``MetaArgs`` decodes into dicts a piece at a time when one is first read (tens of bytes an
event, against a dict's hundreds).

msgspec validates what it skips (syntax, escapes, control characters) except two things a dict
decode refuses: a float beyond float64's range (``1e400``) and bytes that are not UTF-8
(``plain`` finds where either could be). The loader keeps the text only where neither can be:
elsewhere it decodes the dicts at once and repairs them as before.

    args = MetaArgs([LazyDicts(b'[{"name":"a"},{}]', 2), [{"sort_index": 1}]])
    args[2]  # -> {"sort_index": 1}
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from typing import Any

import msgspec

_decode_dicts = msgspec.json.Decoder(list[dict]).decode
# Text as classes of bytes (digits "0", exponent letters "e", the rest "x"), where a number
# float64 may not hold (its largest is ~1.8e308) shows: a digit before an exponent, or 300
# digits in a row; anything else in valid JSON is an int or a float in range. (One translate
# and two substring searches: a regex over the same text takes ~20x as long.)
_CLASSES = bytes(
    ord("0") if chr(b).isdigit() and b < 128 else ord("e") if chr(b) in "eE" else ord("x")
    for b in range(256)
)
_RANGE_RISKS = (b"0e", b"0" * 300)


class ViewArgs(msgspec.Struct, gc=False):
    """The args values the name and sort-index dicts read, as a dict's ``.get`` gives them:
    ``name`` "" and ``sort_index`` None when absent (``model.view_values``' defaults)."""

    name: Any = ""
    sort_index: Any = None


decode_view_args = msgspec.json.Decoder(list[ViewArgs]).decode


def plain(text: bytes) -> bool:
    """Does every decoder read ``text`` (JSON already validated by a typed decode) alike: no
    number float64 may not hold, nothing that is not UTF-8?"""
    if not text.isascii():
        try:
            text.decode("utf-8")
        except UnicodeDecodeError:
            return False
    classes = text.translate(_CLASSES)
    return not any(risk in classes for risk in _RANGE_RISKS)


class LazyDicts:
    """``count`` args objects as one JSON array's text, decoded on first read (then kept)."""

    __slots__ = ("_text", "_count", "_dicts")

    def __init__(self, text: bytes, count: int) -> None:
        self._text = text
        self._count = count
        self._dicts: list[dict[str, Any]] | None = None

    def __len__(self) -> int:
        return self._count

    def dicts(self) -> list[dict[str, Any]]:
        if self._dicts is None:  # (two threads may both decode: the same dicts either way)
            self._dicts = _decode_dicts(self._text)
        return self._dicts


Part = list[dict[str, Any]] | LazyDicts


class MetaArgs(Sequence[dict[str, Any]]):
    """The args of every ``M`` event in file order, from parts (one per piece) that are either
    decoded dicts or ``LazyDicts``; reads like a ``list[dict]``."""

    __slots__ = ("_parts", "_first")

    def __init__(self, parts: list[Part]) -> None:
        self._parts = [p for p in parts if len(p)]
        self._first: list[int] = []
        total = 0
        for part in self._parts:
            self._first.append(total)
            total += len(part)
        self._first.append(total)

    def __len__(self) -> int:
        return self._first[-1]

    def __getitem__(self, index: int) -> dict[str, Any]:  # type: ignore[override]
        i = int(index)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("metadata event out of range")
        k = bisect.bisect_right(self._first, i) - 1
        return _dicts(self._parts[k])[i - self._first[k]]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for part in self._parts:
            yield from _dicts(part)

    def __repr__(self) -> str:
        return f"MetaArgs({len(self)} entries in {len(self._parts)} parts)"


def _dicts(part: Part) -> list[dict[str, Any]]:
    return part.dicts() if isinstance(part, LazyDicts) else part
