"""``_shares``: items' shares of an interval set where they overlap, and of a cover whose
intervals overlap (one set per device), against hand-worked figures and a per-ns walk."""

from __future__ import annotations

import numpy as np

from neuron_profiler.analysis import _intervals as I
from neuron_profiler.analysis._shares import split_among, split_among_cover


def walk(start, end, covers) -> np.ndarray:  # noqa: ANN001
    """Per item: Σ over ns t of (covers holding t) / (items holding t), one ns at a time."""
    out = np.zeros(len(start))
    for t in range(0, int(max(end.max(), max(e.max() for _, e in covers))) + 1):
        on = (start <= t) & (t < end)
        c = sum(int(((s <= t) & (t < e)).any()) for s, e in covers)
        if on.any() and c:
            out[on] += c / on.sum()
    return out


def test_two_devices_idle_under_one_op_and_two_overlapping() -> None:
    # items: op 0 [0, 10), op 1 [5, 15); device A idle [0, 10), device B idle [8, 12)
    start, end = np.array([0, 5]), np.array([10, 15])
    share = split_among_cover(start, end, np.array([0, 8]), np.array([10, 12]))
    # [0,5): A, op 0 alone: 5 | [5,8): A, both: 1.5 each | [8,10): A+B, both: 2 each
    # [10,12): B, op 1 alone: 2
    assert share.tolist() == [5 + 1.5 + 2, 1.5 + 2 + 2]


def test_cover_is_the_sum_of_per_device_splits_and_a_walk() -> None:
    rng = np.random.default_rng(26)
    for _ in range(50):
        start = rng.integers(0, 300, 12)
        end = start + rng.integers(0, 60, 12)
        devices = []
        for _ in range(3):
            s = rng.integers(0, 330, 5)
            devices.append(I.union(s, s + rng.integers(1, 40, 5)))
        cover = split_among_cover(
            start,
            end,
            np.concatenate([d.start for d in devices]),
            np.concatenate([d.end for d in devices]),
        )
        assert np.allclose(cover, sum(split_among(start, end, d) for d in devices))
        assert np.allclose(cover, walk(start, end, [(d.start, d.end) for d in devices]))
        one = devices[0]
        assert np.array_equal(
            split_among_cover(start, end, one.start, one.end), split_among(start, end, one)
        )
