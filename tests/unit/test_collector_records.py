"""The one record layout: runtime_trace.records.RECORD is the C++ bridge's ``struct Record``
field for field, a module whose layout differs does not load (one line says why), the bridge
takes only arrays of that layout, and the test and bench entry points live in their own module."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from neuron_profiler.collectors import _build  # noqa: E402
from neuron_profiler.errors import CollectorUnavailableError  # noqa: E402
from neuron_profiler.runtime_trace import records  # noqa: E402
from neuron_profiler.runtime_trace.records import RECORD  # noqa: E402


def _buffer(n: int) -> dict:
    rows = np.zeros(n, dtype=RECORD)
    rows["end_ns"] = 10
    rows["kineto_type"] = records.KINETO_KERNEL
    rows["args_id"] = -1
    return {"rows": rows, "names": ["TensorE: mm"], "args": []}


def test_bridge_and_testing_module_lay_records_out_as_RECORD() -> None:
    assert _build.load_bridge().record_dtype() == RECORD
    assert _build.load_testing_bridge().record_dtype() == RECORD
    assert _build.layout_mismatch(RECORD) is None


def test_a_different_layout_is_named_in_one_line() -> None:
    names = list(RECORD.names)
    swapped = np.dtype(
        [(n, RECORD.fields[n][0]) for n in [names[1], names[0], *names[2:]]], align=True
    )
    assert _build.layout_mismatch(swapped) == (
        "the bridge has end_ns at 0 (int64) where RECORD has start_ns at 0 (int64)"
    )
    shorter = np.dtype([(n, RECORD.fields[n][0]) for n in names[:-1]], align=True)
    assert _build.layout_mismatch(shorter) == (
        "the bridge has nothing where RECORD has gbps at 128 (float64)"
    )
    padded = np.dtype(
        {
            "names": names,
            "formats": [RECORD.fields[n][0] for n in names],
            "offsets": [RECORD.fields[n][1] for n in names],
            "itemsize": 144,
        }
    )
    assert _build.layout_mismatch(padded) == "the bridge's records are 144 bytes, RECORD's 136"


def test_a_module_whose_layout_differs_does_not_load(monkeypatch: pytest.MonkeyPatch) -> None:
    _build.load_bridge()  # built (or cached) with the real layout
    names = list(RECORD.names)
    monkeypatch.setattr(
        records,
        "RECORD",
        np.dtype(
            [(n, RECORD.fields[n][0]) for n in [*names[:-2], names[-1], names[-2]]], align=True
        ),
    )
    monkeypatch.setattr(_build, "_loaded", {})
    with pytest.raises(CollectorUnavailableError) as err:
        _build.load_bridge()
    message = str(err.value)
    assert "\n" not in message and "does not match runtime_trace.records.RECORD" in message
    assert (
        "the bridge has tflops at 120 (float64) where RECORD has gbps at 120 (float64)" in message
    )


def test_product_module_has_no_test_entry_points() -> None:
    bridge = _build.load_bridge()
    assert {"register_profiler", "current_correlation_id", "record_dtype"} <= set(dir(bridge))
    for name in ("convert_records", "render_seconds", "_push_correlation", "_pop_correlation"):
        assert not hasattr(bridge, name)
    assert _build.module_name() != _build.module_name(testing=True)


def test_bridge_takes_only_contiguous_RECORD_arrays() -> None:
    testing = _build.load_testing_bridge()
    _, count, rows = testing.convert_records(_buffer(4))
    assert count == 4 and [r[1] for r in rows] == ["TensorE: mm"] * 4
    bad = [
        {**_buffer(4), "rows": np.zeros(4, dtype=np.int64)},  # not records at all
        {**_buffer(4), "rows": _buffer(8)["rows"][::2]},  # not contiguous
        {**_buffer(4), "rows": _buffer(4)["rows"].tolist()},
    ]  # not an array
    for buffer in bad:
        with pytest.raises(RuntimeError, match="not a contiguous array of records.RECORD rows"):
            testing.convert_records(buffer)
    out_of_range = _buffer(2)
    out_of_range["rows"]["name_id"][1] = 1
    with pytest.raises(RuntimeError, match="row 1 has a bad index"):
        testing.convert_records(out_of_range)


def test_testing_module_drives_the_correlation_stack() -> None:
    testing = _build.load_testing_bridge()
    assert testing.current_correlation_id() == 0
    testing._push_correlation(5)
    testing._push_correlation(6)
    assert testing.current_correlation_id() == 6
    testing._pop_correlation()
    assert testing.current_correlation_id() == 5
    testing._pop_correlation()
    testing._pop_correlation()  # popping an empty stack does nothing
    assert testing.current_correlation_id() == 0
