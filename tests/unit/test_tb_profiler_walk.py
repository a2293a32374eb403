"""The vectorised step walk equals torch-tb-profiler 0.4.3's two-pointer loop, call for call."""

from __future__ import annotations

import numpy as np
import pytest

from neuron_profiler.analysis.compat.tb_profiler import _walk


def _walk_as_0_4_3(rs: np.ndarray, re_: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """The loop of torch-tb-profiler 0.4.3 (``_find_device_steps``), transcribed: calls by
    start against steps in order; a call counts for the current step when wholly inside it."""
    out = np.full(len(rs), -1, np.int64)
    i = j = 0
    while i < len(s) and j < len(rs):
        if rs[j] < s[i]:
            j += 1
        elif re_[j] <= e[i]:
            out[j] = i
            j += 1
        elif rs[j] < e[i]:
            j += 1
        else:
            i += 1
    return out


@pytest.mark.parametrize("seed", range(4))
def test_walk_equals_the_loop(seed: int) -> None:
    """Overlapping steps, calls on step boundaries, zero and negative lengths (hostile input),
    and long runs of calls (the chunked search)."""
    rng = np.random.default_rng(seed)
    for _ in range(500):
        steps, calls = int(rng.integers(1, 8)), int(rng.integers(0, 400))
        s = np.sort(rng.integers(0, 100, steps))
        e = s + rng.integers(-5, 40, steps)
        rs = np.sort(rng.integers(0, 130, calls))
        re_ = rs + rng.integers(-4, 20, calls)
        assert _walk(rs, re_, s, e).tolist() == _walk_as_0_4_3(rs, re_, s, e).tolist()
