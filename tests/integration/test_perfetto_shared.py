"""Every shared trace exports to .pftrace that perfetto's own protos decode, with the stream's
invariants holding and every event accounted for (written, or counted as left out)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED_TRACES, all_shared_trace_files, shared_traces_dir
from perfetto_checks import decode_and_check

from neuron_profiler.exporters.chrome import write_chrome_trace
from neuron_profiler.exporters.perfetto import write_perfetto_trace
from neuron_profiler.trace import Phase, load_trace
from neuron_profiler.trace import schema as S
from neuron_profiler.trace.model import Trace

FILES = all_shared_trace_files(SHARED_TRACES) if SHARED_TRACES.is_dir() else [None]
FLOW_PHASES = [Phase.FLOW_START, Phase.FLOW_STEP, Phase.FLOW_END]


Exported = dict[Path, tuple[Trace, int]]


@pytest.fixture(scope="module")
def exported() -> Iterator[Exported]:
    """Each shared trace as loaded and the size of its .pftrace, kept from its own test for
    the size test (which does the same where a trace's test did not run)."""
    done: Exported = {}
    yield done
    done.clear()


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name if p else "no-shared")
def test_shared_trace_exports_and_decodes(
    path: Path | None, tmp_path: Path, exported: Exported
) -> None:
    shared_traces_dir()
    trace = load_trace(path)
    result = write_perfetto_trace(trace, tmp_path / "out.pftrace")
    exported[path] = (trace, result.bytes_written)
    d = decode_and_check(result.path)  # uuids, parents, nesting, flows, flags, interning
    ph, dur = trace.col(S.PH), trace.col(S.DUR_NS)
    complete = ph == Phase.COMPLETE
    names = np.asarray(trace.strings, dtype=object)[trace.col(S.NAME_ID)]
    start = trace.col(S.TS_NS)
    expected = Counter(
        zip(
            names[complete & (dur > 0)].tolist(),
            start[complete & (dur > 0)].tolist(),
            (start + dur)[complete & (dur > 0)].tolist(),
            strict=True,
        )
    )
    assert Counter((n, s, e) for _, n, _, s, e in d.slices) == expected
    instants = (complete & (dur == 0)) | (ph == Phase.INSTANT)
    assert len(d.instants) == int(instants.sum())
    flow_events = int(np.isin(ph, FLOW_PHASES).sum())
    written_ends = sum(len(ends) for ends in d.flows.values())
    assert len(d.flows) == result.flows
    assert (
        written_ends
        + result.unbound_flow_endpoints
        + result.orphan_flow_endpoints
        + result.skipped.get("flow without id", 0)
        == flow_events
    )
    accounted = (
        len(d.slices)
        + len(d.instants)
        + flow_events
        + result.skipped.get("negative duration", 0)
        + result.skipped.get("unpaired begin/end", 0)
        + result.skipped.get("unknown phase", 0)
        + int((ph == Phase.COUNTER).sum())
    )
    assert accounted == len(trace) - result.skipped.get("negative timestamp", 0)
    processes = {t.process.process_name for t in d.tracks.values() if t.HasField("process")}
    for pid, name in trace.process_names.items():
        if (trace.col(S.PID) == pid).any():
            assert name in processes, name
    scope = trace.col(S.FORM) & S.Form.SCOPE
    on_global_track = (ph == Phase.INSTANT) & (scope == S.SCOPES.index("g"))
    drawn = set(trace.col(S.PID)[complete | (instants & ~on_global_track)].tolist())
    for pid, label in trace.pid_labels.items():  # Kineto's "Spans", "Traces", ""
        if pid in drawn and pid not in trace.process_names:
            assert (label or '(unnamed process, pid "")') in processes, label
    assert not processes & {"", '""'}  # the empty pid Kineto writes is named for what it is


def test_shared_traces_pftrace_at_most_40_percent_of_chrome_json(
    tmp_path: Path, exported: Exported
) -> None:
    """Issue 4's size target, over all shared traces together (uncompressed JSON)."""
    root = shared_traces_dir()
    pftrace = chrome = 0
    for path in all_shared_trace_files(root):
        if path not in exported:
            trace = load_trace(path)
            exported[path] = (
                trace,
                write_perfetto_trace(trace, tmp_path / "t.pftrace").bytes_written,
            )
        trace, pftrace_bytes = exported[path]
        pftrace += pftrace_bytes
        chrome += write_chrome_trace(trace, tmp_path / "t.json").stat().st_size
    assert pftrace <= 0.40 * chrome, pftrace / chrome
