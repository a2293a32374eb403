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


def args_spelling(raw: Sequence[bytes], index: np.ndarray, *keys: str) -> np.ndarray:
    """Which of ``raw[index]`` contain one of the ``keys`` as quoted text (``"key"``): a cheap
    filter before decoding. Searches whole buffers when ``raw`` is buffer-backed, for every key
    in one pass."""
    needles = [b'"' + key.encode() + b'"' for key in keys]
    buffers = getattr(raw, "_buffers", None)
    if buffers is None:
        return np.fromiter(
            (any(n in raw[i] for n in needles) for i in index.tolist()), bool, len(index)
        )
    hits = np.zeros(len(raw), dtype=bool)
    bounds = [*raw._first, len(raw)]  # type: ignore[attr-defined]
    for b, buffer in enumerate(buffers):
        found = _positions(buffer, needles)
        if len(found):
            lo, hi = bounds[b], bounds[b + 1]
            entry = np.searchsorted(raw._starts[lo:hi], found, side="right") - 1  # type: ignore[attr-defined]
            hits[lo + entry[entry >= 0]] = True
    return hits[index]


def _positions(buffer: bytes, needles: list[bytes]) -> np.ndarray:
    """Offsets in ``buffer`` where one of ``needles`` starts (each a quoted key, at least 3
    bytes), in no order: every byte equal to a needle's second one found in one numpy pass,
    then the rest of each needle compared at those places only. (``bytes.find`` per needle held
    the GIL for ~25 ms a needle over a 45 MB trace's args; this is ~2x faster for two needles
    and runs while the GIL is released.)"""
    data = np.frombuffer(buffer, np.uint8)
    seconds = sorted({needle[1] for needle in needles})
    first = data[1:] == seconds[0]
    for byte in seconds[1:]:
        first |= data[1:] == byte
    places = np.flatnonzero(first)  # (offsets of a needle's first byte)
    found = []
    for needle in needles:
        at = places[places + len(needle) <= len(data)]
        for k in (0, *range(2, len(needle))):
            at = at[data[at + k] == needle[k]]
            if len(at) == 0:
                break
        found.append(at)
    return np.concatenate(found) if found else np.zeros(0, np.int64)
