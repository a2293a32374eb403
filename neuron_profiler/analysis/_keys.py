"""Int keys (correlation ids, External ids) looked up in bulk::

    k = index_of(keys, wanted)        # per wanted value: its index in keys (sorted, distinct), -1

Ids are small non-negative ints, mostly: then a table indexed by the id answers each lookup
with one memory access, where a binary search over millions of keys misses the cache at each of
its ~20 steps (wanted values in no order: up to ten times slower). Other keys (negative, or
spread far beyond their count) are searched.
"""

from __future__ import annotations

import numpy as np

# a table of up to this many entries beyond 4 per key is built (an int32 each)
TABLE_SLACK = 1 << 16
TABLE_PER_KEY = 4


def index_of(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Index of each ``wanted`` value in ``keys`` (sorted, distinct ints), -1 where absent."""
    wanted = np.asarray(wanted)
    if len(keys) == 0:
        return np.full(len(wanted), -1, np.int64)
    low, high = int(keys[0]), int(keys[-1])
    if low >= 0 and high < TABLE_SLACK + TABLE_PER_KEY * len(keys) and len(keys) < 2**31:
        table = np.full(high + 2, -1, np.int32)  # the last entry: every value out of range
        table[keys] = np.arange(len(keys), dtype=np.int32)
        at = np.where((wanted < 0) | (wanted > high), high + 1, wanted)
        return table[at].astype(np.int64)
    k = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    return np.where(keys[k] == wanted, k, -1)
