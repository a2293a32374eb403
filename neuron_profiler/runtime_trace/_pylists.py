"""Python lists of decoded objects -> numpy columns, with the loops in C (map, itemgetter).

Shared by the system-trace parser and the collector's session, which both hold hundreds of
thousands of decoded msgspec Structs per profile."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from itertools import count
from operator import itemgetter
from typing import Any

import numpy as np


def codes(values: Iterable[Any], n: int) -> tuple[list[Any], np.ndarray]:
    """Distinct values (first-seen order) and each of the ``n`` values' code, in one pass."""
    table: defaultdict[Any, int] = defaultdict(count().__next__)
    out = np.fromiter(map(table.__getitem__, values), dtype=np.int64, count=n)
    return list(table), out


def take(values: list[Any], rows: np.ndarray) -> list[Any]:
    """``values[rows]`` for a Python list."""
    if len(rows) < 2:
        return [values[i] for i in rows.tolist()]
    return list(itemgetter(*rows.tolist())(values))
