"""A 1 MB name on many rows: the analysis and the projection classify names once per distinct
string (``selections.per_name``), never as a per-row fixed-width text array, which would be as
wide as the longest name (4 MB a row here: 80 GB for 20,000 rows, refused at once). Asserted
on behaviour: each run completes and equals the same trace with a short name."""

from __future__ import annotations

import pytest
from trace_factory import Build

from neuron_profiler.analysis.projection import project
from neuron_profiler.trace import EventKind
from neuron_profiler.trace import vocabulary as V

MB = 1_000_000
ROWS = 20_000


def _cpu_only(name: str) -> Build:
    """One 1 s step of ROWS back-to-back 10 µs ops named ``name`` (an aten op: moved onto the
    device, priced as vector work on 1024 floats)."""
    b = Build().step(1, 0, 10 * ROWS + 10)
    dims = {"Input Dims": [[1024]], "Input type": ["float"]}
    for i in range(ROWS):
        b.host(name, 10 * i, 10 * i + 10, args=dims)
    return b


def _syncs(name: str) -> Build:
    """A device trace whose host waits ROWS times in our runtime's sync rows named ``name``:
    each 90 µs, from the end of a 5 µs kernel to the launch of the next (a host_sync gap)."""
    b = Build().step(1, 0, 100 * ROWS + 100)
    for i in range(ROWS):
        b.kernel(100 * i, 100 * i + 5, launch_us=100 * i)
        b.host(name, 100 * i + 5, 100 * i + 95, kind=EventKind.RUNTIME, cat=V.CAT_RUNTIME)
    return b


@pytest.mark.parametrize("long_name", ["aten::" + "x" * MB])
def test_cpu_only_projection_of_a_long_name_on_many_rows(long_name: str) -> None:
    long = project(_cpu_only(long_name).b.build(), "trn2")
    short = project(_cpu_only("aten::x").b.build(), "trn2")
    assert long.target.step_ms == pytest.approx(short.target.step_ms)
    assert [(c.cls, c.target_ms) for c in long.classes] == [
        (c.cls, c.target_ms) for c in short.classes
    ]
    assert [o.name for o in long.ops] == [long_name]


def test_sync_analysis_of_a_long_name_on_many_rows() -> None:
    long = _syncs(V.SYNC_PREFIX + "x" * MB).report()
    short = _syncs(V.SYNC_PREFIX + "x").report()
    assert long.idle.by_cause_ns == short.idle.by_cause_ns
    assert long.idle.by_cause_ns["host_sync"] > 0
    assert [(g.calls, g.host_ns) for g in long.findings.syncs] == [
        (g.calls, g.host_ns) for g in short.findings.syncs
    ]
    assert [g.calls for g in long.findings.syncs] == [ROWS]
