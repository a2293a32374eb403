from __future__ import annotations

import numpy as np

from neuron_profiler.trace import EventKind, Phase, TraceBuilder
from neuron_profiler.trace import schema as S


def test_builder_sorts_by_time_and_keeps_args() -> None:
    b = TraceBuilder()
    b.add(name="late", ts_ns=200, dur_ns=5, kind=EventKind.KERNEL, args={"External id": 7})
    b.add(name="early", ts_ns=100, dur_ns=50, kind=EventKind.CPU_OP)
    t = b.build()
    assert len(t) == 2
    assert list(t.col(S.TS_NS)) == [100, 200]
    assert t.name(0) == "early" and t.name(1) == "late"
    assert t.args(1) == {"External id": 7} and t.args(0) == {}
    assert t.col(S.EXTERNAL_ID)[1] == 7
    assert np.array_equal(t.select(kind=EventKind.KERNEL), [1])
    assert list(t.to_frame()["name"]) == ["early", "late"]
    assert t.mask(ph=Phase.COMPLETE).all()
