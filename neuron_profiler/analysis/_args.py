"""Decode a few args keys for many rows in one msgspec pass (no per-row ``trace.args`` calls).

values = arg_values(trace, rows, (V.ARG_FLOPS, V.ARG_DTYPE))   # {key: list per row}
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np

from neuron_profiler.analysis._intervals import distinct
from neuron_profiler.trace import schema as S
from neuron_profiler.trace.model import Trace

_BATCH = 200_000  # rows per decode: bounds the joined buffer
_SPARSE = 4  # keys found more often than in 1/_SPARSE of the rows: every row is decoded


@lru_cache(maxsize=32)
def _decoder(keys: tuple[str, ...]) -> msgspec.json.Decoder:
    struct = msgspec.defstruct(
        "_Picked",
        [(f"k{i}", Any, msgspec.field(name=key, default=None)) for i, key in enumerate(keys)],
    )
    return msgspec.json.Decoder(list[struct])


def arg_values(trace: Trace, rows: np.ndarray, keys: Sequence[str]) -> dict[str, np.ndarray]:
    """The value of each key per row, as object arrays (None where the row has no args or not
    the key). Only the rows whose args may hold a key are decoded (``_may_hold``)."""
    keys = tuple(keys)
    out = {k: np.full(len(rows), None, dtype=object) for k in keys}
    args_rows = trace.col(S.ARGS_ROW)[np.asarray(rows, dtype=np.int64)]
    have = np.flatnonzero(args_rows >= 0)
    decode = _decoder(keys).decode
    raw = trace.raw_args
    for lo in range(0, len(have), _BATCH):
        part = have[lo : lo + _BATCH]
        texts = args_texts(raw, args_rows[part])
        joined = b",".join(texts)
        maybe = _may_hold(joined, texts, keys)
        if maybe is not None:
            part = part[maybe]
            joined = b",".join([texts[i] for i in maybe.tolist()])
        if len(part) == 0:
            continue
        decoded = decode(b"[" + joined + b"]")
        for i, key in enumerate(keys):
            out[key][part] = list(map(attrgetter(f"k{i}"), decoded))
    return out


def _may_hold(joined: bytes, texts: list[bytes], keys: tuple[str, ...]) -> np.ndarray | None:
    """Which of ``texts`` (``joined`` by commas) may hold one of ``keys``: those spelling one
    as a quoted key, and those holding a backslash (a key may be written with escapes). None:
    decode them all (over 1/_SPARSE of them do: finding each would cost more than it saves)."""
    limit = len(texts) // _SPARSE
    hits: list[int] = []
    for needle in (b"\\", *(b'"' + k.encode() + b'"' for k in keys)):
        at = joined.find(needle)
        while at >= 0:
            hits.append(at)
            if len(hits) > limit:
                return None
            at = joined.find(needle, at + len(needle))
    lengths = np.fromiter(map(len, texts), np.int64, len(texts)) + 1  # (each with its comma)
    starts = np.cumsum(lengths) - lengths
    return distinct(np.searchsorted(starts, np.array(hits, np.int64), side="right") - 1)


def as_float(values: np.ndarray) -> np.ndarray:
    """Each value as a float, NaN where it is missing or not a number (a hostile ``bytes``
    string, a bool). Plain ints and floats (with absent values) are converted in one call."""
    values = np.asarray(values, dtype=object)
    out = np.full(len(values), np.nan)
    present = np.flatnonzero(values != None)  # noqa: E711 - elementwise, not identity
    kinds = set(map(type, values[present]))
    if kinds <= {int, float}:
        out[present] = np.fromiter(values[present], dtype=np.float64, count=len(present))
        return out
    return np.fromiter((_float_or_nan(v) for v in values), dtype=np.float64, count=len(values))


def first_number(values: dict[str, np.ndarray], keys: Sequence[str]) -> np.ndarray:
    """One number per row from the first of ``keys`` that holds a number there (NaN: none
    does), e.g. a transfer's size under either spelling of its bytes key. ``values``: what
    ``arg_values`` decoded for those keys (and maybe others)."""
    out = np.full(len(values[keys[0]]), np.nan)
    for key in reversed(keys):  # the first key wins where several hold a number
        number = as_float(values[key])
        out = np.where(np.isnan(number), out, number)
    return out


def _float_or_nan(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return float("nan")
    return float(value)


def args_texts(raw: Sequence[bytes], index: np.ndarray) -> list[bytes]:
    """``[raw[i] for i in index]``, sliced a buffer at a time when ``raw`` is the loader's
    buffer-backed sequence (no per-entry lookup of its buffer)."""
    buffers = getattr(raw, "_buffers", None)
    if buffers is None:
        return [raw[i] for i in index.tolist()]
    first = np.asarray(raw._first, dtype=np.int64)  # type: ignore[attr-defined]
    starts = raw._starts[index]  # type: ignore[attr-defined]
    ends = (starts + raw._lengths[index]).tolist()  # type: ignore[attr-defined]
    which = (np.searchsorted(first, index, side="right") - 1).tolist()
    return [buffers[b][s:e] for b, s, e in zip(which, starts.tolist(), ends, strict=True)]


def args_spelling(raw: Sequence[bytes], index: np.ndarray, key: str) -> np.ndarray:
    """Which of ``raw[index]`` contain ``"key"`` (the quoted key text): a cheap filter before
    decoding. Searches whole buffers when ``raw`` is buffer-backed."""
    needle = b'"' + key.encode() + b'"'
    buffers = getattr(raw, "_buffers", None)
    if buffers is None:
        return np.fromiter((needle in raw[i] for i in index.tolist()), bool, len(index))
    hits = np.zeros(len(raw), dtype=bool)
    bounds = [*raw._first, len(raw)]  # type: ignore[attr-defined]
    prefix = needle[:-1]  # (searched without its closing quote: ~1.5x faster over JSON text,
    # where a quote is frequent and CPython's search tests a needle's last byte first)
    for b, buffer in enumerate(buffers):
        found = _positions(buffer, prefix)
        if len(found):
            after = np.minimum(found + len(prefix), len(buffer) - 1)
            found = found[np.frombuffer(buffer, np.uint8)[after] == _QUOTE]
            lo, hi = bounds[b], bounds[b + 1]
            entry = np.searchsorted(raw._starts[lo:hi], found, side="right") - 1  # type: ignore[attr-defined]
            hits[lo + entry[entry >= 0]] = True
    return hits[index]


_QUOTE = ord('"')


def _positions(buffer: bytes, needle: bytes) -> np.ndarray:
    """Offsets of ``needle`` in ``buffer`` (non-overlapping; a quoted key cannot overlap itself
    in valid JSON), from the lengths of the pieces between them: one C-level split instead of
    a ``find`` call per hit."""
    if needle not in buffer:
        return np.zeros(0, dtype=np.int64)
    gaps = np.fromiter(map(len, buffer.split(needle)), dtype=np.int64)[:-1]
    return np.cumsum(gaps + len(needle)) - len(needle)
