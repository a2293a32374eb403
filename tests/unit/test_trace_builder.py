from __future__ import annotations

import numpy as np

from neuron_profiler.trace import EventKind, Phase, Trace, TraceBuilder
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


def test_producers_without_the_form_column_still_build_a_trace() -> None:
    """A column added later (FORM) gets its "nothing here" value for producers that predate
    it, so exporters never meet a missing column."""
    cols = {
        c: np.zeros(3, dtype=S.COLUMN_DTYPES.get(c, np.int64))
        for c in S.EVENT_COLUMNS
        if c != S.FORM
    }
    t = Trace(columns=cols, strings=[""], raw_args=[])
    assert t.col(S.FORM).dtype == np.uint8 and t.col(S.FORM).tolist() == [0, 0, 0]
    assert S.default_column(S.FLOW_ID, 2).tolist() == [-1, -1]


def test_builder_keeps_form() -> None:
    b = TraceBuilder()
    b.add(name="mark", ts_ns=5, ph=Phase.INSTANT, form=2 | S.Form.NO_CAT)
    assert b.build().col(S.FORM).tolist() == [2 | S.Form.NO_CAT]


def test_builder_stream_column_follows_the_args() -> None:
    """STREAM is Python's int() of args["stream"] (HTA's rule), -1 without a usable one."""
    b = TraceBuilder()
    values = [7, "8", 9.9, None, "0x1f", [1]]
    for i, value in enumerate(values):
        b.add(name=f"k{i}", ts_ns=i, kind=EventKind.KERNEL, args={"stream": value})
    b.add(name="none", ts_ns=99)
    assert b.build().col(S.STREAM).tolist() == [7, 8, 9, -1, -1, -1, -1]
