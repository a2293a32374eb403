"""Exact, vectorised µs-text -> integer-ns conversion for ``ts``/``dur`` values.

Kineto writes µs with a ns fraction (``4458676522690.655``); as a float64 such a value is off by
up to a ns above 2**41 µs (and by ~100 ns for absolute epoch µs), so the loader never goes through
float: it keeps each value's JSON text (``msgspec.Raw``) and converts the digits here with numpy.
Numbers and numeric strings (``"12.5"``) are handled alike; a 4th decimal rounds half away from
zero. Anything unusual (exponents, ``+``, spaces, nested values) is left to a per-value fallback.

    ns, status = us_texts_to_ns([b"1.5", b'"2.25"', b""])   # -> [1500, 2250, 0], [OK, OK, MISSING]
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np

from neuron_profiler.trace.schema import python_int

OK, MISSING, INVALID = 0, 1, 2
_BATCH = 65536
_POW10 = np.array([10**k for k in range(19)], dtype=np.int64)
_MAX_INT_DIGITS = 16  # epoch µs have 16 digits; below 9e15 µs (* 1000) int64 cannot overflow


def us_texts_to_ns(texts: Sequence[bytes | msgspec.Raw]) -> tuple[np.ndarray, np.ndarray]:
    """Integer ns and a status (OK / MISSING / INVALID) for each JSON text of a µs value."""
    n = len(texts)
    ns = np.zeros(n, dtype=np.int64)
    status = np.zeros(n, dtype=np.uint8)
    for lo in range(0, n, _BATCH):
        hi = min(lo + _BATCH, n)
        ns[lo:hi], status[lo:hi] = _convert_batch(texts[lo:hi])
    return ns, status


def _convert_batch(texts: Sequence[bytes | msgspec.Raw]) -> tuple[np.ndarray, np.ndarray]:
    n = len(texts)
    joined = b"\n".join(texts) + b"\n"  # a literal newline never occurs inside a JSON token
    buf = np.frombuffer(joined, dtype=np.uint8)
    ends = np.flatnonzero(buf == 10)
    starts = np.empty(n, dtype=np.int64)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts
    last = np.maximum(ends - 1, 0)
    quoted = (lengths >= 2) & (buf[starts] == 34) & (buf[last] == 34)
    body_start = starts + quoted
    body_end = ends - quoted
    neg = (body_end > body_start) & (buf[np.minimum(body_start, len(buf) - 1)] == 45)
    body_start = body_start + neg

    item = np.repeat(np.arange(n, dtype=np.int64), lengths + 1)
    pos = np.arange(len(buf), dtype=np.int64)
    in_body = (pos >= body_start[item]) & (pos < body_end[item])
    digit = (buf >= 48) & (buf <= 57) & in_body
    dot = (buf == 46) & in_body
    bad = in_body & ~digit & ~dot
    n_bad = np.add.reduceat(bad, starts, dtype=np.int64)
    n_dot = np.add.reduceat(dot, starts, dtype=np.int64)
    n_digit = np.add.reduceat(digit, starts, dtype=np.int64)
    dot_pos = np.minimum.reduceat(np.where(dot, pos, len(buf)), starts)
    dot_pos = np.where(n_dot > 0, dot_pos, body_end)

    dp = dot_pos[item]
    k = np.where(pos < dp, dp - pos + 2, 3 - (pos - dp))  # 10**k ns per unit of this digit
    value = (buf.astype(np.int64) - 48) * _POW10[np.clip(k, 0, 18)]
    total = np.add.reduceat(np.where(digit & (k >= 0), value, 0), starts)
    round_up = np.add.reduceat(digit & (k == -1) & (buf >= 53), starts, dtype=np.int64)
    total = total + round_up  # 4th decimal >= 5 rounds half away from zero
    total = np.where(neg, -total, total)

    missing = (lengths == 0) | ((lengths == 4) & (buf[np.minimum(starts, len(buf) - 1)] == 110))
    int_digits = dot_pos - body_start
    lead = buf[np.minimum(body_start, len(buf) - 1)]
    fits = (int_digits < _MAX_INT_DIGITS) | ((int_digits == _MAX_INT_DIGITS) & (lead < 57))
    regular = (n_bad == 0) & (n_dot <= 1) & (n_digit > 0) & fits
    status = np.where(missing, MISSING, np.where(regular, OK, INVALID)).astype(np.uint8)
    total = np.where(status == OK, total, 0)
    for i in np.flatnonzero(status == INVALID).tolist():  # rare: exponents, epoch µs, junk
        parsed = _fallback(bytes(joined[starts[i] : ends[i]]))
        if parsed is not None and -(2**63) <= parsed < 2**63:
            total[i], status[i] = parsed, OK
    return total, status


def _fallback(text: bytes) -> int | None:
    """One value the vectorised path does not take: decode it and convert exactly if numeric."""
    try:
        value = msgspec.json.decode(text)
    except msgspec.DecodeError:
        return None
    return value_to_ns(value)


def value_to_ns(value: object) -> int | None:
    """µs as int / float / numeric string -> ns (strings exactly); None when not a number."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    if isinstance(value, int):
        return value * 1000
    if isinstance(value, str):
        text = value.strip()
        sign = -1 if text.startswith("-") else 1
        whole, _, frac = text.lstrip("+-").partition(".")
        if (whole or frac) and (not whole or whole.isdigit()) and (not frac or frac.isdigit()):
            frac = frac + "0000"
            rounded = int(whole or "0") * 1000 + int(frac[:3]) + (frac[3] >= "5")
            return sign * rounded
        try:
            value = float(text)
        except ValueError:
            return None
    if value != value or value in (float("inf"), float("-inf")):
        return None
    whole_us = int(value)  # split so large floats keep what precision they have
    return whole_us * 1000 + round((value - whole_us) * 1000)


def python_int_column(values: list[object], default: int = -1) -> np.ndarray:
    """``python_int`` of each value, through a memo of the distinct values (a piece has a
    handful); values that cannot be memoised (lists, objects, NaN) one by one."""
    try:
        memo = {v: python_int(v, default) for v in set(values)}
        return np.fromiter(map(memo.__getitem__, values), dtype=np.int64, count=len(values))
    except (TypeError, KeyError):  # unhashable, or NaN (never equal to itself)
        return np.fromiter(
            (python_int(v, default) for v in values), dtype=np.int64, count=len(values)
        )
