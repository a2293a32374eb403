"""Every real trace in ../shared/traces loads; counts match an independent json.load count."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from conftest import SHARED_TRACES, all_shared_trace_files, shared_traces_dir

from neuron_profiler.trace import EventKind, load_trace
from neuron_profiler.trace import schema as S

FILES = all_shared_trace_files(SHARED_TRACES) if SHARED_TRACES.is_dir() else [None]


def _events_by_stdlib(path: Path) -> list[dict]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as fh:
        return json.load(fh)["traceEvents"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name if p else "no-shared")
def test_loads_with_every_event_accounted_for(path: Path | None) -> None:
    shared_traces_dir()
    events = _events_by_stdlib(path)
    trace = load_trace(path)
    non_meta = [e for e in events if e.get("ph") != "M"]
    assert len(trace) + trace.skipped_events == len(non_meta)
    assert trace.skipped_events == 0
    kernels = sum(1 for e in non_meta if str(e.get("cat", "")).lower() in ("kernel", "mtia_ccp_events"))
    assert len(trace.select(kind=EventKind.KERNEL)) == kernels
    ts = trace.col(S.TS_NS)
    assert (ts[1:] >= ts[:-1]).all()
    with_ext = sum(1 for e in non_meta if "External id" in (e.get("args") or {}))
    assert int((trace.col(S.EXTERNAL_ID) >= 0).sum()) == with_ext
