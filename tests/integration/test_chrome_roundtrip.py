"""A Chrome export of a loaded trace reloads to the same events (real shared traces)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED_TRACES, all_shared_trace_files, shared_traces_dir

from neuron_profiler.exporters.chrome import write_chrome_trace
from neuron_profiler.trace import load_trace
from neuron_profiler.trace import schema as S

FILES = all_shared_trace_files(SHARED_TRACES) if SHARED_TRACES.is_dir() else [None]
SAME = (S.TS_NS, S.DUR_NS, S.PH, S.KIND, S.EXTERNAL_ID, S.CORRELATION, S.FLOW_ID)


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name if p else "no-shared")
def test_export_reloads_to_same_events(path: Path | None, suffix: str, tmp_path: Path) -> None:
    shared_traces_dir()
    original = load_trace(path)
    out = write_chrome_trace(original, tmp_path / ("out" + suffix))
    again = load_trace(out)
    assert len(again) == len(original) and again.skipped_events == 0
    for column in SAME:
        assert np.array_equal(again.col(column), original.col(column)), column
    for column, labels in ((S.PID, "pid_labels"), (S.TID, "tid_labels")):
        # string pids/tids are interned in first-seen order, so compare the original text
        resolve = lambda t: [getattr(t, labels).get(v, v) for v in t.col(column).tolist()]  # noqa: E731,B023
        assert resolve(again) == resolve(original), column
    names = lambda t: [t.strings[i] for i in t.col(S.NAME_ID)]  # noqa: E731
    assert names(again) == names(original)
    assert again.process_names == original.process_names
    assert again.thread_names == original.thread_names
    rows = np.flatnonzero(original.col(S.ARGS_ROW) >= 0)[:200]
    assert all(again.args(r) == original.args(r) for r in rows)
    if suffix == ".json":
        json.loads(out.read_text())  # valid JSON for any other tool
